"""The agent's operations on files and directories by path: read, stat, where paths resolve, write
a stage file, rename and unlink with their fsyncs (durable now or synced together later), the
directories a write creates or a removal empties, a source's bytecode.

Agent's file methods call these. Standard library only (shipped to hosts).
"""

from __future__ import annotations

import os
import stat

from .answers import FileStat
from .disk import fsync_dir, fsync_path, map_threads, open_regular
from .errors import AgentError
from .statcache import untrusted

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Dict, List, Optional


def read(path: str, owned: bool = False) -> bytes:
    """A file's bytes; `owned`: only a state file to be believed (see untrusted), else AgentError
    "untrusted" saying why. Whatever is not a regular file is refused without waiting on it (a FIFO
    or a device is never read: disk.open_regular; a directory raises IsADirectoryError)."""
    if os.path.isdir(path):
        raise IsADirectoryError(21, "Is a directory", path)
    with os.fdopen(open_regular(path), "rb") as f:
        if owned:
            why = untrusted(os.fstat(f.fileno()))
            if why is not None:
                raise AgentError("untrusted", f"{path}: {why}")
        return f.read()


def lstat(path: str) -> Optional[FileStat]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return FileStat(
        st.st_size,
        stat.S_IMODE(st.st_mode),
        stat.S_ISREG(st.st_mode),
        stat.S_ISDIR(st.st_mode),
        stat.S_ISLNK(st.st_mode),
        st.st_mtime_ns,
    )


def escaping(root: str, rels: List[str]) -> Dict[str, str]:
    """rel -> where its directory really is, for each relative path whose directory resolves
    (through a symlink) elsewhere than its own place below `root`: outside it, or to another
    directory inside (git apply writes beyond no symlink either); directories that do not exist
    yet are judged by their nearest existing ancestor."""
    top = os.path.realpath(root)
    seen: Dict[str, Optional[str]] = {}
    out: Dict[str, str] = {}
    for rel in rels:
        parent = os.path.dirname(os.path.join(root, rel))
        if parent not in seen:
            probe = parent
            while not os.path.lexists(probe) and probe != root and len(probe) > len(root):
                probe = os.path.dirname(probe)
            real = os.path.realpath(probe)
            own = os.path.normpath(os.path.join(top, os.path.relpath(probe, root)))
            seen[parent] = None if real == own else real
        where = seen[parent]
        if where is not None:
            out[rel] = where
    return out


def write_new(path: str, data: bytes, mode: int, durable: bool = True) -> None:
    """Write `path` directly (a stage file named in the journal, so recovery can remove it);
    `durable=False` leaves its fsync to a later sync_files."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fchmod(f.fileno(), stat.S_IMODE(mode))
        if durable:
            os.fsync(f.fileno())


def sync_files(paths: List[str]) -> None:
    """fsync each file, several at once (the file system commits them together): makes files
    written with durable=False as durable as if each had synced itself."""

    map_threads(fsync_path, list(dict.fromkeys(paths)), 8)


def rename(src: str, dst: str, durable: bool = True) -> None:
    """Rename; `durable=False` leaves the directory's fsync to a later sync_dirs (one per directory)."""
    os.replace(src, dst)
    if durable:
        fsync_dir(os.path.dirname(dst))


def unlink(path: str, durable: bool = True) -> bool:
    try:
        os.unlink(path)
    except (FileNotFoundError, NotADirectoryError):  # not there (or its parent is no directory)
        return False
    if durable:
        fsync_dir(os.path.dirname(path))
    return True


def sync_dirs(paths: List[str]) -> None:
    """fsync the directory of each path, once per directory: makes renames and unlinks done
    with durable=False as durable as if each had synced its own."""

    def sync(directory: str) -> None:
        try:
            fsync_dir(directory)
        except (FileNotFoundError, NotADirectoryError):  # removed since (an emptied created dir)
            pass

    map_threads(sync, list(dict.fromkeys(os.path.dirname(p) for p in paths)), 8)


def missing_dirs(paths: List[str]) -> List[str]:
    """The directories that writing each path would create: its missing ancestors."""
    out: Dict[str, None] = {}
    for path in paths:
        parent = os.path.dirname(path)
        chain = []
        while parent and parent != os.path.dirname(parent) and not os.path.lexists(parent):
            chain.append(parent)
            parent = os.path.dirname(parent)
        out.update(dict.fromkeys(reversed(chain)))
    return list(out)


def remove_empty_dirs(dirs: List[str]) -> List[str]:
    """Remove each directory that is empty (but for an empty __pycache__), deepest first;
    return those removed. A directory with anything else in it stays."""
    removed = []
    for path in sorted(dirs, key=lambda d: d.count("/"), reverse=True):
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                continue
            try:
                os.rmdir(os.path.join(path, "__pycache__"))
            except OSError:
                pass  # absent, or holds bytecode of other modules: then the directory stays too
            os.rmdir(path)
        except OSError:  # not empty, or already gone
            continue
        fsync_dir(os.path.dirname(path))
        removed.append(path)
    return removed


def listdir(path: str) -> List[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def remove_bytecode(paths: List[str]) -> int:
    """Remove the cached bytecode of each source path; return how many files went."""
    pycs: List[str] = []
    for path in paths:
        if not path.endswith(".py"):
            continue
        cache = os.path.join(os.path.dirname(path), "__pycache__")
        stem = os.path.basename(path)[:-3] + "."
        try:
            names = os.listdir(cache)
        except (FileNotFoundError, NotADirectoryError):  # none, or a file in its place: no bytecode
            continue
        pycs.extend(
            os.path.join(cache, name) for name in names if name.startswith(stem) and name.endswith(".pyc")
        )  # <stem>.<tag>[.opt-N].pyc
    # unlinked on threads (freeing an inode can wait for the file system's journal: the waits
    # overlap), then each __pycache__ synced once
    removed = map_threads(lambda pyc: unlink(pyc, durable=False), pycs, 8)
    sync_dirs([p for p, gone in zip(pycs, removed) if gone])
    return sum(removed)
