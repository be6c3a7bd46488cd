"""Ctrl-C: right after a change is made, the change is reported done and its record is committed to
the workspace's git (by the command itself, else by `recover`); while patchkeeper starts, one line and
exit 130, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

INTERRUPT = {"PATCHKEEPER_CRASH_SIGNAL": "INT"}  # faults.point sends SIGINT to the process: Ctrl-C


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def _a_git_workspace(env) -> None:
    _git(env.root, "init", "-q")
    _git(env.root, "config", "user.name", "me")
    _git(env.root, "config", "user.email", "me@example.com")


def test_ctrl_c_right_after_a_change_reports_it_done_and_commits_its_record(env):
    _a_git_workspace(env)
    proc = env.pk(
        "apply", "ddtree", "--no-verify", check=130, env={**INTERRUPT, "PATCHKEEPER_CRASH_AT": "reported"}
    )
    assert "local: done before Ctrl-C: apply ddtree@" in proc.stderr and "file(s) changed" in proc.stderr
    assert "its record is committed to the workspace" in proc.stderr
    assert _git(env.root, "status", "--porcelain", "--", "snapshots") == ""
    assert "local: apply ddtree@" in _git(env.root, "log", "-1", "--format=%s")
    assert "ddtree@" in env.pk("status").stdout  # the target holds what was said


def test_recover_commits_the_records_a_command_left_uncommitted(env):
    _a_git_workspace(env)
    _git(env.root, "commit", "-q", "--allow-empty", "-m", "start")
    env.pk("apply", "ddtree", "--no-verify")
    _git(env.root, "reset", "-q", "--soft", "HEAD~1")  # the copies are staged, not committed
    assert _git(env.root, "status", "--porcelain", "--", "snapshots") != ""
    env.pk("recover")
    assert _git(env.root, "status", "--porcelain", "--", "snapshots") == ""


def test_the_next_change_commits_a_record_a_command_left_staged_and_status_says_so(env):
    _a_git_workspace(env)
    _git(env.root, "commit", "-q", "--allow-empty", "-m", "start")
    env.pk("apply", "ddtree", "--no-verify")
    _git(env.root, "reset", "-q", "--soft", "HEAD~1")  # as the interrupted command left it: staged only
    left = _git(env.root, "status", "--porcelain", "--", "snapshots")
    assert left and all(line.startswith("A ") for line in left.splitlines()), left

    told = env.pk("status")  # a reading command says so, and commits nothing
    assert "local: the record of baseline" in told.stderr and ", apply ddtree@3.1.0" in told.stderr
    assert "not committed" in told.stderr
    assert "the next change or `patchkeeper recover` commits it" in told.stderr
    assert _git(env.root, "status", "--porcelain", "--", "snapshots") == left
    assert _git(env.root, "log", "--format=%s") == "start\n"

    proc = env.pk("apply", "nextn", "--no-verify")
    assert "committed the record an interrupted command left uncommitted" in proc.stderr
    assert _git(env.root, "status", "--porcelain", "--", "snapshots") == ""
    subjects = _git(env.root, "log", "--format=%s").splitlines()
    assert subjects[1:] == ["local: apply ddtree@3.1.0 (patchkeeper apply ddtree)", "start"]
    assert subjects[0].startswith("local: switch nextn@")  # the new change: a commit of its own
    body = _git(env.root, "log", "-1", "--format=%b", "HEAD~1")
    assert "left uncommitted by an interrupted command; committed by `patchkeeper apply nextn" in body
    files = _git(env.root, "show", "--name-only", "--format=", "HEAD~1").split()
    assert "snapshots/local/state.json" in files and any(
        f.startswith("snapshots/local/ledger/") for f in files
    )
    assert "not committed" not in env.pk("status").stderr  # nothing left: nothing said


def test_a_command_killed_after_copying_its_record_has_it_committed_by_the_next_change(env):
    _a_git_workspace(env)
    env.pk("apply", "ddtree", "--no-verify", check=None, env={"PATCHKEEPER_CRASH_AT": "reported"})  # SIGKILL
    left = _git(env.root, "status", "--porcelain", "--untracked-files=all", "--", "snapshots")
    assert "snapshots/local/state.json" in left and "?? " in left  # copied, never added
    cut = env.root / "snapshots/local/ledger/.pk-tmp-1-2"  # a copy a kill cut short: no record
    cut.write_bytes(b'{"kind": "app')
    env.pk("rollback", "--to", "baseline", "--no-verify")
    rest = _git(env.root, "status", "--porcelain", "--untracked-files=all", "--", "snapshots/local")
    assert rest == "?? snapshots/local/ledger/.pk-tmp-1-2\n"  # all the records committed, and only them
    subjects = _git(env.root, "log", "--format=%s").splitlines()
    assert subjects[1] == "local: apply ddtree@3.1.0 (patchkeeper apply ddtree)"
    assert subjects[0].startswith("local: rollback state 'baseline'")


def test_ctrl_c_while_starting_is_one_line_and_exit_130(tmp_path):
    shadow = tmp_path / "shadow" / "click"  # an import patchkeeper makes as it starts: Ctrl-C there
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise KeyboardInterrupt\n")
    run = {**os.environ, "PYTHONPATH": str(shadow.parent)}
    proc = subprocess.run(
        [sys.executable, "-m", "patchkeeper", "status"], capture_output=True, text=True, env=run, cwd=tmp_path
    )
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "patchkeeper: interrupted (Ctrl-C) while starting; nothing was changed"
    ]
