"""The slow, real one: the whole diff between the sglang 0.5.22 and 0.5.23 wheels as plain `git diff`
writes it (renames on by default, binary files with --binary; 35 MB, 2,098 files), imported over a
venv with 0.5.22, applied, exported for git apply, and rolled back, byte for byte, in one pass."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest
from conftest import copy_venv, install_release, make_workspace, release_wheel, tree


def _unpack(version: str, repo: Path) -> None:
    with zipfile.ZipFile(release_wheel(version)) as wheel:
        wheel.extractall(repo, members=[n for n in wheel.namelist() if n.startswith("sglang/")])


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    ).stdout


def _bytes_of(root: Path) -> dict[str, str]:
    return {rel: sha for rel, (sha, _mode) in tree(root).items() if not rel.startswith(".git/")}


@pytest.mark.slow_real
def test_the_real_release_diff_imports_applies_exports_for_git_apply_and_rolls_back(tmp_path, pristine_venv):
    venv = copy_venv(pristine_venv, tmp_path / "venv")
    install_release(venv, "0.5.22")
    env = make_workspace(tmp_path / "ws", venv)
    repo = tmp_path / "repo"
    _unpack("0.5.22", repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "0.5.22")
    subprocess.run(["rm", "-rf", str(repo / "sglang")], check=True)
    _unpack("0.5.23", repo)
    _git(repo, "add", "-A")
    diff = _git(repo, "diff", "--cached", "--binary")  # plain git diff: renames are on by default
    assert diff.count(b"\nrename from ") >= 50 and diff.count(b"\nGIT binary patch\n") >= 5
    assert len(diff) > 32 << 20  # over what one .patch may hold: import cuts it by file
    (tmp_path / "release.patch").write_bytes(diff)
    release = _bytes_of(repo / "sglang")
    before = env.snapshot()

    env.pk("import", "release", str(tmp_path / "release.patch"))
    assert len(list((env.root / "patchsets/release").glob("release-*.patch"))) == 2
    env.pk("apply", "release", "--no-verify")
    assert _bytes_of(env.site / "sglang") == release

    exported = tmp_path / "exported.patch"
    exported.write_bytes(env.pk_bytes("export", "release"))
    _git(repo, "reset", "-q", "--hard")  # the 0.5.22 tree again
    _git(repo, "apply", str(exported))
    assert _bytes_of(repo / "sglang") == release  # git apply of the export: the same bytes

    env.pk("rollback", "--to", "baseline", "--no-verify")
    assert env.snapshot() == before
