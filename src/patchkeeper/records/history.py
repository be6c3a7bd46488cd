"""Everything patchkeeper does with git (the only module importing GitPython): the workspace's
history of each target's code state, and reading a package's source checkout between two refs."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..errors import BadInput
from ..patchset.diffwrite import Change
from . import gitenv

if TYPE_CHECKING:
    import git  # for annotations only: at run time GitPython is imported lazily (slow to import)

    from ..patchset.diffwrite import Change

NO_HISTORY_MARK = ".no-git-history"
NO_IDENTITY_MARK = "no-git-identity-noted"  # in the user's state directory: the note is said once per user


def user_state(name: str) -> Path:
    """`name` in this user's state directory for patchkeeper ($XDG_STATE_HOME or ~/.local/state)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "patchkeeper" / name


def repo_root(path: Path) -> Path | None:
    """The git work tree holding `path`, found without importing git (fast commands stay fast)."""
    for candidate in (path, *path.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def _repo(ws_root: Path) -> git.Repo:
    import git  # lazy: GitPython is slow to import; only authoring needs it

    return git.Repo(repo_root(ws_root))


def say_no_history_once(ws_root: Path) -> None:
    """A workspace that is not a git repository keeps no history; say so the first time only."""
    mark = ws_root / "snapshots" / NO_HISTORY_MARK
    if mark.exists():
        return
    print(
        f"patchkeeper: note: workspace {ws_root} is not a git repository, so the history of code states "
        "in snapshots/ is not committed (run `git init` there to keep it); this note is shown once",
        file=sys.stderr,
    )
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.write_text(
        "patchkeeper noted once that this workspace is not a git repository.\n"
        "Delete this file to be told again.\n"
    )


def identity(repo: Any, ws_root: Path) -> dict[str, str]:
    """The environment for a commit: nothing when git has an identity (user.name and user.email, or
    GIT_AUTHOR_*), else patchkeeper@HOST as etckeeper does, said once per user (its mark in the user's
    state directory: git's identity is the user's, not a workspace's)."""
    import git  # lazy: GitPython is slow to import; only a commit needs it here

    try:
        repo.git.var("GIT_COMMITTER_IDENT")
        repo.git.var("GIT_AUTHOR_IDENT")
        return {}
    except git.GitCommandError:
        pass
    email = f"patchkeeper@{os.uname().nodename or 'localhost'}"
    mark = user_state(NO_IDENTITY_MARK)
    if not mark.exists():
        print(
            f"patchkeeper: note: git has no identity here, so the workspace's history is committed as "
            f"patchkeeper <{email}>; set yours with `git config --global user.name NAME` and "
            f"`git config --global user.email EMAIL`; this note is shown once",
            file=sys.stderr,
        )
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.write_text(
            "patchkeeper noted once that git has no identity here.\nDelete this file to be told again.\n"
        )
    return {
        f"GIT_{who}_{what}": value
        for who in ("AUTHOR", "COMMITTER")
        for what, value in (("NAME", "patchkeeper"), ("EMAIL", email))
    }


_COMMITTING = threading.Lock()  # one index per repository: a rollout's targets commit one at a time


@contextmanager
def _one_committer(repo: git.Repo) -> Iterator[None]:
    """This thread alone, and this process alone (Ansible runs a task per host in its own process),
    commits into the repository: an flock on a file in its git directory, beside git's own locks."""

    with _COMMITTING, open(os.path.join(repo.git_dir, "patchkeeper-commit.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@dataclass
class Record:
    """What one command copied of a target's records into snapshots/<target>/ (paths and the new
    ledger entries), committed once when the command ends: one commit per command, whatever
    verifications and automatic rollbacks it made. Plain data, so a worker can send it back."""

    target: str
    command: str
    paths: list[str] = field(default_factory=list)
    entries: list[Any] = field(default_factory=list)  # the LedgerEntry values first copied by this command
    repaired: bool = False  # copies written again (recover)

    def add(self, paths: list[Path], entries: list[Any], repaired: bool = False) -> None:
        self.paths += [str(p) for p in paths if str(p) not in self.paths]
        self.entries += entries
        self.repaired = self.repaired or repaired

    def subject(self) -> str:
        """One line: the target, what the command did to it, how verification ended, the command."""
        entries = self.entries
        made = [e for e in entries if e.kind != "verify"]
        automatic = any(e.kind == "rollback" and dict(e.extra).get("automatic") for e in made)
        main = next(
            (e for e in made if e.kind != "baseline" and not dict(e.extra).get("automatic")),
            made[-1] if made else None,
        )
        checks = [dict(e.extra).get("verify") or {} for e in entries if e.kind == "verify"]
        if main is not None:
            sets = ", ".join(f"{p['name']}@{p['version']}" for p in main.patchsets)
            what = sets or (f"state {main.after.name!r}" if main.after.name else main.after.stack_text())
            line = f"{self.target}: {main.kind} {what}"
            if automatic:
                line += f" FAILED, rolled back ({checks[0].get('reason') if checks else 'verification'})"
            elif checks and not checks[-1].get("ok"):
                line += f" FAILED verification ({checks[-1].get('reason')})"
            return line + f" (patchkeeper {main.command})"
        if checks:
            verdict = "passed" if checks[-1].get("ok") else f"FAILED ({checks[-1].get('reason')})"
            return f"{self.target}: verify {verdict} (patchkeeper {self.command})"
        return f"{self.target}: records copied again into the workspace (patchkeeper {self.command})"

    def body(self) -> list[str]:
        lines = []
        for e in self.entries:
            if e.kind == "verify":
                v = dict(e.extra).get("verify") or {}
                lines.append(
                    f"verify {e.after.id}: "
                    + ("passed" if v.get("ok") else f"FAILED ({v.get('reason')})")
                    + f"; {dict(e.extra).get('phase')}; entry {e.id}"
                )
            else:
                lines.append(
                    f"{e.kind} {e.before.id if e.before else '-'} -> {e.after.id}: {e.after.stack_text()}; "
                    f"{len(e.changed)} file(s) changed; transaction {e.id}"
                )
        return lines


def commit_records(ws_root: Path, records: list[Record], subject: str | None = None) -> str | None:
    """One commit of every record's paths: a record's own subject, or `subject` over several."""
    records = [r for r in records if r.paths]
    if not records:
        return None
    if len(records) == 1 and subject is None:
        message = records[0].subject() + "\n\n" + "\n".join(records[0].body()) + "\n"
    else:
        lines = [subject or f"{len(records)} targets", ""]
        for r in records:
            lines += [r.subject(), *(f"  {b}" for b in r.body())]
        message = "\n".join(lines) + "\n"
    return commit_paths(ws_root, [Path(p) for r in records for p in r.paths], message)


def commit_paths(ws_root: Path, paths: list[Path], message: str) -> str | None:
    """Commit exactly `paths` (as they are in the work tree) and nothing else; other staged or
    unstaged changes stay as they were, and nothing of ours is left staged when git fails. Ignored
    paths are skipped. Returns the commit, or None; a git failure is one warning line."""
    if repo_root(ws_root) is None:
        say_no_history_once(ws_root)
        return None
    import git  # lazy: GitPython is slow to import; only authoring needs it

    rels: list[str] = []
    staged = False
    repo = None
    try:
        repo = _repo(ws_root)
        with _one_committer(repo):
            top = Path(
                cast("str | os.PathLike[str]", repo.working_tree_dir)
            )  # never None: repo_root found a work tree
            rels = sorted({os.path.relpath(p, top) for p in paths})
            ignored = set(repo.ignored(*rels)) if rels else set()
            rels = [r for r in rels if r not in ignored]
            if not rels:
                return None
            _git(repo, "add", "--", *rels)
            staged = True
            if repo.head.is_valid():
                try:
                    repo.git.diff("--cached", "--quiet", "HEAD", "--", *rels)
                    return None  # the paths already hold what is committed
                except git.GitCommandError:
                    pass
            # --only: a commit of these paths alone, built from HEAD, whatever else is staged
            _git(
                repo,
                "commit",
                "--only",
                "--no-verify",
                "-q",
                "-m",
                message,
                "--",
                *rels,
                env=identity(repo, ws_root),
            )
            return repo.head.commit.hexsha
    except (git.GitCommandError, git.InvalidGitRepositoryError, ValueError, OSError) as exc:
        if staged and repo is not None:
            try:
                _unstage(repo, rels)
            except (git.GitCommandError, ValueError, OSError):
                pass
        print(
            f"patchkeeper: warning: the workspace's history was not committed ({_one_line(exc)}); the records "
            f"are in snapshots/: commit them with git once that is fixed",
            file=sys.stderr,
        )
        return None


def uncommitted(ws_root: Path, directory: Path) -> list[Path]:
    """The files below `directory` that exist and differ from HEAD, staged or not, untracked too (not
    ignored ones): what a command copied there and did not commit. [] outside a git work tree or
    when git cannot say; git is run as a plain process (GitPython is slow to import)."""
    top = repo_root(ws_root)
    if top is None or not directory.is_dir():
        return []
    try:
        out = subprocess.run(
            ["git", "-C", str(top), "status", "--porcelain", "-z", "--untracked-files=all", "--no-renames"]
            + ["--", os.path.relpath(directory, top)],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    found = (top / os.fsdecode(item[3:]) for item in out.split(b"\0") if len(item) > 3)
    return sorted(p for p in found if p.is_file())


def _git(repo: Any, *args: str, env: dict[str, str] | None = None) -> None:
    """A git command that takes the index's lock: another git process holding it (an editor, another
    patchkeeper command) is waited for a while, not failed at once. `env`: added to the environment."""

    import git  # lazy: GitPython is slow to import; only authoring needs it

    for attempt in range(60):
        try:
            repo.git.execute(["git", *args], env=env or None)
            return
        except git.GitCommandError as exc:
            if "index.lock" not in str(exc.stderr) or attempt == 59:
                raise
            time.sleep(min(0.05 * (attempt + 1), 0.5))


def _unstage(repo: Any, rels: list[str]) -> None:
    """Give the index entries of `rels` back what HEAD has (nothing of ours left staged)."""
    if repo.head.is_valid():
        _git(repo, "reset", "-q", "HEAD", "--", *rels)
    else:
        _git(repo, "rm", "-q", "--cached", "--ignore-unmatch", "-r", "--", *rels)


def _one_line(exc: BaseException) -> str:
    """git's own complaint, without GitPython's command dump: its first error: line (the cause), else
    its first fatal: line, else its last line."""
    text = str(getattr(exc, "stderr", "") or exc).strip().strip("'\"")
    lines = [ln.strip().removeprefix("stderr: ").strip("'") for ln in text.replace("\\n", "\n").splitlines()]
    lines = [ln for ln in lines if ln]
    said = [ln for ln in lines if ln.startswith("error:")] or [ln for ln in lines if ln.startswith("fatal:")]
    return said[0] if said else lines[-1] if lines else type(exc).__name__


def workspace_ref(ws_root: Path, patchset_dirs: dict[str, Path]) -> dict[str, Any] | None:
    """The workspace commit now, and for each patch set whether its directory is as committed there."""
    if repo_root(ws_root) is None:
        return None
    import git  # lazy: GitPython is slow to import; only authoring needs it

    try:
        repo = _repo(ws_root)
        top = Path(
            cast("str | os.PathLike[str]", repo.working_tree_dir)
        )  # never None: repo_root found a work tree
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
    and modes, named relative to `subdir` (python/sglang/x.py -> sglang/x.py). Only commits are read,
    never the work tree: git runs nothing the checkout configures for it (core.fsmonitor, a clean
    filter or a diff driver of its own .git/config), and uncommitted changes are not part of a range."""
    import git  # lazy: GitPython is slow to import; only authoring needs it
    from gitdb.exc import BadName, BadObject  # lazy: part of GitPython (see `import git` above)

    repo = _checkout(directory)
    left, sep, right = span.partition("..")
    if not sep or not left or not right or right.startswith("."):
        raise BadInput(f"range {span!r} is not of the form A..B", "e.g. --range v0.5.23..my-branch")
    commits = []
    for ref in (left, right):
        try:
            commits.append(repo.commit(ref))
        except (BadName, BadObject, ValueError, git.GitCommandError):
            raise BadInput(
                f"{directory}: no commit {ref!r} (range {span})", "check the names with `git log --oneline`"
            ) from None
    subdir = subdir.strip("/")
    if subdir:
        for commit in commits:
            try:
                kind = (commit.tree / subdir).type
            except KeyError:
                kind = None
            if kind != "tree":
                raise BadInput(
                    f"{directory}: no directory {subdir!r} at {commit.hexsha[:12]}",
                    "pass --subdir as the directory holding the package (e.g. python)",
                )
    raw = repo.git.diff_tree(
        "-r", "-z", "--no-renames", commits[0].hexsha, commits[1].hexsha, "--", subdir or "."
    )
    fields = raw.split("\0")
    changes, odd = [], []
    for i in range(0, len(fields) - 1, 2):
        old_mode, new_mode, old_sha, new_sha, _status = fields[i].lstrip(":").split(" ")
        path = fields[i + 1]
        if subdir:
            path = path[len(subdir) + 1 :]
        if {old_mode, new_mode} - {"000000", "100644", "100755"}:
            odd.append(path)
            continue
        old = repo.odb.stream(bytes.fromhex(old_sha)).read() if old_mode != "000000" else None
        new = repo.odb.stream(bytes.fromhex(new_sha)).read() if new_mode != "000000" else None
        changes.append(
            Change(
                path,
                old,
                new,
                int(old_mode, 8) & 0o7777 if old is not None else None,
                int(new_mode, 8) & 0o7777 if new is not None else None,
            )
        )
    if odd:
        raise BadInput(
            f"{directory}: symlinks or submodules cannot be recorded: {', '.join(odd)}",
            "keep such changes out of the range",
        )
    return changes


def range_patch(directory: str, span: str, subdir: str) -> bytes:
    """The patch git itself writes for `span` below `subdir`, paths relative to `subdir` (call
    after read_range, which checks the range); the options fix what a user's git config could vary."""

    left, _, right = span.partition("..")
    subdir = subdir.strip("/")
    args = [
        "--binary",
        "--no-renames",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "-U3",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        *([f"--relative={subdir}"] if subdir else []),
        left,
        right,
        "--",
        subdir or ".",
    ]
    return cast(
        bytes, _checkout(directory).git.diff(*args, stdout_as_string=False, strip_newline_in_stdout=False)
    )


def _checkout(directory: str) -> git.Repo:
    """A checkout someone hands over, opened so that git runs nothing its own config names: even a
    diff of two commits starts core.fsmonitor's hook (tests/test_authoring.py holds it), so that key
    is overridden for every git command run on it (GIT_CONFIG_COUNT, git 2.31+: after the user's own
    entries, which stay in effect, gitenv.py). Nothing else those commands use runs a program: no work
    tree is read (no filter), and `git diff` is told --no-ext-diff --no-textconv."""
    import git  # lazy: GitPython is slow to import; only authoring needs it

    try:
        repo = git.Repo(directory)
    except (git.NoSuchPathError, git.InvalidGitRepositoryError):
        raise BadInput(f"{directory} is not a git checkout", "pass --git DIR of a git clone") from None
    repo.git.update_environment(**gitenv.after_users(os.environ, {"core.fsmonitor": "false"}))
    try:  # git judges the user's entries (a missing key or value, a bad key), and the checkout's owner
        repo.git.rev_parse("--git-dir")
    except git.GitCommandError as exc:
        raise BadInput(
            f"{directory}: git refuses to read it: {_one_line(exc)}",
            "fix what git names (GIT_CONFIG_COUNT and its GIT_CONFIG_KEY_<i>/GIT_CONFIG_VALUE_<i> in your "
            "environment, your git config, or its safe.directory), then run the command again",
        ) from None
    return repo
