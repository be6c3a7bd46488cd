"""What stands in the way of replacing or removing a file: its type, its directory, flags, owners.

A transaction asks before its commit point, so that a rename that would fail is refused while
nothing has changed. Standard library only: this runs on a target's host too.
"""

from __future__ import annotations

import os
import stat
import struct
from typing import Dict, List, Optional, Tuple

try:
    import fcntl
except ImportError:  # not a POSIX host: no flags to read
    fcntl = None  # type: ignore[assignment]

_FS_IOC_GETFLAGS = 0x80086601  # Linux: _IOR('f', 1, long)
_FL_IMMUTABLE, _FL_APPEND = 0x10, 0x20
_FLAG_NAMES = {"i": "immutable", "a": "append-only"}
Judged = Tuple[str, Optional[str]]  # a directory: its nearest existing ancestor, and what is wrong there
_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def obstacles(writes: List[str], removes: List[str]) -> Dict[str, str]:
    """path -> what stands in the way, for each path to be replaced by a regular file (`writes`) or
    unlinked (`removes`) that cannot be; the cached bytecode of touched modules is checked too,
    since it is removed after the commit point."""
    out: Dict[str, str] = {}
    dirs: Dict[str, Judged] = {}  # each directory is judged once
    caches: Dict[str, Dict[str, List[str]]] = {}  # and each __pycache__ listed once, by module
    for paths, removing in ((writes, False), (removes, True)):
        for path in paths:
            problem = _destination(path, removing, dirs)
            if problem:
                out[path] = problem
            elif path.endswith(".py"):
                out.update(_bytecode(path, dirs, caches))
    return out


def kind_of(st: os.stat_result) -> str:
    for test, name in _KINDS:
        if test(st.st_mode):
            return name
    return "not a regular file"


def entry_at(path: str, st: os.stat_result) -> str:
    """What `path` (whose lstat is `st`) is, in words: its kind, and a symbolic link's target."""
    return kind_of(st) + (f" (to {os.readlink(path)})" if stat.S_ISLNK(st.st_mode) else "")


def _destination(path: str, removing: bool, dirs: Dict[str, Judged]) -> Optional[str]:
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    if st is None and removing:
        return None  # already gone: nothing to remove
    if st is not None and not stat.S_ISREG(st.st_mode):
        return (
            f"is {entry_at(path, st)}, not a regular file: patchkeeper neither replaces nor backs it up; "
            "remove it or replace it with a regular file"
        )
    if st is not None:
        flag = _flags(path, st)
        if flag:
            return f"is {_FLAG_NAMES[flag]}; clear the flag first (chattr -{flag} {path})"
    parent = os.path.dirname(path)
    if parent not in dirs:
        dirs[parent] = _directory(parent)
    directory, problem = dirs[parent]
    if problem:
        return problem
    if st is not None and os.geteuid() != 0:
        return _sticky(directory, st)
    return None


def _directory(directory: str) -> Judged:
    """The nearest existing ancestor of `directory` (where a write would create what is missing),
    and why a file cannot be renamed into or unlinked from it."""
    probe = directory
    while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        st = os.stat(probe)
    except OSError as exc:
        return probe, f"its directory {probe} cannot be reached: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return probe, f"{probe} is {kind_of(st)} where a directory is needed; move it away"
    if not os.access(probe, os.W_OK | os.X_OK):
        why = "on a read-only file system" if _read_only(probe) else f"not writable by uid {os.geteuid()}"
        return probe, f"its directory {probe} is {why}"
    flag = _flags(probe, st)
    if flag:
        return (
            probe,
            f"its directory {probe} is {_FLAG_NAMES[flag]}; clear the flag first (chattr -{flag} {probe})",
        )
    return probe, None


def _sticky(directory: str, st: os.stat_result) -> Optional[str]:
    """In a sticky directory only the file's or the directory's owner (or root) may replace it."""
    euid = os.geteuid()
    try:
        dst = os.stat(directory)
    except OSError:
        return None
    if dst.st_mode & stat.S_ISVTX and euid not in (0, st.st_uid, dst.st_uid):
        return (
            f"is owned by uid {st.st_uid} in the sticky directory {directory}, so uid {euid} cannot "
            "replace it; run as its owner (or root)"
        )
    return None


def _bytecode(
    source: str, dirs: Dict[str, Judged], caches: Dict[str, Dict[str, List[str]]]
) -> Dict[str, str]:
    cache = os.path.join(os.path.dirname(source), "__pycache__")
    if cache not in caches:
        caches[cache] = {}
        try:
            names = os.listdir(cache)
        except OSError:
            names = []  # no cache directory (or none to read): nothing to remove
        for name in names:
            if name.endswith(".pyc"):  # <module>.<tag>[.opt-N].pyc
                caches[cache].setdefault(name.partition(".")[0], []).append(name)
    out = {}
    for name in caches[cache].get(os.path.basename(source)[:-3], ()):
        pyc = os.path.join(cache, name)
        problem = _destination(pyc, True, dirs)
        if problem:
            out[pyc] = problem + f" (the cached bytecode of {source}, removed with it)"
    return out


def _flags(path: str, st: os.stat_result) -> Optional[str]:
    """ "i" (immutable) or "a" (append-only) where the file system shows it (Linux ioctl, BSD st_flags);
    either makes the kernel refuse to replace or unlink the file, or any entry of the directory."""
    flags = getattr(st, "st_flags", 0)
    if flags:
        if flags & (stat.UF_IMMUTABLE | stat.SF_IMMUTABLE):
            return "i"
        if flags & (stat.UF_APPEND | stat.SF_APPEND):
            return "a"
        return None
    if fcntl is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a regular file or a directory, by the callers
    except OSError:
        return None
    try:
        value: int = struct.unpack_from("i", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8)))[0]
    except OSError:
        return None  # this file system keeps no such flags
    finally:
        os.close(fd)
    if value & _FL_IMMUTABLE:
        return "i"
    if value & _FL_APPEND:
        return "a"
    return None


def _read_only(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False
