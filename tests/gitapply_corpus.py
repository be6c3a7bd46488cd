"""git apply as the oracle: a corpus of diffs made by real git in tmp repos and git's own test vectors
(tests/data/gitapply), damaged versions of each, and the verdict and tree of `git apply` and of
patchkeeper's check and apply (patchset.load, stacks.build_files and the engine's refusals) on each."""

from __future__ import annotations

import os
import random
import shutil
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from patchkeeper.change import plans, stacks
from patchkeeper.errors import PatchkeeperError
from patchkeeper.host.agent import Agent
from patchkeeper.patchset import patchset

DATA = Path(__file__).parent / "data" / "gitapply"
LINK, DIR = 0o120000, 0o040000
Tree = dict[str, tuple[bytes, int]]  # path -> (bytes, mode); a symlink's bytes are its target

# The refusals docs/configuration.md ("Refused, by what they are") and docs/author-patch-sets.md name:
# a fragment of patchkeeper's message -> the form refused.
DOCUMENTED = {
    "CRLF": "CRLF line endings",
    "not a regular file's": "a mode other than a regular file's (a symlink, a submodule)",
    "not regular files": "a path the patch changes that is a symlink or a directory",
    "escapes site-packages": "a path with '..' or absolute",
    "backslash": "a path with a backslash",
    "holds a control character": "a path with a control character (a tab, an escape)",
    "not UTF-8": "a name that is not UTF-8",
    "without its bytes": "a binary change without --binary",
    "full index line": "a binary patch without git's full index line",
    "where a directory is needed": "a file replaced by a directory of the same name, or the reverse",
    "is a directory, not a regular file": "a file replaced by a directory of the same name, or the reverse",
    "a .git component": "a path with a .git component",
    "lead outside site-packages": "a path through a symlinked directory",
    "lead through a symlinked directory": "a path through a symlinked directory",
    "lacks the a/ or b/ prefix": "a path without git's a/ and b/ prefixes",
    "without the header lines git writes": "a `diff --git` line without its header lines",
    "not a unified diff: Unexpected ": "git's header lines or binary patch without their `diff --git` line",
}


@dataclass(frozen=True)
class Case:
    """A tree and the patches applied to it in order (one patch set, one .patch file each)."""

    name: str
    tree: tuple[tuple[str, bytes, int], ...]
    patches: tuple[bytes, ...]


@dataclass(frozen=True)
class Outcome:
    """What one side did: accepted (with the tree it left) or refused (and why)."""

    ok: bool
    tree: tuple[tuple[str, bytes, int], ...] = ()
    why: str = ""


def case(name: str, tree: Tree, *patches: bytes) -> Case:
    return Case(name, tuple((p, d, m) for p, (d, m) in sorted(tree.items())), patches)


# ---- trees on disk -------------------------------------------------------------------------------
def write_tree(root: Path, tree: tuple[tuple[str, bytes, int], ...]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for rel, data, mode in tree:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if mode == LINK:
            os.symlink(data, path)
        elif mode == DIR:
            path.mkdir(exist_ok=True)
        else:
            path.write_bytes(data)
            path.chmod(mode)


def read_tree(root: Path) -> tuple[tuple[str, bytes, int], ...]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            st = path.lstat()
            rel = path.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode):
                out.append((rel, os.readlink(path).encode(), LINK))
            elif stat.S_ISREG(st.st_mode):
                out.append((rel, path.read_bytes(), 0o755 if st.st_mode & 0o100 else 0o644))
            elif not os.listdir(path):
                out.append((rel, b"", DIR))  # an empty directory: git leaves none, nor should we
    return tuple(sorted(out))


# ---- the two sides -------------------------------------------------------------------------------
_GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}


