"""The managed distribution's installation (installation.py): what pip, uv or a person does to sglang
after a state is recorded is named, never taken for the state (issue 22), with real pip, real uv and
the real sglang 0.5.22 and 0.5.23 wheels."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, SITE_REL, copy_venv, edit_file, make_workspace, tree

WHEELS = Path(os.environ.get("PK_WHEELS", REPO / ".cache" / "wheels"))
SPEC = "sglang/srt/speculative/spec_info.py"
ADDED = "sglang/srt/speculative/ddtree_utils.py"


def wheel(version: str) -> Path:
    found = sorted((WHEELS / "port").glob(f"sglang-{version}-*.whl"))
    if not found:
        pytest.fail(f"no sglang {version} wheel in {WHEELS / 'port'}: run `make test`, which downloads it")
    return found[-1]


def pip(venv: Path, *args: str) -> None:
    """The venv's own pip (through its python: the scripts of a hardlinked venv name the pristine
    one's interpreter), offline, without compiling (which is most of its time on a busy machine)."""
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q", *args],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def install(venv: Path, version: str, *extra: str) -> None:
    pip(venv, "install", "--no-index", "--no-compile", "--no-deps", *extra, str(wheel(version)))


def sglang_tree(venv: Path) -> dict:
    return tree(venv / SITE_REL / "sglang")


def doc(env, *args: str, check: int = 0) -> dict:
    return json.loads(env.pk(*args, "--json", check=check).stdout)


def applied(env) -> tuple[str, str]:
    """The current state's id and the applied set as the messages name it (ddtree@VERSION)."""
    state = doc(env, "status")["state"]
    return state["id"], " + ".join(f"{p['name']}@{p['version']}" for p in state["stack"])


# ---- a reinstall of the same wheel ------------------------------------------------------------
def test_a_reinstall_of_the_same_wheel_is_named_and_apply_puts_the_sets_files_back(baselined):
    env = baselined
    env.pk("apply", "ddtree", "--no-verify")
    was = sglang_tree(env.venv)
    state, ddtree = applied(env)
    install(env.venv, "0.5.23", "--force-reinstall")
    assert (env.site / ADDED).exists() and b"DDTREE" not in (env.site / SPEC).read_bytes()  # pip's own doing

    said = f"sglang was reinstalled outside patchkeeper since state {state} ({ddtree})"
    back = f"16 of the 18 files {ddtree} changes are back to the release's bytes"
    out = env.pk("status", check=1).stdout
    assert said in out and back in out and "`patchkeeper apply ddtree` puts the patch sets' files back" in out
    assert doc(env, "status", check=1)["installation"]["change"] == "reinstalled"
    report = doc(env, "audit", check=1)
    assert said in report["summary"] and back in report["summary"]
    assert any(
        f["kind"] == "reinstalled" and f["path"] == "sglang-0.5.23.dist-info" for f in report["findings"]
    )
    out = env.pk("diff", check=1).stdout
    assert said in out and "16 file(s) differ" in out

    for flags in (["-n"], ["--force", "-n"]):  # never "already applied"
        out = env.pk("apply", "ddtree", *flags, "--no-verify").stdout
        assert "already applied" not in out and "16 file(s) would change" in out
        assert f"M {SPEC}" in out
    assert b"DDTREE" not in (env.site / SPEC).read_bytes()  # a dry run changes nothing

    out = env.pk("apply", "ddtree", "--no-verify").stdout
    assert "putting them back" in out and f"16 file(s) changed; state {state} -> {state}" in out
    assert sglang_tree(env.venv) == was
    out = env.pk("status").stdout
    assert (
        "files match the recorded state" in out and "reinstalled" not in out
    )  # the new installation recorded
    assert "already applied; nothing to do" in env.pk("apply", "ddtree", "--no-verify").stdout
    entry = doc(env, "log")[0]
    assert entry["extra"]["restored"].startswith("16 file(s) no longer held what state")
    assert entry["installed"]["version"] == "0.5.23" and entry["installed"]["installer"] == "pip"


