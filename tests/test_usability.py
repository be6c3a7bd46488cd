"""Using patchkeeper as a new user would: pipes, names, completion, backups, demo, README (issue 13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, SITE_REL, copy_venv, edit_file, make_workspace


def _closed_reader(env, *args: str) -> subprocess.CompletedProcess:
    """Run the CLI with stdout a pipe whose reader has already left, as `| head` leaves it."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run(
            [sys.executable, "-m", "patchkeeper", "--workspace", str(env.root), *args],
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(w)


def test_output_into_a_pipe_whose_reader_left_stops_quietly(baselined):
    env = baselined
    env.pk("apply", "ddtree")
    edit_file(env.site / "sglang/version.py", b"__version__ = 'edited'\n")
    for args, code in (
        (("status",), 0),
        (("log", "--json"), 0),
        (("diff", "-p"), 1),
        (("export", "ddtree"), 0),
    ):
        proc = _closed_reader(env, *args)
        assert proc.stderr == "", (args, proc.stderr)
        assert proc.returncode in (code, 141), (args, proc.returncode)


def test_diff_takes_the_target_as_every_per_target_verb_does(baselined, tmp_path):
    env = baselined
    second = copy_venv(env.venv, tmp_path / "venv2")
    toml = env.root / "patchkeeper.toml"
    toml.write_text(
        toml.read_text() + f'\n[targets.other]\npython = "{second}/bin/python"\npackage = "sglang"\n'
    )
    env.pk("snapshot", "-t", "other", "--name", "start", "--manifest-only")
    edit_file(second / "lib/python3.11/site-packages/sglang/version.py", b"edited = True\n")
    proc = env.pk("diff", "-t", "other", check=1)
    assert proc.stdout.startswith("other against state") and "changed  sglang/version.py" in proc.stdout
    env.pk("diff", "-t", "local", "other", check=1)  # -t A B: A against B


def _complete(env, *words: str) -> list[str]:
    """What bash completion offers for the last word, through click's completion protocol."""
    exe = os.path.join(os.path.dirname(sys.executable), "patchkeeper")
    proc = subprocess.run(
        [exe],
        capture_output=True,
        text=True,
        check=True,
        env={
            **os.environ,
            "_PATCHKEEPER_COMPLETE": "bash_complete",
            "PATCHKEEPER_WORKSPACE": str(env.root),
            "COMP_WORDS": " ".join(("patchkeeper",) + words),
            "COMP_CWORD": str(len(words)),
        },
    )
    return [line.split(",", 1)[1] for line in proc.stdout.splitlines()]


def test_shell_completion_of_patch_set_target_and_state_names(baselined):
    env = baselined
    toml = env.root / "patchkeeper.toml"
    toml.write_text(
        toml.read_text()
        + '\n[targets.ct129]\nssh = "ct129"\npython = "/usr/bin/python3"\npackage = "sglang"\n'
    )
    assert _complete(env, "apply", "d") == ["ddtree", "dflash"]
    assert _complete(env, "show", "") == ["ddtree", "dflash", "nextn"]
    assert _complete(env, "status", "-t", "c") == ["ct129"]
    assert _complete(env, "diff", "") == ["ct129", "local"]
    env.pk("snapshot", "--name", "before-ddtree")
    state = json.loads((env.root / "snapshots/local/state.json").read_text())["id"]
    assert _complete(env, "rollback", "--to", "b") == ["baseline", "before-ddtree"]
    assert _complete(env, "rollback", "--to", state[:3]) == [state]
    assert _complete(env, "rollback", "-t", "ct129", "--to", "") == [
        "baseline",
        "previous",
    ]  # never contacts ct129