def git_apply(c: Case, work: Path) -> tuple[Outcome, bool]:
    """`git apply` of each patch in turn in a plain directory holding the tree (as site-packages is:
    no repository); and whether `git apply --check` of the first patch said what its apply did."""
    root = work / "git"
    write_tree(root, c.tree)
    env = {**os.environ, **_GIT_ENV, "GIT_CEILING_DIRECTORIES": str(work)}
    consistent = True
    for i, patch in enumerate(c.patches):
        (work / f"g{i}.patch").write_bytes(patch)
        args = ["git", "apply", str(work / f"g{i}.patch")]
        check = subprocess.run([*args[:2], "--check", *args[2:]], cwd=root, env=env, capture_output=True)
        proc = subprocess.run(args, cwd=root, env=env, capture_output=True)
        consistent = consistent and (check.returncode == 0) == (proc.returncode == 0)
        if proc.returncode:
            return Outcome(False, why=proc.stderr.decode(errors="replace").strip()[:300]), consistent
    return Outcome(True, read_tree(root)), consistent


class _Target:
    """The part of a target the engine's refusals ask (its agent, in this process, and its paths)."""

    def __init__(self, site: Path) -> None:
        self.agent = Agent()
        self.info = SimpleNamespace(site=str(site), path_of=lambda key: str(site / key))


def patchkeeper_apply(c: Case, work: Path) -> tuple[Outcome, Outcome]:
    """patchkeeper's `check` verdict and its apply's outcome, each as the engine reaches them
    (engine.plan_apply, commands/check.py, transaction.carry_out's obstacles) on a site holding the tree."""
    ws = work / "ws"
    directory = ws / "c"
    directory.mkdir(parents=True)
    (directory / "patchset.toml").write_text('name = "c"\nversion = "1"\npackage = "pkg"\n')
    for i, patch in enumerate(c.patches):
        (directory / f"{i:03d}.patch").write_bytes(patch)
    site = work / "site"
    write_tree(site, c.tree)
    try:
        ps = patchset.load(ws, "c")
    except PatchkeeperError as exc:
        return Outcome(False, why=exc.message), Outcome(False, why=exc.message)
    target = _Target(site)
    keys = stacks.touched_keys([ps])
    actual = {k for k in keys if (site / k).is_file() and not (site / k).is_symlink()}
    present = {fp.path for _, fps in ps.patches for fp in fps if fp.kind != "add"}
    try:
        plans.refuse_non_regular(target, [k for k in keys if k not in actual and k in present])  # type: ignore[arg-type]
        plans.refuse_escaping(target, keys, "the patch sets write")  # type: ignore[arg-type]
    except PatchkeeperError as exc:
        return Outcome(False, why=exc.message), Outcome(False, why=exc.message)
    before = {k: (site / k).read_bytes() if k in actual else None for k in keys}
    modes = {k: stat.S_IMODE((site / k).stat().st_mode) for k in actual}
    trial = dict(before)
    reports = stacks.build_files([ps], trial, dict(modes), (), trial_of=[ps])
    bad = [f"{r.path}: {h.problem}" for r in reports for h in r.hunks if h.offset is None]
    blocked = _obstacles(target, site, before, trial)
    checked = Outcome(not bad and not blocked, why="; ".join(bad + blocked))
    files, new_modes = dict(before), dict(modes)
    try:
        stacks.build_files([ps], files, new_modes, ())
    except PatchkeeperError as exc:
        return checked, Outcome(False, why=exc.message)
    blocked = _obstacles(target, site, before, files)
    if blocked:
        return checked, Outcome(False, why="; ".join(blocked))
    for key in sorted(files, key=lambda k: files[k] is not None):  # removals first, as the transaction
        path = site / key
        if files[key] is None:
            if key in actual:
                path.unlink()
                _remove_empty_dirs(site, path.parent)
        elif files[key] != before[key] or new_modes.get(key) != modes.get(key):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(files[key])  # type: ignore[arg-type]
            path.chmod(new_modes.get(key, 0o644))
    return checked, Outcome(True, read_tree(site))


def _obstacles(target: _Target, site: Path, before: dict, after: dict) -> list[str]:
    changed = [k for k in after if after[k] != before.get(k)]
    found = target.agent.obstacles(
        [str(site / k) for k in changed if after[k] is not None],
        [str(site / k) for k in changed if after[k] is None],
    )
    return [f"{p} {why}" for p, why in found.items()]