def test_a_hand_edit_of_an_applied_sets_file_is_refused_by_apply_not_called_applied(baselined):
    env = baselined
    env.pk("apply", "ddtree", "--no-verify")
    _, ddtree = applied(env)
    edit_file(env.site / SPEC, b"# mine\n")
    err = env.pk("apply", "ddtree", "--no-verify", check=2).stderr
    assert (
        f"{ddtree} is applied (state " in err and "but 1 of its file(s) no longer hold what the state" in err
    )
    assert "(edited by hand?): " + SPEC in err and "--force" in err
    out = env.pk("apply", "ddtree", "--force", "--no-verify").stdout
    assert "backup of " + SPEC in out and b"DDTREE" in (env.site / SPEC).read_bytes()


# ---- another release over a state, and back -----------------------------------------------------
def test_another_release_over_a_state_is_named_and_a_rollback_across_it_refused(baselined, pristine_venv):
    env = baselined
    env.pk("apply", "ddtree", "--no-verify")
    state, ddtree = applied(env)
    install(env.venv, "0.5.22")
    said = f"sglang was downgraded 0.5.23 -> 0.5.22 outside patchkeeper since state {state} ({ddtree})"
    assert said in env.pk("status", check=1).stdout
    assert said in doc(env, "audit", check=1)["summary"]
    assert said in env.pk("diff", check=1).stdout
    before = env.snapshot()

    pin = f"{env.venv}/bin/python -m pip install sglang==0.5.23 --no-deps"
    err = env.pk("rollback", "--to", "baseline", "--no-verify", check=2).stderr
    assert "was recorded with sglang 0.5.23, and 0.5.22 is installed" in err and pin in err
    assert "needs sglang==0.5.23, target local has 0.5.22" in env.pk("apply", "ddtree", check=2).stderr
    for args in (
        ["apply", "ddtree", "--force"],
        ["snapshot", "--name", "x"],
    ):  # 0.5.22's baseline comes first,
        err = env.pk(*args, check=2).stderr  # and pip left ddtree's added file behind
        assert f"{said}, so a baseline of 0.5.22 is recorded first, but 1 file(s)" in err
        assert f"{ADDED} (added)" in err and "--restore-pristine" in err
    assert env.snapshot() == before  # nothing was changed

    pip(
        env.venv,
        "install",
        "--no-index",
        "--no-compile",
        "--find-links",
        str(wheel("0.5.23").parent),
        "sglang==0.5.23",
        "--no-deps",
    )  # the hint's command, offline
    env.pk("rollback", "--to", "baseline", "--no-verify")
    site = env.site
    assert sorted(p.name for p in site.iterdir() if p.name.startswith("sglang")) == [
        "sglang",
        "sglang-0.5.23.dist-info",
    ]
    assert (site / "sglang-0.5.23.dist-info" / "RECORD").is_file()
    assert sglang_tree(env.venv) == {k: v for k, v in sglang_tree(pristine_venv).items()}
    assert "files match the recorded state" in env.pk("status").stdout

    pip(env.venv, "uninstall", "-y", "sglang")  # pip can uninstall what the rollback left
    assert not (site / "sglang").exists() and not list(site.glob("sglang-*.dist-info"))
    err = env.pk("status", check=2).stderr
    assert "sglang was removed outside patchkeeper since state" in err
    assert pin in err  # pinned: an unpinned install would bring another release


def test_an_upgrade_gets_a_baseline_of_its_own_and_the_old_states_wait_for_their_release(
    tmp_path, pristine_venv
):
    venv = copy_venv(pristine_venv, tmp_path / "venv")
    install(venv, "0.5.22")
    env = make_workspace(tmp_path / "ws", venv)
    env.pk("snapshot", "--name", "old")
    recorded = sglang_tree(venv)
    install(venv, "0.5.23")  # pip install -U, outside patchkeeper
    state = doc(env, "status", check=1)["state"]["id"]
    said = f"sglang was upgraded 0.5.22 -> 0.5.23 outside patchkeeper since state {state} (old)"
    assert said in env.pk("status", check=1).stdout
    err = env.pk("rollback", "--to", "old", "--no-verify", check=2).stderr
    assert "was recorded with sglang 0.5.22, and 0.5.23 is installed" in err
    assert f"{venv}/bin/python -m pip install sglang==0.5.22 --no-deps" in err

    assert f"{said}; a real run records a baseline of 0.5.23 first" in env.pk("apply", "ddtree", "-n").stdout
    out = env.pk("apply", "ddtree", "--no-verify").stdout  # 0.5.23's baseline, then ddtree over it
    assert "recorded baseline of local" in out and "18 file(s) changed" in out
    assert "files match the recorded state" in env.pk("status").stdout
    env.pk("rollback", "--to", "baseline", "--no-verify")  # the installed release's baseline
    assert sglang_tree(venv) == sglang_tree(pristine_venv)

    install(venv, "0.5.22")  # the release the old states need, back
    env.pk("rollback", "--to", "old", "--no-verify")
    assert sglang_tree(venv) == recorded
    assert "files match the recorded state" in env.pk("status").stdout


