"""The caches an agent keeps beside the files it reads, and the one rule every cache file obeys.

A cache is never believed over the files it stands for: an entry is keyed by its file's stat
identity (size, mtime_ns, ctime_ns, inode, device: an image swapped at the same mount point keeps
the first four of every file, not the device) and is only remembered once the file is older than the
file system's timestamp granularity (git's racily-clean rule). A cache file is only read when it is
a regular file that belongs to the user running the command (or root) and that no one else may
write, in a directory of which the same holds; any other is ignored, with one warning per command
on stderr (state files read by read_changed obey the same rule). Caches hold data only (marshal of
plain values, or JSON): nothing read from one runs.
Standard library only (shipped to hosts).
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
import time

from .answers import ChangedFiles
from .disk import HASH_WORKERS, NotRegular, hash_file, list_entries, map_files, open_regular, write_atomic

MAX_STATE_FILE = 16 << 20  # a ledger entry (about 1 KB; an apply's lists its changed files)
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs a command's start about 10 ms)
    from typing import Any, Sequence

    Identity = tuple[int, int, int, int, int]
    Row = tuple[str, int, int]

_warned: list[str] = []  # the cache a warning was given for (one per process)
_writing = [True]  # whether caches and seals are written: not for a dry run or check mode (Agent.hands_off)


def write_caches(on: bool) -> None:
    """Turn the writing of every cache and seal of this process on or off (off: read them only)."""
    _writing[0] = on


def writing_caches() -> bool:
    return _writing[0]


def identity(st: os.stat_result) -> Identity:
    """What a cache keys a file by: any write, rename over, or image swapped in changes one of these."""
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev


def user_cache(name: str) -> str:
    """The path of `name` in this user's cache directory for patchkeeper ($XDG_CACHE_HOME or ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "patchkeeper", name)


def untrusted(st: os.stat_result) -> str | None:
    """Why a cache or state file (a ledger entry, the journal) or its directory with this stat may not
    be believed, None when it may: it must belong to the user running the command (or root) and be
    writable by no one else."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"it belongs to uid {st.st_uid}"
    if st.st_mode & 0o022:
        return f"others may write it (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def warn_once(path: str, why: str) -> None:
    """One warning per command on stderr, for the first cache found untrustworthy."""
    if _warned:
        return
    _warned.append(path)
    sys.stderr.write(
        f"patchkeeper: warning: cache {path} ignored: {why}; it is only a cache, so this costs "
        "time, not correctness (fix it with `chmod go-w` or `chown`, or remove it)\n"
    )


def read_cache(path: str) -> bytes | None:
    """The bytes of a cache file that may be believed (see untrusted: the file and its directory),
    else None: silently when it is absent, with warn_once when it is not to be trusted."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:  # a symlink (ELOOP), or not readable
        warn_once(path, f"it cannot be opened as a file ({exc.strerror})")
        return None
    try:
        st = os.fstat(fd)
        why = "it is not a regular file" if not stat.S_ISREG(st.st_mode) else untrusted(st)
        if why is None:
            directory = os.path.dirname(path) or "."
            why = untrusted(os.stat(directory))
            if why is not None:
                why, path = f"its directory: {why}", directory
        if why is not None:
            warn_once(path, why)
            return None
        chunks = []
        chunk = os.read(fd, 1 << 20)
        while chunk:
            chunks.append(chunk)
            chunk = os.read(fd, 1 << 20)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def load_cache(path: str, stamp: Any) -> Any:
    """The body of a cache file written by save_cache with this `stamp` and a dict body, else None
    (absent, damaged, another version's, or not to be trusted: a cache we cannot use only costs time)."""
    data = read_cache(path)
    if data is None:
        return None
    try:
        found, body = marshal.loads(data)
    except (ValueError, EOFError, TypeError):
        return None
    return body if found == stamp and isinstance(body, dict) else None


def save_cache(path: str, stamp: Any, body: Any) -> None:
    """Write a cache file that load_cache(path, stamp) reads back (0600, in a directory made 0700),
    not durably: a cache lost in a power cut, or one that cannot be written at all, only costs time."""
    if not _writing[0]:
        return
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        write_atomic(path, marshal.dumps((stamp, body)), 0o600, durable=False)
    except (OSError, ValueError):  # ValueError: a value marshal cannot write
        pass


