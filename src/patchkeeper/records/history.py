"""Everything patchkeeper does with git (the only module importing GitPython): the workspace's
history of each target's code state, and reading a package's source checkout between two refs."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BadInput

if TYPE_CHECKING:
    from ..patchset.diffwrite import Change

NO_HISTORY_MARK = ".no-git-history"


def repo_root(path: Path) -> Path | None:
    """The git work tree holding `path`, found without importing git (fast commands stay fast)."""
    for candidate in (path, *path.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def _repo(ws_root: Path):
    import git

    return git.Repo(repo_root(ws_root))


def say_no_history_once(ws_root: Path) -> None:
    """A workspace that is not a git repository keeps no history; say so the first time only."""
    mark = ws_root / "snapshots" / NO_HISTORY_MARK
    if mark.exists():
        return
    print(f"patchkeeper: note: workspace {ws_root} is not a git repository, so the history of code states "
          "in snapshots/ is not committed (run `git init` there to keep it); this note is shown once",
          file=sys.stderr)
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.write_text("patchkeeper noted once that this workspace is not a git repository.\n"
                    "Delete this file to be told again.\n")


def commit_paths(ws_root: Path, paths: list[Path], message: str) -> str | None:
    """Commit exactly `paths` (as they are in the work tree) and nothing else; other staged or
    unstaged changes stay as they were. Ignored paths are skipped. Returns the commit, or None."""
    if repo_root(ws_root) is None:
        say_no_history_once(ws_root)
        return None
    import git

    try:
        repo = _repo(ws_root)
        top = Path(repo.working_tree_dir)
        rels = sorted({os.path.relpath(p, top) for p in paths})
        ignored = set(repo.ignored(*rels)) if rels else set()
        rels = [r for r in rels if r not in ignored]
        if not rels:
            return None
        repo.git.add("--", *rels)
        if repo.head.is_valid():
            try:
                repo.git.diff("--cached", "--quiet", "HEAD", "--", *rels)
                return None  # the paths already hold what is committed
            except git.GitCommandError:
                pass
        # --only: a commit of these paths alone, built from HEAD, whatever else is staged
        repo.git.commit("--only", "--no-verify", "-q", "-m", message, "--", *rels)
        return repo.head.commit.hexsha
    except (git.GitCommandError, git.InvalidGitRepositoryError, ValueError) as exc:
        print(f"patchkeeper: warning: history not committed: {str(exc).strip().splitlines()[-1]}",
              file=sys.stderr)
        return None


def workspace_ref(ws_root: Path, patchset_dirs: dict[str, Path]) -> dict | None:
    """The workspace commit now, and for each patch set whether its directory is as committed there."""
    if repo_root(ws_root) is None:
        return None
    import git

    try:
        repo = _repo(ws_root)
        top = Path(repo.working_tree_dir)
        head = repo.head.commit.hexsha if repo.head.is_valid() else None
        clean = {}
        for name, directory in patchset_dirs.items():
            rel = os.path.relpath(directory, top)
            status = repo.git.status("--porcelain", "--untracked-files=all", "--", rel)
            tracked = bool(head) and bool(repo.git.ls_files("--", rel))
            clean[name] = tracked and not status.strip()
        return {"commit": head, "patchsets_clean": clean}
    except (git.GitCommandError, git.InvalidGitRepositoryError, ValueError):
        return None


# ---- a source checkout -------------------------------------------------------------------------
def read_range(directory: str, span: str, subdir: str) -> list[Change]:
    """The files that differ between the two refs of `span` (A..B) below `subdir`, with their bytes
    and modes, named relative to `subdir` (python/sglang/x.py -> sglang/x.py)."""
    import git
    from gitdb.exc import BadName, BadObject

    from ..patchset.diffwrite import Change

    try:
        repo = git.Repo(directory)
    except (git.NoSuchPathError, git.InvalidGitRepositoryError):
        raise BadInput(f"{directory} is not a git checkout", "pass --git DIR of a git clone") from None
    left, sep, right = span.partition("..")
    if not sep or not left or not right or right.startswith("."):
        raise BadInput(f"range {span!r} is not of the form A..B", "e.g. --range v0.5.23..my-branch")
    commits = []
    for ref in (left, right):
        try:
            commits.append(repo.commit(ref))
        except (BadName, BadObject, ValueError, git.GitCommandError):
            raise BadInput(f"{directory}: no commit {ref!r} (range {span})",
                           "check the names with `git log --oneline`") from None
    subdir = subdir.strip("/")
    if subdir:
        for commit in commits:
            try:
                kind = (commit.tree / subdir).type
            except KeyError:
                kind = None
            if kind != "tree":
                raise BadInput(f"{directory}: no directory {subdir!r} at {commit.hexsha[:12]}",
                               "pass --subdir as the directory holding the package (e.g. python)")
    if repo.is_dirty(untracked_files=True):
        dirty = [d.a_path or d.b_path or "?" for d in repo.index.diff(None)] + repo.untracked_files
        raise BadInput(f"{directory} has uncommitted changes: {', '.join(dirty[:5]) or 'staged changes'}",
                       "commit or stash them first, so the range is exactly what you recorded")
    raw = repo.git.diff_tree("-r", "-z", "--no-renames", commits[0].hexsha, commits[1].hexsha,
                             "--", subdir or ".")
    fields = raw.split("\0")
    changes, odd = [], []
    for i in range(0, len(fields) - 1, 2):
        old_mode, new_mode, old_sha, new_sha, _status = fields[i].lstrip(":").split(" ")
        path = fields[i + 1]
        if subdir:
            path = path[len(subdir) + 1:]
        if {old_mode, new_mode} - {"000000", "100644", "100755"}:
            odd.append(path)
            continue
        old = repo.odb.stream(bytes.fromhex(old_sha)).read() if old_mode != "000000" else None
        new = repo.odb.stream(bytes.fromhex(new_sha)).read() if new_mode != "000000" else None
        changes.append(Change(path, old, new, int(old_mode, 8) & 0o7777 if old is not None else None,
                              int(new_mode, 8) & 0o7777 if new is not None else None))
    if odd:
        raise BadInput(f"{directory}: symlinks or submodules cannot be recorded: {', '.join(odd)}",
                       "keep such changes out of the range")
    return changes


def range_patch(directory: str, span: str, subdir: str) -> bytes:
    """The patch git itself writes for `span` below `subdir`, paths relative to `subdir` (call
    after read_range, which checks the range); the options fix what a user's git config could vary."""
    import git

    left, _, right = span.partition("..")
    subdir = subdir.strip("/")
    args = ["--binary", "--no-renames", "--no-color", "--no-ext-diff", "--no-textconv", "-U3",
            "--src-prefix=a/", "--dst-prefix=b/", *([f"--relative={subdir}"] if subdir else []),
            left, right, "--", subdir or "."]
    return git.Repo(directory).git.diff(*args, stdout_as_string=False, strip_newline_in_stdout=False)
