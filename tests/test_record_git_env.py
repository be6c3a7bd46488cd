"""`record --git` gives git its own setting (core.fsmonitor=false) after the user's GIT_CONFIG_COUNT
entries, so that theirs stay in effect; a count git refuses is refused in one line, as git refuses it.
A real git on a real checkout; git itself is asked which counts it takes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

QUOTED = 'diff --git "a/sglang/\\303\\251.py" "b/sglang/\\303\\251.py"'  # git's default, core.quotePath=true
PLAIN = "diff --git a/sglang/é.py b/sglang/é.py"


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A clone's python/sglang with a plain and a non-ASCII file, changed between v1 and HEAD, and a
    core.fsmonitor of its own that leaves a mark if git ever runs it."""
    root = tmp_path / "src"
    pkg = root / "python" / "sglang"
    pkg.mkdir(parents=True)
    _git(root, "init", "-q")
    (pkg / "x.py").write_text("a = 1\n")
    (pkg / "é.py").write_text("b = 1\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "one")
    _git(root, "tag", "v1")
    (pkg / "x.py").write_text("a = 2\n")
    (pkg / "é.py").write_text("b = 2\n")
    _git(root, "commit", "-qam", "two")
    _git(root, "config", "core.fsmonitor", f"touch {tmp_path}/ran-checkouts-own; false")
    return root


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_CONFIG_")}
    return {**env, **extra}


def _record(ws: Path, checkout: Path, name: str, **env: str) -> subprocess.CompletedProcess[str]:
    args = ["record", name, "--git", str(checkout), "--range", "v1..HEAD", "--subdir", "python"]
    return subprocess.run(
        [sys.executable, "-m", "patchkeeper", "-w", str(ws), *args, "--package", "sglang"],
        capture_output=True,
        text=True,
        env=_clean_env(**env),
    )


def _diff_lines(ws: Path, name: str) -> list[str]:
    text = (ws / "patchsets" / name / f"{name}.patch").read_text()
    return [line for line in text.splitlines() if line.startswith("diff --git")]


def test_the_users_entries_stay_in_effect_and_ours_too(ws, checkout, tmp_path):
    # without the user's entry git quotes the non-ASCII name: the key below has an effect to see
    assert _record(ws, checkout, "plain").returncode == 0
    assert QUOTED in _diff_lines(ws, "plain")
    user = {
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "core.quotePath",
        "GIT_CONFIG_VALUE_0": "false",
        "GIT_CONFIG_KEY_1": "core.fsmonitor",  # theirs names ours too: ours, given after, wins
        "GIT_CONFIG_VALUE_1": f"touch {tmp_path}/ran-users; false",
    }
    proc = _record(ws, checkout, "theirs", **user)
    assert proc.returncode == 0, proc.stderr
    assert PLAIN in _diff_lines(ws, "theirs") and QUOTED not in _diff_lines(ws, "theirs")
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == []  # no fsmonitor ran: ours is in effect
    # the diff record runs, by git left to itself, runs theirs: the check above can fail
    diff = ["git", "diff-tree", "-r", "-z", "v1", "HEAD", "--", "python"]
    subprocess.run(diff, cwd=checkout, env=_clean_env(**user), check=True)
    assert (tmp_path / "ran-users").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the checkout to another user")
def test_a_users_safe_directory_reads_a_checkout_another_user_owns(ws, checkout, tmp_path):
    """Why a user sets GIT_CONFIG_COUNT: safe.directory counts only from protected configuration (the
    command line and the environment among them), and git refuses a checkout another user owns."""
    for path in [checkout, *checkout.rglob("*")]:
        os.lchown(path, 65534, 65534)
    refused = _record(ws, checkout, "refused")
    assert refused.returncode == 2 and "dubious ownership" in refused.stderr, refused.stderr
    assert refused.stderr.startswith("patchkeeper: error:") and "  hint: " in refused.stderr
    proc = _record(
        ws,
        checkout,
        "owned",
        GIT_CONFIG_COUNT="1",
        GIT_CONFIG_KEY_0="safe.directory",
        GIT_CONFIG_VALUE_0=str(checkout),
    )
    assert proc.returncode == 0, proc.stderr
    assert QUOTED in _diff_lines(ws, "owned") and list(tmp_path.glob("ran-*")) == []


# counts as a user may leave them: git's verdict on each (asked below) must be patchkeeper's
COUNTS = ["", "0", "00", " 0", "\t0", "+0", "-0", "1", " 1", "+1", "01"]
COUNTS += ["abc", "1k", " ", "+", "-", "-1", "1 ", "0x1", "1.0", "１", "2147483647", "2147483648", "9" * 25]


def _git_takes(checkout: Path, count: str) -> bool:
    env = _clean_env(GIT_CONFIG_COUNT=count, GIT_CONFIG_KEY_0="core.quotePath", GIT_CONFIG_VALUE_0="false")
    return (
        subprocess.run(
            ["git", "rev-parse", "--git-dir"], cwd=checkout, env=env, capture_output=True
        ).returncode
        == 0
    )


@pytest.mark.parametrize("count", COUNTS, ids=repr)
def test_a_count_git_refuses_is_refused_in_one_line(ws, checkout, count):
    proc = _record(
        ws,
        checkout,
        "c",
        GIT_CONFIG_COUNT=count,
        GIT_CONFIG_KEY_0="core.quotePath",
        GIT_CONFIG_VALUE_0="false",
    )
    if _git_takes(checkout, count):
        assert proc.returncode == 0, proc.stderr
        assert (PLAIN if count.strip(" \t+-0") else QUOTED) in _diff_lines(ws, "c")  # 1 entry, or none
        return
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert [line.split(":")[0] for line in lines] == ["patchkeeper", "  hint"], proc.stderr
    assert "GIT_CONFIG_COUNT" in lines[0] and "GIT_CONFIG_COUNT" in lines[1]
    assert not (ws / "patchsets" / "c").exists()


def test_a_missing_key_of_the_users_is_git_s_own_error(ws, checkout):
    proc = _record(
        ws, checkout, "m", GIT_CONFIG_COUNT="2", GIT_CONFIG_KEY_0="core.quotePath", GIT_CONFIG_VALUE_0="false"
    )
    assert proc.returncode == 2 and "missing config key GIT_CONFIG_KEY_1" in proc.stderr, proc.stderr
    assert not (ws / "patchsets" / "m").exists()