class StatCache:
    """Values (digests, verdicts, listings) keyed by a path and its file's identity, immune to
    racily clean files: an entry is only kept when the file's mtime and ctime are older than the
    command's start by more than the file system's timestamp granularity; any later change then
    moves ctime forward, so a value is never trusted for a file that could have changed within the
    tick it was read in. An entry is (size, mtime_ns, ctime_ns, inode, device, value).

    The file is marshal data stamped with its format and the Python version that wrote it; one in
    another format, of another Python, or not to be trusted (read_cache) is simply empty."""

    GRANULARITY_NS = 2_000_000_000  # file systems' coarsest timestamp tick we allow for
    FORMAT: Any = ("pk-statcache", 3, sys.version_info[:2])

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.entries: dict[str, tuple[Any, ...]] = {}
        self.fresh: dict[str, tuple[Any, ...]] = {}
        self.started_ns = time.time_ns()
        if path:
            self.entries = load_cache(path, self.FORMAT) or {}

    def lookup(self, rel: str, st: os.stat_result) -> Any:
        """The value remembered for `rel` while its file's identity is unchanged, else None."""
        hit = self.entries.get(rel)
        if hit is not None and hit[:5] == identity(st):
            self.fresh[rel] = hit
            return hit[5]
        return None

    def remember(self, rel: str, st: os.stat_result, value: Any) -> None:
        if max(st.st_mtime_ns, st.st_ctime_ns) + self.GRANULARITY_NS < self.started_ns:
            self.fresh[rel] = (*identity(st), value)

    def digests(
        self, jobs: Sequence[tuple[str, str]], algorithm: str, stats: dict[str, os.stat_result] | None = None
    ) -> dict[str, Row]:
        """key -> (digest, size, mode) of each job (key, path) that is a regular file, in the jobs'
        order: from this cache while the file's identity is unchanged, else hashed (disk.map_files:
        big files on threads). `stats` gets each file's stat."""
        rows: dict[str, Any] = {}
        todo: list[tuple[str, str, os.stat_result]] = []
        lstat, is_reg, imode, get, fresh = os.lstat, stat.S_ISREG, stat.S_IMODE, self.entries.get, self.fresh
        prefix = algorithm + ":"
        for key, path in jobs:  # the hot loop of every warm command: lookup, inlined, field by field
            try:
                st = lstat(path)
            except (FileNotFoundError, NotADirectoryError):
                continue
            mode = st.st_mode
            if not is_reg(mode):
                continue
            if stats is not None:
                stats[key] = st
            hit = get(key)
            if (
                hit is not None
                and hit[2] == st.st_ctime_ns
                and hit[1] == st.st_mtime_ns
                and hit[0] == st.st_size
                and hit[3] == st.st_ino
                and hit[4] == st.st_dev
                and hit[5].startswith(prefix)
            ):
                fresh[key] = hit
                rows[key] = (hit[5], hit[0], imode(mode))
            else:
                rows[key] = None  # its place, in order
                todo.append((key, path, st))
        hashed = map_files(
            lambda job: hash_file(job[1], algorithm), todo, lambda job: job[2].st_size, HASH_WORKERS
        )
        for (key, _, st), digest in zip(todo, hashed):
            rows[key] = (digest, st.st_size, imode(st.st_mode))
            self.remember(key, st, digest)
        return rows

    def save(self) -> None:
        """Write the entries this run used or made, when it made any, or when an eighth of the
        known ones were not used (stale: their files changed, went, or were not asked for). A stale
        entry kept meanwhile is never believed: its file's identity moved. So the few files a change
        has just written, too fresh to remember, do not cost the next command a rewrite."""
        fresh, known = self.fresh, self.entries
        if self.path and not (fresh.items() <= known.items() and 8 * len(fresh) >= 7 * len(known)):
            save_cache(self.path, self.FORMAT, fresh)


class Listings(StatCache):
    """Each walked directory's entries (name, is a directory), by the directory's own identity:
    adding, removing or renaming an entry moves its mtime and ctime (disk.walk_files' `listings`)."""

    FORMAT = ("pk-listings", 1, sys.version_info[:2])

    def entries_of(self, path: str) -> list[tuple[str, bool]] | None:
        """As disk.list_entries, from this cache while the directory is unchanged."""
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        known = self.lookup(path, st)
        if known is not None:
            return known  # type: ignore[no-any-return]
        entries = list_entries(path)
        if entries is not None:
            self.remember(path, st, entries)
        return entries


def read_changed(directory: str, suffix: str, known: dict[str, Any]) -> ChangedFiles:
    """The files of a directory whose name ends with `suffix` that `known` (name -> the stat
    identity the caller remembers: statcache.identity, with the device) does not describe: their
    bytes and identity, taken before the read (None while the file is too fresh to be
    remembered: StatCache's racily-clean rule); and the known names that are gone. A file
    unchanged since the caller read it costs a stat, and none of its bytes."""
    limit = time.time_ns() - StatCache.GRANULARITY_NS
    files: dict[str, bytes] = {}
    identities: dict[str, Any] = {}
    present = set()
    try:
        listing = list(os.scandir(directory))
    except FileNotFoundError:
        listing = []
    refused: dict[str, str] = {}
    for item in listing:
        name = item.name
        if not name.endswith(suffix):
            continue
        try:
            st = item.stat()  # followed, as open() follows it
        except FileNotFoundError:  # removed since the listing (or a dangling symlink)
            continue
        except OSError as exc:  # a symlink loop
            refused[name] = "it cannot be read (%s)" % exc.strerror
            continue
        present.add(name)
        remembered = known.get(name)
        if remembered is not None and tuple(remembered) == identity(st):
            continue
        try:  # never waits on a FIFO or a device, nor reads one (a hostile state dir's)
            fd = open_regular(item.path)
        except NotRegular as exc:
            refused[name] = "it is %s" % exc.strerror
            continue
        except OSError as exc:  # a symlink loop, a file that cannot be opened
            refused[name] = "it cannot be read (%s)" % exc.strerror
            continue
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())  # the identity of what is read, taken before it is read
            why = untrusted(st)
            if why is None and st.st_size > MAX_STATE_FILE:
                why = "it holds %d bytes, over the %d MiB a state file may hold" % (
                    st.st_size,
                    MAX_STATE_FILE >> 20,
                )
            if why is not None:
                refused[name] = why
                continue
            files[name] = f.read(MAX_STATE_FILE + 1)
            if len(files[name]) > MAX_STATE_FILE:  # grew while it was read
                del files[name]
                refused[name] = "it grows while it is read"
                continue
        settled = st.st_mtime_ns < limit and st.st_ctime_ns < limit
        identities[name] = identity(st) if settled else None
    return ChangedFiles(files, identities, tuple(sorted(set(known) - present)), refused)
