"""Near-disk primitives shared by the agent's parts: hashing, atomic writes, walks.

Standard library only (blake3 when importable): these modules also run inside a remote host's
own interpreter, sent there by targets/remote_agent.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import sys
import threading
import time

from . import progress
from .errors import AgentError

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing (with re) costs a command's start about 10 ms
    from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence, TypeVar

    class Listings(Protocol):  # statcache.Listings: a directory's entries while it is unchanged
        def entries_of(self, path: str) -> list[tuple[str, bool]] | None: ...

    _T = TypeVar("_T")
    _R = TypeVar("_R")

_blake3: Any
try:  # blake3 is patchkeeper's hash; a host without it falls back to sha256 (and says so).
    import blake3 as _blake3
except ImportError:  # an interpreter without blake3: a local target's agent hashes through the controller's
    from . import blake3pipe  # Python (blake3pipe.py; the hashes are blake3's); elsewhere, sha256

    _blake3 = blake3pipe.module()

ALGORITHM = "blake3" if _blake3 is not None else "sha256"
CHUNK = 1 << 20  # bytes a file is read by (feed)
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo")
STAGE_PREFIX = ".pk-stage-"
# What an installer writes in a dist-info about this installation rather than the package: RECORD
# (whose rows hash the console scripts, whose shebangs name the venv's path), direct_url.json
# (where the wheel was), INSTALLER (pip, uv), REQUESTED, and uv's uv_cache.json. They differ between
# two installs of one wheel (by pip or by uv), so they are no part of a code state; `audit` checks
# the installation against RECORD instead, and each state's ledger entry records who installed it.
INSTALL_RECORDS = ("RECORD", "direct_url.json", "INSTALLER", "REQUESTED", "uv_cache.json")
TEMP_PREFIX = ".pk-tmp-"  # write_atomic's temporary files: .pk-tmp-<pid>-<ns>


def _hash_type(algorithm: str | None = None) -> Callable[[], Any]:
    """The constructor of an `algorithm` hash object on the calling thread alone (AgentError where
    this Python has none)."""
    algorithm = algorithm or ALGORITHM
    if algorithm == "sha256":
        return hashlib.sha256
    if algorithm != "blake3" or _blake3 is None:
        raise AgentError("no-algorithm", f"this Python cannot hash with {algorithm!r} (it has {ALGORITHM})")
    return _blake3.blake3  # type: ignore[no-any-return]


def algorithm_of(digest: str) -> str:
    """The algorithm a digest names: "blake3:<hex>" -> "blake3"."""
    return digest.partition(":")[0]


def hash_bytes(data: bytes, algorithm: str | None = None) -> str:
    h = _hash_type(algorithm)()
    h.update(data)
    return f"{algorithm or ALGORITHM}:{h.hexdigest()}"


def hash_file(path: str, algorithm: str | None = None) -> str:
    """The digest of a file's bytes, read to its end (os.read: a third cheaper per small file than a
    buffered file object, and audits read thousands)."""
    h = _hash_type(algorithm)()
    feed(path, h)
    return f"{algorithm or ALGORITHM}:{h.hexdigest()}"


class NotRegular(OSError):
    """A path to be read that is not a regular file (a FIFO, a device, a socket, a directory)."""


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def open_regular(path: str) -> int:
    """A descriptor of `path` open for reading, refused (NotRegular) unless it is a regular file: a
    FIFO or a device is never read, since its read may wait for ever (opened without blocking, and
    checked before the first read)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a file")
            raise NotRegular(22, f"not a regular file ({kind}): not read", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def feed(path: str, h: Any) -> None:
    """A regular file's bytes (open_regular), to its end, into a hash object's update."""
    fd = open_regular(path)
    try:
        chunk = os.read(fd, CHUNK)
        while chunk:
            h.update(chunk)
            chunk = os.read(fd, CHUNK)
    finally:
        os.close(fd)


def is_install_record(rel: str) -> bool:
    """`<name>.dist-info/RECORD` and the like: see INSTALL_RECORDS."""
    head, _, name = rel.rpartition("/")
    return name in INSTALL_RECORDS and head.endswith(".dist-info") and "/" not in head


def install_records(keys: Iterable[str]) -> list[str]:
    """The keys that are install records (is_install_record): none, found by one search of the
    keys' text, in every manifest recorded since they were left out."""
    keys = list(keys)
    joined = "\n".join(keys)
    if not any(f".dist-info/{name}" in joined for name in INSTALL_RECORDS):
        return []
    return [k for k in keys if k.endswith(INSTALL_RECORDS) and is_install_record(k)]


def is_managed_name(rel: str) -> bool:
    """Bytecode caches are derived from sources and never part of a code state; nor are install records."""
    if is_install_record(rel):
        return False
    if rel.endswith(_SKIP_SUFFIXES) or "__pycache__" in rel or STAGE_PREFIX in rel:
        parts = rel.split("/")
        return not (
            _SKIP_DIRS.intersection(parts)
            or rel.endswith(_SKIP_SUFFIXES)
            or parts[-1].startswith(STAGE_PREFIX)
        )
    return True


def fsync_dir(path: str) -> None:
    fsync_path(path, os.O_DIRECTORY)


def fsync_path(path: str, flags: int = 0) -> None:
    """fsync a file (or, with O_DIRECTORY, a directory) by its path."""
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, mode: int = 0o644, durable: bool = True) -> None:
    """Write a new file at `path` by temp file, fsync, rename, fsync of the directory.

    The destination inode is replaced, never written into, so a file hardlinked elsewhere
    (a uv cache, a test's pristine copy) keeps its bytes. `durable=False` skips the fsyncs, for
    caches whose loss after a power cut only costs time.
    """
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f"{TEMP_PREFIX}{os.getpid()}-{time.monotonic_ns()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(mode))
        os.replace(tmp, path)
    except BaseException:
        discard(tmp)
        raise
    if durable:
        fsync_dir(directory)


