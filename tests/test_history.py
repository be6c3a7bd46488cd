"""The workspace as a git repository: each transaction commits exactly snapshots/<target>/."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import git
import pytest
from checkout import git as run_git, init_repo
from conftest import copy_venv, make_workspace
from helpers import FAKE, free_port


@pytest.fixture
def repo_env(tmp_path, pristine_venv):
    from conftest import copy_venv

    venv = copy_venv(pristine_venv, tmp_path / "venv")
    env = make_workspace(tmp_path / "ws", venv)
    init_repo(env.root)
    (env.root / "notes.txt").write_text("mine\n")
    run_git(env.root, "add", "-A")
    run_git(env.root, "commit", "-qm", "workspace")
    return env


def test_each_transaction_commits_only_its_snapshot(repo_env):
    env = repo_env
    repo = git.Repo(env.root)
    start = repo.head.commit.hexsha
    # the user's own work in progress: one staged change, one unstaged, one untracked file
    (env.root / "notes.txt").write_text("staged edit\n")
    repo.git.add("notes.txt")
    (env.root / "patchkeeper.toml").write_text((env.root / "patchkeeper.toml").read_text() + "\n# unstaged\n")
    (env.root / "scratch.txt").write_text("untracked\n")

    env.pk("apply", "ddtree")
    head = repo.head.commit
    assert head.parents[0].hexsha == start
    assert head.message.startswith("local: apply ddtree@3.1.0 (patchkeeper apply ddtree)")
    touched = sorted(head.stats.files)
    assert touched and all(p.startswith("snapshots/local/") for p in touched)
    assert {"snapshots/local/manifest.txt", "snapshots/local/state.json"} <= set(touched)
    assert sum(p.startswith("snapshots/local/ledger/") for p in touched) == 2  # baseline + apply
    # the user's changes are as they were: still staged, unstaged, untracked
    assert [d.a_path for d in repo.index.diff("HEAD")] == ["notes.txt"]
    # (the drop-in is the target's role file, which the fixture keeps in the workspace: added, uncommitted)
    assert sorted(d.a_path for d in repo.index.diff(None)) == ["patchkeeper.toml"]
    assert {"scratch.txt", "systemd/sglang-qwen.service.d/50-patchkeeper.conf"} <= set(repo.untracked_files)
    assert not any(p.startswith("snapshots/") for p in repo.untracked_files)

    # the ledger names the workspace commit that held the patch set, and that it was committed there
    entries = [
        json.loads(p.read_text()) for p in sorted((env.root / "snapshots/local/ledger").glob("*.json"))
    ]
    applied = entries[-1]
    assert applied["kind"] == "apply"
    assert applied["extra"]["workspace"] == {"commit": start, "patchsets_clean": {"ddtree": True}}

    env.pk("apply", "nextn")
    env.pk("rollback", "--to", "baseline")
    log = repo.git.log("--format=%s", "--", "snapshots/local").splitlines()
    assert log == [
        "local: rollback state 'baseline' (patchkeeper rollback --to baseline)",
        "local: switch nextn@3.1.0 (patchkeeper apply nextn)",
        "local: apply ddtree@3.1.0 (patchkeeper apply ddtree)",
    ]
    state = json.loads(repo.git.show("HEAD:snapshots/local/state.json"))
    assert state["stack"] == [] and state["target"] == "local"
    assert [d.a_path for d in repo.index.diff("HEAD")] == ["notes.txt"]  # still only the user's


def test_ledger_notes_an_uncommitted_patch_set(repo_env):
    env = repo_env
    toml = env.root / "patchsets/nextn/patchset.toml"
    toml.write_text(toml.read_text().replace("a drop-in only", "a drop-in only (edited)"))
    env.pk("apply", "nextn")
    entry = json.loads(sorted((env.root / "snapshots/local/ledger").glob("*.json"))[-1].read_text())
    assert entry["extra"]["workspace"]["patchsets_clean"] == {"nextn": False}
    assert "patchsets/nextn/patchset.toml" in git.Repo(env.root).git.status("--porcelain")


def test_record_commits_the_patch_set_it_wrote(repo_env):
    env = repo_env
    env.pk("snapshot", "--name", "start")
    (env.site / "sglang/srt/speculative/extra.py").write_text("A = 1\n")
    proc = env.pk("record", "extra", "--from", "start")
    repo = git.Repo(env.root)
    assert repo.head.commit.message.startswith("patch set extra@1.0.0: created")
    # and says so: the user's repository got a commit
    assert (
        f"committed patchsets/extra/ to the workspace's git repository as {repo.head.commit.hexsha[:12]}"
        in proc.stdout
    )
    assert sorted(repo.head.commit.stats.files) == [
        "patchsets/extra/extra.patch",
        "patchsets/extra/patchset.toml",
    ]


def test_ignored_snapshots_are_skipped_quietly(repo_env):
    env = repo_env
    (env.root / ".gitignore").write_text("snapshots/local/\n")
    repo = git.Repo(env.root)
    repo.git.add(".gitignore")
    repo.git.commit("-qm", "ignore the local target")
    head = repo.head.commit.hexsha
    proc = env.pk("apply", "ddtree")
    assert "warning" not in proc.stderr
    assert repo.head.commit.hexsha == head
    assert (env.root / "snapshots/local/state.json").is_file()


def test_a_workspace_without_git_says_so_once(tmp_path, pristine_venv):
    env = make_workspace(tmp_path / "plain", copy_venv(pristine_venv, tmp_path / "plain-venv"))
    first = env.pk("apply", "ddtree")
    assert "not a git repository" in first.stderr
    second = env.pk("apply", "nextn")
    assert "not a git repository" not in second.stderr
    assert (env.root / "snapshots/local/state.json").is_file()


# ---- one commit per command, whatever it verified and rolled back; git failing is one warning ---------
@pytest.fixture
def env(repo_env):
    """The deployment tests' workspace (tests/test_deployment.py), as a git repository."""
    return repo_env


