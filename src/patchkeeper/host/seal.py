"""A tree's seal: the stat identity of every entry one audit of a site dir read, with its answer.

A warm audit whose inputs are all as they were gives the answer again after one lstat per entry
(an entry's identity: size, mtime, ctime, inode and device, statcache.identity's):
no listing, no digest, no manifest, no bytecode header is read. The entries are every directory
below the site dir (adding, removing or renaming an entry moves its mtime and ctime), every file
the scan digests, every .py and .pyc (the bytecode check's inputs) and the paths named outside it
(the role files, and the stored manifest the files are compared with). Identities are taken before the audit reads anything, so a change made while it runs shows as a
new identity next time. A seal is only written when every entry is older than the file system's
timestamp granularity (the racily-clean rule of statcache.StatCache) and none is a symlink (whose
target could change behind an unchanged link); anything else simply leaves no seal.
Standard library only (shipped to hosts with the agent).
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
import time
from array import array

from .disk import write_atomic
from .statcache import StatCache, read_cache, writing_caches

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs a command's start about 10 ms)
    from typing import Any, Callable, Collection, Dict, Iterable, List, Optional, Tuple

FORMAT = ("pk-seal", 2, tuple(sys.version_info[:2]))
_ABSENT = (-1, 0, 0, 0, 0)
WIDTH = len(_ABSENT)  # numbers per identity


def stat_identities(paths: Iterable[str], stat_of: Optional[Callable[[str], os.stat_result]] = None) -> bytes:
    """(size, mtime_ns, ctime_ns, inode, device) of each path, packed, by `stat_of` (os.lstat; os.stat
    to follow links); an absent path packs as _ABSENT."""
    stat_of = stat_of or os.lstat
    out: List[int] = []
    extend = out.extend
    for path in paths:  # the loop of every warm audit, once per sealed path: pack(stats(...)), inlined
        try:
            st = stat_of(path)
        except OSError:  # absent (or unreadable)
            extend(_ABSENT)
            continue
        extend((st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev))
    return array("q", out).tobytes()


def stats(paths: Iterable[str], stat_of: Callable[[str], os.stat_result]) -> Dict[str, Any]:
    """path -> stat_of(path), or the OSError it raised, for each path: taken once, then packed by
    `pack` for a seal and handed to whoever reads the files (stat_taken)."""
    return {path: _taken(path, stat_of) for path in paths}


def pack(taken: Iterable[Any]) -> bytes:
    """The identities of stats (or OSErrors, as `stats` gives them), packed: an error as _ABSENT,
    never equal to an identity a file had."""
    out: List[int] = []
    extend = out.extend
    for st in taken:
        if isinstance(st, OSError):
            extend(_ABSENT)
        else:
            extend((st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev))
    return array("q", out).tobytes()


def _taken(path: str, stat_of: Callable[[str], os.stat_result]) -> Any:
    try:
        return stat_of(path)
    except OSError as exc:  # absent (or unreadable)
        return exc


def stat_taken(path: str, taken: Optional[Dict[str, Any]]) -> os.stat_result:
    """os.stat(path), from `taken` (`stats`'s answer) where it holds the path, its error raised again."""
    known = taken.get(path) if taken is not None else None
    if known is None:
        return os.stat(path)
    if isinstance(known, OSError):
        raise known
    return known  # type: ignore[no-any-return]


def settled(ids: bytes, started_ns: int) -> bool:
    """Whether every identity of `ids` (from stat_identities) is older than the clock granularity
    before `started_ns`: only then may an answer derived from those files be remembered."""
    values = array("q", ids)
    newest = max((max(values[i + 1], values[i + 2]) for i in range(0, len(values), WIDTH)), default=0)
    return newest + StatCache.GRANULARITY_NS < started_ns


def load(path: str, key: Any) -> Optional[Any]:
    """The answer sealed at `path` for `key` when every entry is as it was, else None."""
    data = read_cache(path)  # None: absent, or not to be trusted
    try:
        stamp, sealed_key, names, ids, answer = marshal.loads(data)  # type: ignore[arg-type]
    except (ValueError, EOFError, TypeError):  # absent, damaged or another version's: no seal
        return None
    if stamp != FORMAT or sealed_key != key:
        return None
    return answer if stat_identities(names.split("\0")) == ids else None


def entries(
    root: str, walk: Tuple[str, ...], named: Iterable[str], others: Collection[str] = ()
) -> Optional[Tuple[List[str], bytes]]:
    """Every entry a seal of `root` covers, with its identity, taken now, but the files in `others`
    (whose identities another seal holds, and the caller's key with it); None when it may not be
    sealed (an entry changed within the timestamp granularity, or is a symlink)."""
    started = time.time_ns()
    newest = 0
    paths: List[str] = []
    ids: List[int] = []
    tops = tuple(f"{root}/{d}" for d in walk)
    inside = tuple(t + "/" for t in tops)

    def note(path: str, st: os.stat_result) -> None:
        nonlocal newest
        paths.append(path)
        ids.extend((st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev))
        newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)

    try:
        top = os.lstat(root)
        if not stat.S_ISDIR(top.st_mode):
            return None
        note(root, top)
        if not _walk(root, tops, inside, note, others):
            return None
    except OSError:  # an entry vanished or cannot be read: no seal this time
        return None
    for path in named:
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            paths.append(path)
            ids.extend(_ABSENT)
            continue
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return None
        note(path, st)
    if newest + StatCache.GRANULARITY_NS >= started:
        return None
    return paths, array("q", ids).tobytes()


def save(path: str, key: Any, sealed: Tuple[List[str], bytes], answer: Any) -> None:
    """Write a seal (0600, not durably: a lost seal only costs one full audit)."""
    names, ids = sealed
    if not writing_caches():
        return
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        write_atomic(path, marshal.dumps((FORMAT, key, "\0".join(names), ids, answer)), 0o600, durable=False)
    except OSError:
        pass  # a seal that cannot be written only costs time


def _walk(
    root: str, tops: Tuple[str, ...], inside: Tuple[str, ...], note: Any, others: Collection[str]
) -> bool:
    """Note every directory below root and each file the seal covers but those in `others`; False at
    a covered symlink (in `others` too)."""
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as it:
            found = list(it)
        for entry in found:  # the entry's type from the listing: only what the seal covers is stat'ed
            path = entry.path
            covered = path.endswith((".py", ".pyc")) or path in tops or path.startswith(inside)
            if entry.is_symlink():
                if covered:
                    return False
                continue
            if entry.is_dir(follow_symlinks=False):
                note(path, entry.stat(follow_symlinks=False))
                stack.append(path)
            elif covered and path not in others:
                note(path, entry.stat(follow_symlinks=False))
    return True