def _remove_empty_dirs(site: Path, directory: Path) -> None:
    while directory != site and not any(directory.iterdir()):
        directory.rmdir()
        directory = directory.parent


def documented(why: str) -> str | None:
    return next((form for key, form in DOCUMENTED.items() if key in why), None)


@dataclass(frozen=True)
class Verdict:
    case: Case
    git: Outcome
    check: Outcome
    apply: Outcome
    kind: str  # agree | documented refusal | undocumented refusal | applied where git refuses | other tree | check says otherwise than apply
    git_consistent: bool  # git apply --check said what git apply did


def judge(c: Case, work: Path) -> Verdict:
    work.mkdir(parents=True)
    git, consistent = git_apply(c, work)
    check, applied = patchkeeper_apply(c, work)
    if check.ok != applied.ok:
        kind = "check says otherwise than apply"
    elif git.ok and applied.ok:
        kind = "agree" if git.tree == applied.tree else "other tree"
    elif not git.ok and not applied.ok:
        kind = "agree"
    elif applied.ok:
        kind = "applied where git refuses"
    else:
        kind = "documented refusal" if documented(applied.why) else "undocumented refusal"
    shutil.rmtree(work, ignore_errors=True)
    return Verdict(c, git, check, applied, kind, consistent)


# ---- diffs made by git ---------------------------------------------------------------------------
def git_diff(work: Path, before: Tree, after: Tree, *options: str) -> bytes:
    """`git diff --cached --binary OPTIONS` between two trees, made by git in a repository of its own."""
    repo = work / f"repo{len(list(work.glob('repo*')))}"
    write_tree(repo, tuple((p, d, m) for p, (d, m) in before.items()))
    run = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "core.quotepath=true"]
    env = {**os.environ, **_GIT_ENV}
    subprocess.run([*run, "init", "-q"], check=True, env=env)
    subprocess.run([*run, "add", "-A"], check=True, env=env)
    subprocess.run([*run, "commit", "-qm", "before", "--allow-empty"], check=True, env=env)
    for child in repo.iterdir():
        if child.name != ".git":
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    write_tree(repo, tuple((p, d, m) for p, (d, m) in after.items()))
    subprocess.run([*run, "add", "-A"], check=True, env=env)
    out = subprocess.run(
        [*run, "diff", "--cached", "--binary", *options], check=True, env=env, capture_output=True
    ).stdout
    shutil.rmtree(repo)
    return out


def text(n: int, tag: str = "line") -> bytes:
    return b"".join(b"%s %d\n" % (tag.encode(), i) for i in range(1, n + 1))


def _edit(data: bytes, at: tuple[int, ...], what: bytes = b"changed") -> bytes:
    lines = data.split(b"\n")
    for i in at:
        lines[i] = lines[i] + b" " + what
    return b"\n".join(lines)