def _subjects(env, since: str) -> list[str]:
    return run_git(env.root, "log", "--format=%s", f"{since}..HEAD").splitlines()


def test_a_failed_apply_is_one_commit_reading_failed_rolled_back(env, deployment):
    deployment.configure()
    run_git(env.root, "commit", "-qam", "the service")
    start = run_git(env.root, "rev-parse", "HEAD").strip()
    deployment.rule(DDTREE="broken")
    env.pk("apply", "ddtree", check=3)
    assert _subjects(env, start) == [
        "local: apply ddtree@3.1.0 FAILED, rolled back (degenerate) (patchkeeper apply ddtree)"
    ]
    body = run_git(env.root, "log", "-1", "--format=%b")
    assert (
        "verify " in body
        and ": FAILED (degenerate); apply; entry " in body
        and ": passed; automatic rollback" in body
    )
    assert run_git(env.root, "diff", "--cached", "--name-only") == ""  # nothing of ours left staged
    env.pk("verify")
    assert _subjects(env, start)[0] == "local: verify passed (patchkeeper verify)"


def test_verify_all_commits_once_for_every_target(env, tmp_path, pristine_venv):
    toml, servers = "", []
    for name in ("local", "b", "c"):
        if name != "local":
            venv = copy_venv(pristine_venv, tmp_path / f"venv-{name}")
            toml += f'\n[targets.{name}]\npython = "{venv}/bin/python"\npackage = "sglang"\n'
        port, pidfile = free_port(), tmp_path / f"{name}.pid"
        restart = [sys.executable, str(FAKE), "start", "--port", str(port), "--pidfile", str(pidfile)]
        servers.append([sys.executable, str(FAKE), "stop", "--port", str(port), "--pidfile", str(pidfile)])
        toml += (
            f"\n[targets.{name}.service]\nrestart = {json.dumps(shlex.join(restart))}\n"
            f'base_url = "http://127.0.0.1:{port}"\nready_timeout = 10\nmatch_unit = false\n'
            "[targets.{name}.service.smoke]\nmin_tokens_per_s = 1\n".replace("{name}", name)
        )
    with open(env.root / "patchkeeper.toml", "a") as f:
        f.write(toml)
    for name in ("local", "b", "c"):
        env.pk("snapshot", "-t", name, "--name", "s0")
    run_git(env.root, "add", "-A")
    run_git(env.root, "commit", "-qm", "three targets")
    start = run_git(env.root, "rev-parse", "HEAD").strip()
    try:
        proc = env.pk("verify", "--all", "--restart")
    finally:
        for stop in servers:
            subprocess.run(stop, check=False)
    assert "warning" not in proc.stderr
    assert _subjects(env, start) == [
        "verify --all: 3 target(s) verified, 0 failed, 0 unreachable (patchkeeper verify --all --restart)"
    ]
    files = run_git(env.root, "show", "--name-only", "--format=", "HEAD").split()
    assert {f.split("/")[1] for f in files} == {"local", "b", "c"} and all("/ledger/" in f for f in files)
    assert run_git(env.root, "diff", "--cached", "--name-only") == ""
    assert not [f for f in run_git(env.root, "status", "--porcelain").splitlines() if "snapshots/" in f]


def test_a_git_failure_is_one_warning_line_and_leaves_nothing_staged(env):
    run_git(
        env.root, "config", "commit.gpgSign", "true"
    )  # a signing program that always fails: git commit fails
    run_git(env.root, "config", "gpg.program", "false")
    proc = env.pk("apply", "nextn")
    warnings = [
        ln for ln in proc.stderr.splitlines() if "warning" in ln or "hint" in ln or ln.startswith(" ")
    ]
    assert len(warnings) == 1 and warnings[0].startswith(
        "patchkeeper: warning: the workspace's history was not committed ("
    )
    assert "Traceback" not in proc.stderr and "cmdline" not in proc.stderr
    assert run_git(env.root, "diff", "--cached", "--name-only") == ""  # the records are not left staged
    assert (env.root / "snapshots/local/state.json").is_file()
