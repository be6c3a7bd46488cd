"""What a newcomer meets in the first hour (issue 34): init checks --python, a workspace without
targets or default says so, a typo gets "did you mean", -t and -w go on either side of the verb,
a fresh $HOME without a git identity still commits, SSH failures in words, `snapshot -n`, and
`status` of every target when there is no default."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from conftest import copy_venv, make_workspace


def pk(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "patchkeeper", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


# ---- init --python ------------------------------------------------------------------------------
def test_init_refuses_a_python_that_is_not_one_and_writes_nothing(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a program\n")
    text.chmod(0o755)
    for python, said in (
        (tmp_path / "missing" / "python", "no such file"),
        (text, "cannot be run"),
        (Path("/bin/true"), "is not a Python that patchkeeper can run in"),
        (tmp_path, "is a directory"),
    ):
        ws = tmp_path / f"ws-{python.name}"
        proc = pk(tmp_path, "-w", str(ws), "init", "--python", str(python))
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
        assert "--python VENV/bin/python" in proc.stderr and not ws.exists()


def test_init_says_when_the_package_is_not_installed_there_yet(tmp_path):
    proc = pk(
        tmp_path, "-w", str(tmp_path / "ws"), "init", "--python", sys.executable
    )  # this venv: no sglang
    assert proc.returncode == 0, proc.stderr
    assert f"note: sglang is not installed in {sys.executable} yet (wrong venv?)" in proc.stdout


def test_a_wrong_venv_is_asked_about_first(tmp_path):
    ws = make_workspace(tmp_path / "ws", Path(sys.executable).parents[1])  # the dev venv: no sglang
    err = ws.pk("status", check=2).stderr
    hint = err.split("hint: ", 1)[1]
    assert hint.startswith("wrong venv? python = ") and hint.index("wrong venv") < hint.index("pip install")


def test_init_without_python_then_a_verb_says_there_are_no_targets(tmp_path):
    ws = tmp_path / "ws"
    assert pk(tmp_path, "-w", str(ws), "init").returncode == 0
    err = pk(tmp_path, "-w", str(ws), "status").stderr
    assert f"error: no targets: {ws}/patchkeeper.toml defines none" in err and "[targets.local]" in err


# ---- names --------------------------------------------------------------------------------------
def test_a_typo_in_a_patch_set_or_target_name_gets_did_you_mean(env):
    assert "did you mean 'ddtree'?" in env.pk("apply", "ddtre", check=2).stderr
    assert "did you mean 'nextn'?" in env.pk("show", "nxetn", check=2).stderr
    err = env.pk("status", "-t", "locla", check=2).stderr
    assert "did you mean 'local'?" in err and "hint: -t local, or add [targets.locla]" in err
    assert "did you mean" not in env.pk("status", "-t", "zzzzzz", check=2).stderr


def test_target_and_workspace_options_go_on_either_side_of_the_verb(env, tmp_path):
    expected = env.pk("status", "-t", "local").stdout
    for args in (
        ["-t", "local", "status", "-w", str(env.root)],
        ["status", "-w", str(env.root), "-t", "local"],
        ["--target=local", "--workspace", str(env.root), "status"],
        ["status", f"--workspace={env.root}"],
    ):
        proc = pk(tmp_path, *args)
        assert proc.returncode == 0 and proc.stdout == expected, (args, proc.stderr)


def test_status_without_a_default_target_shows_every_target(tmp_path, pristine_venv):
    env = make_workspace(
        tmp_path / "ws",
        copy_venv(pristine_venv, tmp_path / "venv"),
        f'\n[targets.other]\npython = "{pristine_venv}/bin/python"\npackage = "sglang"\n',
    )
    toml = env.root / "patchkeeper.toml"
    toml.write_text(toml.read_text().replace('default_target = "local"\n', ""))
    out = env.pk("status").stdout
    assert "local" in out and "other" in out
    assert out == env.pk("status", "--all").stdout


# ---- snapshot -n ---------------------------------------------------------------------------------
def test_snapshot_dry_run_says_what_it_would_record_and_records_nothing(env):
    before = env.snapshot()
    out = env.pk("snapshot", "--name", "first", "-n").stdout
    assert "local: no baseline yet; a real run records one first" in out
    assert "would record state 'first' (" in out and "bytes kept); nothing changed (dry run)" in out
    assert env.snapshot() == before and not (env.state_dir / "ledger").exists()


# ---- a fresh $HOME without a git identity ---------------------------------------------------------
def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def test_without_a_git_identity_the_workspace_commits_as_patchkeeper_and_says_so_once(env):
    _git(env.root, "init", "-q")
    _git(env.root, "config", "user.useConfigOnly", "true")  # no identity, and git may not guess one
    no_identity = {
        "GIT_AUTHOR_NAME": "",
        "GIT_AUTHOR_EMAIL": "",
        "GIT_COMMITTER_NAME": "",
        "GIT_COMMITTER_EMAIL": "",
        "EMAIL": "",
    }
    no_identity = {k: v for k, v in os.environ.items() if k not in no_identity}
    first = subprocess.run(
        [sys.executable, "-m", "patchkeeper", "-w", str(env.root), "apply", "ddtree", "--no-verify"],
        capture_output=True,
        text=True,
        env=no_identity,
    )
    assert first.returncode == 0, first.stderr
    email = f"patchkeeper@{socket.gethostname()}"
    assert first.stderr.count("git has no identity here") == 1 and email in first.stderr
    assert "warning" not in first.stderr
    assert (
        _git(env.root, "log", "-1", "--format=%an <%ae>|%cn <%ce>").strip() == f"patchkeeper <{email}>|"
        f"patchkeeper <{email}>"
    )
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "patchkeeper",
            "-w",
            str(env.root),
            "rollback",
            "--to",
            "baseline",
            "--no-verify",
        ],
        capture_output=True,
        text=True,
        env=no_identity,
    )
    assert (
        again.returncode == 0 and "git has no identity" not in again.stderr and "warning" not in again.stderr
    )
    assert "rollback" in _git(env.root, "log", "-1", "--format=%s")


# ---- SSH failures in words -----------------------------------------------------------------------
def test_ssh_failures_are_said_in_words(tmp_path, pristine_venv):
    from patchkeeper.targets.ssh import in_words

    assert (
        in_words(socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "ct129", 22)
        == "the host name ct129 does not resolve (Name or service not known)"
    )
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens there now
    for persist in ("0", "60"):  # this process connects, or a holder does
        env = make_workspace(
            tmp_path / f"ws{persist}",
            pristine_venv,
            f'\n[targets.far]\nssh = "nobody@127.0.0.1:{port}"\npython = "/usr/bin/python3"\n'
            f'package = "sglang"\npersist = {persist}\n',
        )
        err = env.pk("status", "-t", "far", check=None).stderr
        assert f"127.0.0.1 port {port}: nothing listens there (connection refused)" in err, err
        assert "Errno" not in err


# ---- output a newcomer reads -----------------------------------------------------------------------
def test_list_lines_fit_the_terminal_and_say_where_the_full_text_is(env):
    out = env.pk("list", env={"COLUMNS": "100"}).stdout
    assert max(len(line) for line in out.splitlines()) <= 100, out
    assert (
        "DDTREE through the DFlash worker" in out and "(a description in full: patchkeeper show NAME)" in out
    )
    full = env.pk("show", "ddtree").stdout
    assert "Not done: tree verification is not wired yet" in " ".join(full.split())


def test_a_dry_run_prints_the_drop_ins_exec_start_once(env):
    out = env.pk("apply", "ddtree", "--dry-run").stdout
    assert out.count("--speculative-draft-model-path") == 1, out  # in the drop-in shown, not again
    assert "ExecStart (effective, from " in out and "as set there (shown above)" in out


def test_each_count_of_files_says_what_it_counts(env):
    out = env.pk("apply", "ddtree", "--no-verify").stdout
    assert "recorded baseline of local: " in out and " files of sglang, state " in out
    out = env.pk("audit", check=None).stdout
    assert " files checked (every distribution in site-packages, not only sglang)" in out


def test_init_says_once_that_the_unit_it_names_does_not_exist_yet(tmp_path):
    ws = tmp_path / "ws"
    proc = pk(tmp_path, "-w", str(ws), "init", "--python", sys.executable)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(f"unit role is {ws}/sglang-qwen.service, which does not exist") == 1
    assert "/etc/systemd/system/NAME.service" in proc.stdout
    assert (
        "# No unit yet: this one, in the workspace, does not exist" in (ws / "patchkeeper.toml").read_text()
    )


def test_list_with_one_broken_patch_set_lists_the_others_and_marks_it(env):
    (env.root / "patchsets" / "nextn" / "patchset.toml").write_text("name = [broken\n")
    proc = env.pk("list", check=2)
    assert "ddtree@" in proc.stdout and "dflash@" in proc.stdout
    assert "nextn            BROKEN: cannot be read" in proc.stdout
    assert "patchkeeper: error: " in proc.stderr and "nextn" in proc.stderr
    doc = json.loads(env.pk("list", "--json", check=2).stdout)
    assert [d["name"] for d in doc] == ["ddtree", "dflash", "nextn"]
    assert "version" in doc[0] and doc[2]["error"]["message"] and "version" not in doc[2]