def made_by_git(work: Path) -> Iterator[Case]:
    """Each form git writes, from trees made here; the tree is `before`."""
    rng = random.Random(38)
    base = text(60)
    blob = rng.randbytes(6000)
    blob2 = bytearray(blob)
    blob2[3000:3010] = b"0123456789"
    repeated = b"".join(b"x\n" if i % 4 else b"block\n" for i in range(48))
    f = 0o644
    pairs: list[tuple[str, Tree, Tree, tuple[str, ...]]] = [
        ("edit-one", {"o.txt": (base, f)}, {"o.txt": (_edit(base, (30,)), f)}, ()),
        ("edit-three", {"o.txt": (base, f)}, {"o.txt": (_edit(base, (5, 30, 55)), f)}, ()),
        ("edit-first", {"o.txt": (base, f)}, {"o.txt": (_edit(base, (0,)), f)}, ()),
        ("edit-last", {"o.txt": (base, f)}, {"o.txt": (_edit(base, (59,)), f)}, ()),
        ("insert-top", {"o.txt": (base, f)}, {"o.txt": (b"top\n" + base, f)}, ()),
        ("append", {"o.txt": (base, f)}, {"o.txt": (base + b"tail\n", f)}, ()),
        ("drop-first", {"o.txt": (base, f)}, {"o.txt": (base.split(b"\n", 1)[1], f)}, ()),
        ("drop-last", {"o.txt": (base, f)}, {"o.txt": (base.rsplit(b"\n", 2)[0] + b"\n", f)}, ()),
        ("no-eol-add", {"o.txt": (base, f)}, {"o.txt": (base + b"last", f)}, ()),
        ("no-eol-remove", {"o.txt": (base + b"last", f)}, {"o.txt": (base, f)}, ()),
        ("no-eol-both", {"o.txt": (base + b"a", f)}, {"o.txt": (base + b"b", f)}, ()),
        ("empty-to-text", {"o.txt": (b"", f)}, {"o.txt": (b"one\n", f)}, ()),
        ("text-to-empty", {"o.txt": (b"one\ntwo\n", f)}, {"o.txt": (b"", f)}, ()),
        ("add", {"o.txt": (base, f)}, {"o.txt": (base, f), "d/new.txt": (text(5, "new"), f)}, ()),
        ("add-empty", {"o.txt": (base, f)}, {"o.txt": (base, f), "empty": (b"", f)}, ()),
        ("add-exec", {}, {"run.sh": (b"#!/bin/sh\necho hi\n", 0o755)}, ()),
        ("delete", {"o.txt": (base, f), "g.txt": (text(3), f)}, {"g.txt": (text(3), f)}, ()),
        ("delete-empty", {"o.txt": (base, f), "empty": (b"", f)}, {"o.txt": (base, f)}, ()),
        ("rename", {"o.txt": (base, f)}, {"o2.txt": (base, f)}, ("-M",)),
        ("rename-edit", {"o.txt": (base, f)}, {"d/o2.txt": (_edit(base, (10,)), f)}, ("-M",)),
        ("copy", {"o.txt": (base, f)}, {"o.txt": (base, f), "c.txt": (base, f)}, ("-C", "-C")),
        (
            "copy-edit",
            {"o.txt": (base, f)},
            {"o.txt": (base, f), "c.txt": (_edit(base, (40,)), f)},
            ("-C", "-C"),
        ),
        ("mode", {"o.txt": (base, f)}, {"o.txt": (base, 0o755)}, ()),
        ("mode-edit", {"o.txt": (base, 0o755)}, {"o.txt": (_edit(base, (3,)), f)}, ()),
        ("binary-add", {}, {"b.bin": (blob, f)}, ()),
        ("binary-literal", {"b.bin": (b"\0small\0", f)}, {"b.bin": (b"\0other\0bytes", f)}, ()),
        ("binary-delta", {"b.bin": (blob, f)}, {"b.bin": (bytes(blob2), f)}, ()),
        ("binary-delete", {"b.bin": (blob, f)}, {}, ()),
        ("binary-rename", {"b.bin": (blob, f)}, {"c.bin": (bytes(blob2), f)}, ("-M",)),
        ("symlink-add", {"o.txt": (base, f)}, {"o.txt": (base, f), "l": (b"o.txt", LINK)}, ()),
        ("symlink-change", {"l": (b"a", LINK)}, {"l": (b"b", LINK)}, ()),
        ("symlink-delete", {"l": (b"a", LINK), "o.txt": (base, f)}, {"o.txt": (base, f)}, ()),
        ("file-to-symlink", {"o.txt": (base, f)}, {"o.txt": (b"elsewhere", LINK)}, ()),
        ("file-to-dir", {"d": (base, f)}, {"d/x": (base, f)}, ()),
        ("dir-to-file", {"d/x": (base, f)}, {"d": (base, f)}, ()),
        ("spaced", {"a b.txt": (base, f)}, {"a b.txt": (_edit(base, (9,)), f)}, ()),
        ("quoted", {'q"x.txt': (base, f)}, {'q"x.txt': (_edit(base, (9,)), f)}, ()),
        ("unicode", {"caf\u00e9.txt": (base, f)}, {"caf\u00e9.txt": (_edit(base, (9,)), f)}, ()),
        ("repeated", {"r.txt": (repeated, f)}, {"r.txt": (_edit(repeated, (21,)), f)}, ()),
        (
            "two-files",
            {"o.txt": (base, f), "p.txt": (base, f)},
            {"o.txt": (_edit(base, (2,)), f), "p.txt": (_edit(base, (50,)), f)},
            (),
        ),
    ]
    for name, before, after, options in pairs:
        for extra in (
            ((), ("-U0",), ("-U1",), ("-U8",))
            if name.startswith("edit") or name in ("repeated", "append", "insert-top")
            else ((),)
        ):
            diff = git_diff(work, before, after, *options, *extra)
            label = name + "".join(extra)
            yield case(label, before, diff)
            if (
                name
                in ("edit-three", "edit-one", "edit-first", "edit-last", "repeated", "append", "insert-top")
                and not extra
            ):
                for shift_name, shifted in _shifted(before["o.txt" if "o.txt" in before else "r.txt"][0]):
                    key = "o.txt" if "o.txt" in before else "r.txt"
                    yield case(f"{label}/{shift_name}", {**before, key: (shifted, f)}, diff)
    yield from _series(work, base)
    yield from _traditional(work, base)