def discard(path: str) -> None:
    """Remove a temporary file of ours if it is there (the cleanup of a write that failed)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def walk_files(
    root: str, rel_dir: str, pycs: list[tuple[str, bool]] | None = None, listings: Listings | None = None
) -> Iterator[str]:
    """Relative paths of the managed files below root/rel_dir, directory by directory.

    Given `pycs`, the same walk also appends every bytecode file it passes as (relative path, in a
    __pycache__ directory), so that the bytecode check need not walk these directories again.
    Given `listings`, a directory's entries are remembered by its own stat identity (see listing)."""
    collect = pycs is not None and not rel_dir.endswith(".dist-info")
    stack = [(rel_dir, False)]  # (directory, inside a bytecode cache: nothing there is managed)
    while stack:
        current, cached = stack.pop()
        entries = listing(os.path.join(root, current) if current else root, listings)
        if entries is None:
            continue
        prefix = current + "/" if current else ""
        in_cache = current.rpartition("/")[2] == "__pycache__"
        for name, is_dir in entries:
            if is_dir:
                if name not in _SKIP_DIRS and not cached:
                    stack.append((prefix + name, False))
                elif collect:
                    stack.append((prefix + name, True))
            elif not cached and not (
                name.endswith(_SKIP_SUFFIXES)
                or name.startswith(STAGE_PREFIX)
                or (name in INSTALL_RECORDS and is_install_record(prefix + name))
            ):
                yield prefix + name
            elif collect and name.endswith(".pyc"):
                pycs.append((prefix + name, in_cache))  # type: ignore[union-attr]


def listing(path: str, listings: Listings | None = None) -> list[tuple[str, bool]] | None:
    """(name, is a directory) of each entry of a directory, None when it is not one (or is gone);
    with `listings`, from that cache while the directory is unchanged (statcache.Listings)."""
    return list_entries(path) if listings is None else listings.entries_of(path)