def test_backed_up_hand_edits_are_named_by_digest_and_can_be_got_back(baselined):
    env = baselined
    env.pk("apply", "ddtree", "--no-verify")
    spec = env.site / "sglang/srt/speculative/spec_info.py"
    mine = spec.read_bytes() + b"# my hand edit\n"
    edit_file(spec, mine)
    proc = env.pk("rollback", "--to", "baseline", "--no-verify")
    (line,) = [
        l
        for l in proc.stdout.splitlines()
        if l.startswith("  backup of sglang/srt/speculative/spec_info.py: ")
    ]
    digest = line.split(": ", 1)[1]
    assert digest.startswith("blake3:") and len(digest) == len("blake3:") + 64
    assert "patchkeeper show-backup DIGEST -t local > FILE" in proc.stdout
    newest = json.loads(env.pk("log", "--json").stdout)[0]
    assert newest["extra"]["backups"] == {"sglang/srt/speculative/spec_info.py": digest}
    assert f"spec_info.py ({digest[: len('blake3:') + 16]}…)" in env.pk("log").stdout
    got = subprocess.run(
        [sys.executable, "-m", "patchkeeper", "--workspace", str(env.root), "show-backup", digest],
        capture_output=True,
        check=True,
    )
    assert got.stdout == mine
    short = env.pk("show-backup", digest.partition(":")[2][:10], "-t", "local")
    assert short.stdout.encode() == mine
    env.pk("show-backup", "blake3:" + "0" * 64, check=2)
    env.pk("show-backup", "abc", check=2)


def _installed_venv(path, wheel) -> None:
    """A venv with the sglang wheel installed by pip, as a user would (console scripts in bin/)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(path / "bin/python"),
            "install",
            "-q",
            "--no-compile",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
    )


def test_two_installs_of_one_wheel_at_different_paths_are_the_same_code_state(tmp_path):
    wheels = sorted(Path(os.environ.get("PK_WHEELS", REPO / ".cache/wheels")).glob("sglang-0.5.23-*.whl"))
    if not wheels:
        pytest.fail("the sglang wheel is missing: run the tests with `make test`")
    a, b = tmp_path / "venv-a", tmp_path / "somewhere" / "else" / "venv-b"
    for venv in (a, b):
        _installed_venv(venv, wheels[0])
    record = f"{SITE_REL}/sglang-0.5.23.dist-info/RECORD"
    assert (a / record).read_bytes() != (b / record).read_bytes()  # the console scripts' rows name the venv
    unit_b = tmp_path / "unit-b.service"
    unit_b.write_bytes((REPO / "demo/sglang-qwen.service").read_bytes())
    env = make_workspace(
        tmp_path / "ws",
        a,
        f'\n[targets.b]\npython = "{b}/bin/python"\npackage = "sglang"\n'
        f'[targets.b.files]\nunit = "{unit_b}"\n',
    )
    assert "have the same files" in env.pk("diff", "local", "b").stdout
    ids = []
    for target in ("local", "b"):
        env.pk("snapshot", "-t", target, "--name", "installed", "--manifest-only")
        ids.append(
            json.loads(env.pk("log", "-t", target, "--json").stdout)[-1]["after"]["id"]
        )  # the baseline
    assert ids[0] == ids[1]
    assert "dist-info/RECORD" not in (env.root / "snapshots/local/manifests" / f"{ids[0]}.txt").read_text()


def test_the_demo_target_is_a_venv_of_its_own(tmp_path, pristine_venv):
    """scripts/demo.sh from a fresh checkout: the demo venv shares no inode with the pristine test venv."""
    import shutil

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for part in ("scripts", "demo", "patchsets"):
        shutil.copytree(REPO / part, checkout / part)
    shutil.copy(REPO / "patchkeeper.toml", checkout)
    (checkout / ".venv").symlink_to(Path(sys.executable).parent.parent)
    proc = subprocess.run(
        ["bash", "scripts/demo.sh"],
        cwd=checkout,
        capture_output=True,
        text=True,
        env={**os.environ, "PY": sys.executable},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "demo done: the target is byte for byte back at its baseline" in proc.stdout
    venv = checkout / ".demo/venv"
    assert not (venv / ".done").exists()
    pristine = {(st.st_dev, st.st_ino) for st in (p.lstat() for p in pristine_venv.rglob("*"))}
    assert not any((p.lstat().st_dev, p.lstat().st_ino) in pristine for p in venv.rglob("*"))
    pip = (venv / "bin/pip").read_text().splitlines()[0]
    assert pip.startswith(f"#!{venv}/bin/python"), pip  # its own pip