# ---- the distribution's files outside its package -----------------------------------------------
def test_an_edited_console_script_and_a_cut_record_are_findings(baselined):
    env = baselined
    env.pk("snapshot", "--name", "s")
    assert env.pk("audit").returncode == 0
    script = env.venv / "bin" / "sglang"
    kept = script.read_bytes()
    edit_file(script, kept + b"import os; os.system('echo owned')\n")
    report = doc(env, "audit", check=1)
    assert [(f["path"], f["kind"]) for f in report["findings"] if f["class"] == "drift"] == [
        ("../../../bin/sglang", "changed")
    ]
    edit_file(script, kept)
    assert env.pk("audit").returncode == 0

    record = env.site / "sglang-0.5.23.dist-info" / "RECORD"
    lines = record.read_text().splitlines(keepends=True)
    edit_file(
        record, "".join(line for line in lines if not line.startswith(("sglang/", '"sglang/'))).encode()
    )
    report = doc(env, "audit", check=1)
    assert "sglang's RECORD no longer lists the files of sglang 0.5.23 as it did" in report["summary"]
    assert "(5776 rows of the release's files then, 5 now)" in report["summary"]
    env.pk("status", check=1)
    assert "RECORD no longer lists" in env.pk("snapshot", "--name", "t", check=2).stderr


# ---- installers ---------------------------------------------------------------------------------
def _uv(*args: str, cache: Path) -> None:
    uv = Path(sys.executable).parent / "uv"
    proc = subprocess.run(
        [str(uv), *args],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "UV_CACHE_DIR": str(cache),
            "UV_NO_CONFIG": "1",
            "UV_PYTHON_DOWNLOADS": "never",
            "UV_OFFLINE": "1",
        },
    )
    assert proc.returncode == 0, proc.stderr


def _files(root: Path) -> dict[str, tuple[str, int]]:
    out = {}
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_ino)
    return out


def test_pip_and_uv_installs_of_one_wheel_are_one_state_and_uv_links_are_never_written_through(
    baselined, tmp_path
):
    env = baselined
    env.pk("snapshot", "--name", "s", "--manifest-only")
    by_pip = doc(env, "log")[-1]["after"]["id"]  # the baseline

    cache, venv = tmp_path / "uv-cache", tmp_path / "uv-venv"
    base = os.path.realpath(env.venv / "bin" / "python")
    _uv("venv", "-q", "-p", base, str(venv), cache=cache)
    _uv(
        "pip",
        "install",
        "-q",
        "--python",
        str(venv / "bin" / "python"),
        "--no-index",
        "--no-deps",
        "--link-mode",
        "hardlink",
        str(wheel("0.5.23")),
        cache=cache,
    )
    assert (venv / SITE_REL / "sglang-0.5.23.dist-info" / "INSTALLER").read_text().strip() == "uv"
    uv_env = make_workspace(tmp_path / "uv-ws", venv)
    uv_env.pk("apply", "ddtree", "--no-verify")
    entries = doc(uv_env, "log")
    assert entries[-1]["kind"] == "baseline" and entries[-1]["after"]["id"] == by_pip  # installer-neutral
    assert entries[0]["installed"]["installer"] == "uv"

    archive = _files(cache)
    spec = venv / SITE_REL / SPEC
    assert spec.stat().st_nlink == 1  # replaced by rename: uv's cached copy is not this inode any more
    uv_env.pk("rollback", "--to", "baseline", "--no-verify")
    assert _files(cache) == archive  # every cached file: the same bytes, the same inode
    out = uv_env.pk("audit").stdout
    assert (
        "managed file(s) share their inode with other files (hard links, as uv installs from its cache)"
        in out
    )
    assert "patchkeeper replaces files by rename, never in place" in out
    linked = [p for p in _files(cache) if p.endswith(SPEC)]
    assert (
        linked and os.stat(cache / linked[0]).st_nlink == 1
    )  # the rolled-back file is a copy, not the cache's