def list_entries(path: str) -> list[tuple[str, bool]] | None:
    """listing, read from the directory itself."""
    try:
        with os.scandir(path) as it:
            return [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    except (FileNotFoundError, NotADirectoryError):
        return None


def hostname() -> str:
    return os.uname().nodename  # what gethostname(2) answers, without loading the socket module


def cpus() -> int:
    """The CPUs this process may run on (its affinity: in a container, fewer than the host has)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no sched_getaffinity on this platform
        return os.cpu_count() or 1


BIG_FILE = 1 << 20
HASH_WORKERS = min(8, cpus() * 2)  # threads for big files to hash (map_files)


def map_files(
    fn: Callable[[_T], _R], jobs: Sequence[_T], size: Callable[[_T], int], workers: int = HASH_WORKERS
) -> list[_R]:
    """[fn(job) for job in jobs], in order, where each job reads one file of size(job) bytes.

    Files under BIG_FILE are done in this thread: hashing a small file is mostly interpreter work
    under the GIL, and on threads it cost twice the CPU and more wall time (a first baseline of
    sglang's 5,771 files on 2 cores: 4.0 s of CPU on 4 threads, 2.0 s in one). Larger files go to up
    to `workers` threads, where hashing releases the GIL for long stretches. Each file done is
    counted in `progress` (what a heartbeat carries)."""
    progress.expect(len(jobs))

    def counted(job: _T) -> _R:
        result = fn(job)
        progress.step()
        return result

    big = [i for i, job in enumerate(jobs) if size(job) >= BIG_FILE]
    if len(big) < 2:
        return [counted(job) for job in jobs]
    with _quick_handoff:
        done = start_threads(counted, [jobs[i] for i in big], workers)
        threaded = set(big)
        results: list[Any] = [None if i in threaded else counted(job) for i, job in enumerate(jobs)]
        for i, result in zip(big, done()):
            results[i] = result
    return results


HANDOFF_S = 0.0005  # the interpreter's switch interval while big files hash beside small ones (map_files)


class _QuickHandoff:
    """A short switch interval while threads hash big files beside this one's small files: a hashing
    thread asks for the GIL back after every chunk it read or hashed, and this thread, busy with the
    interpreter's work on small files, would keep it for the whole default interval (5 ms) each time.
    The first audit of the serving venv (269 files of 8.6 GB beside 75,000 small ones), six turns on
    2 cores: 6.62-7.16 s (median 6.88) with 5 ms, 6.30-7.05 s (median 6.37) with 0.5 ms; as short an
    interval for the whole audit gained nothing more. Process-wide, so one object counts the calls
    inside it: the last to leave puts back the interval that was there before the first came in."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._before = 0.0

    def __enter__(self) -> None:
        with self._lock:
            if not self._inside:
                self._before = sys.getswitchinterval()
                sys.setswitchinterval(min(HANDOFF_S, self._before))
            self._inside += 1

    def __exit__(self, *_: object) -> None:
        with self._lock:
            self._inside -= 1
            if not self._inside:
                sys.setswitchinterval(self._before)


_quick_handoff = _QuickHandoff()


def map_threads(fn: Callable[[_T], _R], items: Sequence[_T], workers: int) -> list[_R]:
    """[fn(item) for item in items] on up to `workers` threads, in order; the first error is raised."""
    return start_threads(fn, items, workers)()


def start_threads(fn: Callable[[_T], _R], items: Sequence[_T], workers: int) -> Callable[[], list[_R]]:
    """map_threads, started: the threads run while the caller goes on; the function returned joins
    them and gives the results (or raises the first error).

    Plain threading: concurrent.futures would cost its import (logging with it, about 10 ms) on
    every command that writes or hashes a big file."""

    results: list[Any] = [None] * len(items)
    errors: list[BaseException] = []
    indices = iter(range(len(items)))
    lock = threading.Lock()

    def worker() -> None:
        while not errors:
            with lock:
                i = next(indices, None)
            if i is None:
                return
            try:
                results[i] = fn(items[i])
            except BaseException as exc:  # handed to the caller's thread
                errors.append(exc)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(workers, len(items))))]
    for t in threads:
        t.start()

    def join() -> list[_R]:
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results

    return join


def pid_alive(pid: int) -> bool:
    """Whether process `pid` of this host still runs; a zombie (dead, not yet reaped) does not."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError, OverflowError):
        return True
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            stat_line = f.read()
    except OSError:  # no /proc (not Linux), or it went away just now
        return True
    return stat_line[stat_line.rfind(b")") + 2 :][:1] not in (b"Z", b"X")  # field 3, after "(comm)"


def remove_stale_temps(directory: str, prefixes: tuple[str, ...]) -> list[tuple[str, int]]:
    """Remove temporary files `<prefix><pid>-...` in `directory` whose writer (`pid`) is dead;
    return (path, size) of each. Call it under the target's lock."""
    removed: list[tuple[str, int]] = []
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for name in names:
        prefix = next((p for p in prefixes if name.startswith(p)), None)
        if prefix is None:
            continue
        pid = name[len(prefix) :].split("-", 1)[0].split(".", 1)[0]
        if not pid.isdigit() or (int(pid) == os.getpid() or pid_alive(int(pid))):
            continue
        path = os.path.join(directory, name)
        try:
            size = os.lstat(path).st_size
            os.unlink(path)
        except FileNotFoundError:
            continue
        removed.append((path, size))
    return removed


def normalize_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
