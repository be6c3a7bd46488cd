"""The workspace as a git repository: each transaction commits exactly snapshots/<target>/."""

from __future__ import annotations

import json

import git
import pytest

from checkout import git as run_git, init_repo
from conftest import make_workspace


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
    assert head.message.startswith("local: apply ddtree@3.0.0 (patchkeeper apply ddtree)")
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
    entries = [json.loads(p.read_text()) for p in sorted((env.root / "snapshots/local/ledger").glob("*.json"))]
    applied = entries[-1]
    assert applied["kind"] == "apply"
    assert applied["extra"]["workspace"] == {"commit": start, "patchsets_clean": {"ddtree": True}}

    env.pk("apply", "nextn")
    env.pk("rollback", "--to", "baseline")
    log = repo.git.log("--format=%s", "--", "snapshots/local").splitlines()
    assert log == ["local: rollback state 'baseline' (patchkeeper rollback --to baseline)",
                   "local: switch nextn@3.0.0 (patchkeeper apply nextn)",
                   "local: apply ddtree@3.0.0 (patchkeeper apply ddtree)"]
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
    assert f"committed patchsets/extra/ to the workspace's git repository as {repo.head.commit.hexsha[:12]}" \
        in proc.stdout
    assert sorted(repo.head.commit.stats.files) == ["patchsets/extra/extra.patch", "patchsets/extra/patchset.toml"]


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


def test_a_workspace_without_git_says_so_once(env):
    first = env.pk("apply", "ddtree")
    assert "not a git repository" in first.stderr
    second = env.pk("apply", "nextn")
    assert "not a git repository" not in second.stderr
    assert (env.root / "snapshots/local/state.json").is_file()