def _shifted(data: bytes) -> Iterator[tuple[str, bytes]]:
    """The file moved under the hunks: lines added at the top or the end, or a line taken from the top."""
    yield "3-lines-on-top", b"pre 1\npre 2\npre 3\n" + data
    yield "line-on-top", b"pre\n" + data
    yield "3-lines-at-end", data + b"post 1\npost 2\npost 3\n"
    yield "top-line-gone", data.split(b"\n", 1)[1]
    yield "doubled", data + data


def _series(work: Path, base: bytes) -> Iterator[Case]:
    """A patch that edits a file, then one that renames or copies it: as two patches, and as one."""
    f = 0o644
    edited = _edit(base, (5,))
    first = git_diff(work, {"o.txt": (base, f)}, {"o.txt": (edited, f)})
    for how, after, options in (
        ("rename", {"o2.txt": (edited, f)}, ("-M",)),
        ("rename-edit", {"o2.txt": (_edit(edited, (40,)), f)}, ("-M",)),
        ("rename-edit-near", {"o2.txt": (_edit(edited, (6,)), f)}, ("-M",)),
        ("copy", {"o.txt": (edited, f), "o2.txt": (edited, f)}, ("-C", "-C")),
        ("copy-edit", {"o.txt": (edited, f), "o2.txt": (_edit(edited, (40,)), f)}, ("-C", "-C")),
        ("delete", {}, ()),
        ("edit-again", {"o.txt": (_edit(edited, (50,)), f)}, ()),
    ):
        second = git_diff(work, {"o.txt": (edited, f)}, after, *options)
        yield case(f"series-edit-then-{how}", {"o.txt": (base, f)}, first, second)
        yield case(f"one-file-edit-then-{how}", {"o.txt": (base, f)}, first + second)


def _traditional(work: Path, base: bytes) -> Iterator[Case]:
    """`diff -ruN` (and -u) of two directories: additions and deletions as diff writes them (an epoch
    timestamp on the missing side)."""
    f = 0o644
    for name, before, after in (
        ("diff-ruN-delete", {"o.txt": (base, f), "k.txt": (b"k\n", f)}, {"k.txt": (b"k\n", f)}),
        ("diff-ruN-add", {"k.txt": (b"k\n", f)}, {"k.txt": (b"k\n", f), "o.txt": (base, f)}),
        ("diff-ruN-edit", {"o.txt": (base, f)}, {"o.txt": (_edit(base, (20,)), f)}),
        ("diff-ruN-empty-delete", {"e": (b"", f), "k": (b"k\n", f)}, {"k": (b"k\n", f)}),
    ):
        top = work / f"trad-{name}"
        write_tree(top / "a", tuple((p, d, m) for p, (d, m) in before.items()))
        write_tree(top / "b", tuple((p, d, m) for p, (d, m) in after.items()))
        diff = subprocess.run(["diff", "-ruN", "a", "b"], cwd=top, capture_output=True).stdout
        shutil.rmtree(top)
        if diff:  # diff writes nothing for an empty file removed: no patch (import refuses an empty file)
            yield case(name, before, diff)
