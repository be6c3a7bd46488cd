"""Near-disk primitives shared by the agent's parts: hashing, atomic writes, walks, the stat cache.

Standard library only (blake3 when importable): these modules also run inside a remote host's
own interpreter, sent there by targets/remote_agent.py.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
import time

from .errors import AgentError

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing (with re) costs a command's start about 10 ms
    from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

    _T = TypeVar("_T")
    _R = TypeVar("_R")
    # digest_files' answer: the stat cache's hits as their keys and modes (their digests and identities are
    # the cache's own), and each file hashed as key, (digest, size, mode), (size, mtime_ns, ctime_ns, inode)
    Digests = tuple[tuple[list[str], list[int]], list[tuple[str, tuple[str, int, int], tuple[int, int, int, int]]]]

_blake3: Any
try:  # blake3 is patchkeeper's hash; a host without it falls back to sha256 (and says so).
    import blake3 as _blake3
except ImportError:  # an interpreter without blake3: a local target's agent hashes through the controller's
    from . import blake3pipe  # Python (blake3pipe.py; the hashes are blake3's); elsewhere, sha256

    _blake3 = blake3pipe.module()

ALGORITHM = "blake3" if _blake3 is not None else "sha256"
CHUNK = 1 << 20  # bytes a file is read by (feed)
_BIG = 4 << 20  # files above this size are hashed with blake3's own threads
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


def _hasher(size: int = 0, algorithm: str | None = None) -> Any:
    if size >= _BIG and not (_forked or _sharing) and (algorithm or ALGORITHM) == "blake3" and _blake3 is not None:
        return _blake3.blake3(max_threads=_blake3.blake3.AUTO)
    return _hash_type(algorithm)()


def _hash_type(algorithm: str | None = None) -> Callable[[], Any]:
    """The constructor of an `algorithm` hash object on the calling thread alone (AgentError where
    this Python has none)."""
    algorithm = algorithm or ALGORITHM
    if algorithm == "sha256":
        import hashlib

        return hashlib.sha256
    if algorithm != "blake3" or _blake3 is None:
        raise AgentError("no-algorithm", f"this Python cannot hash with {algorithm!r} (it has {ALGORITHM})")
    return _blake3.blake3  # type: ignore[no-any-return]


def algorithm_of(digest: str) -> str:
    """The algorithm a digest names: "blake3:<hex>" -> "blake3"."""
    return digest.partition(":")[0]


def hash_bytes(data: bytes, algorithm: str | None = None) -> str:
    h = _hasher(len(data), algorithm)
    h.update(data)
    return f"{algorithm or ALGORITHM}:{h.hexdigest()}"


def hash_file(path: str, size: int = 0, algorithm: str | None = None) -> str:
    """The digest of a file's bytes, read to its end (os.read: a third cheaper per small file than a
    buffered file object, and audits read thousands)."""
    h = _hasher(size, algorithm)
    feed(path, h)
    return f"{algorithm or ALGORITHM}:{h.hexdigest()}"


def feed(path: str, h: Any) -> None:
    """A file's bytes, to its end, into a hash object's update."""
    fd = os.open(path, os.O_RDONLY)
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
        return not (_SKIP_DIRS.intersection(parts) or rel.endswith(_SKIP_SUFFIXES)
                    or parts[-1].startswith(STAGE_PREFIX))
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


_cache_readers: list[Callable[[str], None]] = []


def reading_cache(path: str) -> None:
    """Say that the file at `path` is a cache: what is read from it is never trusted over the files
    it caches (keyed by their stat identity), so no answer depends on it. replay.py's recording
    listens here, to leave caches out of an answer's inputs; otherwise nothing does."""
    for reader in _cache_readers:
        reader(path)


def user_cache(name: str) -> str:
    """The path of `name` in this user's cache directory for patchkeeper ($XDG_CACHE_HOME or ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "patchkeeper", name)


def load_cache(path: str, stamp: Any) -> Any:
    """The body of a cache file written as marshal (stamp, body) with this `stamp` and a dict body, else
    None (absent, damaged, or another version's: a cache we cannot use only costs time)."""
    reading_cache(path)
    try:
        with open(path, "rb") as f:
            found, body = marshal.loads(f.read())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    return body if found == stamp and isinstance(body, dict) else None


def save_cache(path: str, stamp: Any, body: dict[Any, Any], mode: int = 0o644) -> None:
    """Write a cache file that load_cache(path, stamp) reads back, not durably: a cache lost in a
    power cut, or one that cannot be written at all, only costs time."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, marshal.dumps((stamp, body)), mode, durable=False)
    except (OSError, ValueError):  # ValueError: a value marshal cannot write
        pass


class StatCache:
    """Digest cache keyed by (size, mtime_ns, ctime_ns, inode), immune to racily clean files.

    An entry is only cached when the file's mtime and ctime are older than the scan's start by
    more than the file system's timestamp granularity; any later change then moves ctime forward,
    so a cached digest is never trusted for a file that could have changed within the same tick
    it was hashed in (git's "racily clean" problem).

    The file is marshal data stamped with its format and the Python version that wrote it (fast to
    load: a warm audit reads several); one in another format or of another Python is simply empty.
    """

    GRANULARITY_NS = 2_000_000_000
    FORMAT = ("pk-statcache", 2, sys.version_info[:2])

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.entries: dict[str, tuple[Any, ...]] = {}
        self.fresh: dict[str, tuple[Any, ...]] = {}
        self.started_ns = time.time_ns()
        if path:
            self.entries = load_cache(path, self.FORMAT) or {}  # absent, or not ours: start empty

    def lookup(self, rel: str, st: os.stat_result) -> Any:
        """The value remembered for `rel` (a digest, or a verdict) while its identity is unchanged."""
        hit = self.entries.get(rel)
        if hit is not None and hit[:4] == (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino):
            self.fresh[rel] = hit
            return hit[4]
        return None

    def remember(self, rel: str, st: os.stat_result, digest: Any) -> None:
        newest = max(st.st_mtime_ns, st.st_ctime_ns)
        if newest + self.GRANULARITY_NS < self.started_ns:
            self.fresh[rel] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, digest)

    def take(self, done: Digests, out: dict[str, Any]) -> None:
        """Each digested file's row (digest_files) into `out`, and what may be remembered into the
        cache (the racily-clean rule): merge(taken(done), out)."""
        self.merge(self.taken(done), out)

    def merge(self, taken: tuple[tuple[list[str], list[int]], dict[str, Any], dict[str, tuple[Any, ...]]],
              out: dict[str, Any]) -> None:
        """What taken gave (here or in a forked process) into `out` and the cache: the hits' rows
        from this cache's entries (remember for many files, inlined), the hashed files' as they are."""
        known, fresh = self.entries, self.fresh
        (keys, modes), rows, remembered = taken
        for key, mode in zip(keys, modes):
            hit = fresh[key] = known[key]
            out[key] = (hit[4], hit[0], mode)
        out.update(rows)
        fresh.update(remembered)

    def taken(self, done: Digests) -> tuple[tuple[list[str], list[int]], dict[str, Any], dict[str, tuple[Any, ...]]]:
        """take's work on the files hashed, done apart (computed only: a forked process may do it,
        for this one to merge): the hits as they were (their rows come from this cache's entries,
        which take reads), each hashed file's row, and what may be remembered of them."""
        hits, hashed = done
        rows: dict[str, Any] = {}
        fresh: dict[str, tuple[Any, ...]] = {}
        limit = self.started_ns - self.GRANULARITY_NS
        for key, row, identity in hashed:
            rows[key] = row
            if identity[1] < limit and identity[2] < limit:
                fresh[key] = (*identity, row[0])
        return hits, rows, fresh

    def save(self) -> None:
        """Write the entries this run used or made, when it made any, or when an eighth of the
        known ones were not used (stale: their files changed, went, or were not asked for). A stale
        entry kept meanwhile is never believed: its file's identity moved (a change moves ctime
        forward). So the few files a change has just written, too fresh to remember, do not cost
        the next command a rewrite of the whole cache."""
        fresh, known = self.fresh, self.entries
        if self.path and not (fresh.items() <= known.items() and 8 * len(fresh) >= 7 * len(known)):
            save_cache(self.path, self.FORMAT, fresh)


def walk_files(root: str, rel_dir: str, pycs: list[tuple[str, bool]] | None = None,
               listings: StatCache | None = None, skip: set[str] | None = None,
               met: list[str] | None = None) -> Iterator[str]:
    """Relative paths of the managed files below root/rel_dir, directory by directory.

    Given `pycs`, the same walk also appends every bytecode file it passes as (relative path, in a
    __pycache__ directory), so that the bytecode check need not walk these directories again.
    Given `listings`, a directory's entries are remembered by its own stat identity (see listing).
    Directories in `skip` (relative paths) are not entered; each one met as a directory is
    appended to `met` (another walk covers it: see treecheck.py)."""
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
                    if skip is not None and prefix + name in skip:
                        met.append(prefix + name)  # type: ignore[union-attr]
                    else:
                        stack.append((prefix + name, False))
                elif collect:
                    stack.append((prefix + name, True))
            elif not cached and not (name.endswith(_SKIP_SUFFIXES) or name.startswith(STAGE_PREFIX)
                                     or (name in INSTALL_RECORDS and is_install_record(prefix + name))):
                yield prefix + name
            elif collect and name.endswith(".pyc"):
                pycs.append((prefix + name, in_cache))  # type: ignore[union-attr]


def digest_files(jobs: Sequence[tuple[str, str]], known: dict[str, tuple[Any, ...]], algorithm: str,
                 stats: dict[str, os.stat_result], pure: bool = False) -> Digests:
    """Each job (key, path) that is a regular file, digested: from the stat cache's `known` entry
    while its identity is unchanged, else hashed (map_files; `pure`: may fork). `stats` gets each
    file's stat. A hit comes back as its key and mode alone (StatCache.take makes its row from the
    cache's entry), so a forked process's answer for thousands of files is a few lists. Plain data
    only: it may run in a forked process."""
    keys: list[str] = []
    modes: list[int] = []
    todo: list[tuple[str, str, os.stat_result]] = []
    lstat, is_reg, imode, get, prefix = os.lstat, stat.S_ISREG, stat.S_IMODE, known.get, algorithm + ":"
    # beside a forked process, or in one, map_files would hash every file here, in order, one hash
    # object each: then each is hashed as soon as it is met (hash_file and feed, inlined: a cold
    # audit hashes thousands of small files, where the calls between cost about a sixth of the work)
    hashed: list[tuple[str, tuple[str, int, int], tuple[int, int, int, int]]] | None = \
        [] if _forked or _sharing else None
    new: Callable[[], Any] | None = None
    read, close = os.read, os.close
    for key, path in jobs:  # the hot loop of every warm command: StatCache.lookup, inlined, field by field
        try:
            st = lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            continue
        mode = st.st_mode
        if not is_reg(mode):
            continue
        stats[key] = st
        hit = get(key)
        if (hit is not None and hit[2] == st.st_ctime_ns and hit[1] == st.st_mtime_ns and hit[0] == st.st_size
                and hit[3] == st.st_ino and hit[4].startswith(prefix)):
            keys.append(key)
            modes.append(imode(mode))
        elif hashed is not None:
            if new is None:
                new = _hash_type(algorithm)
            h = new()
            fd = os.open(path, os.O_RDONLY)
            try:
                chunk = read(fd, CHUNK)
                while chunk:
                    h.update(chunk)
                    chunk = read(fd, CHUNK)
            finally:
                close(fd)
            size = st.st_size
            hashed.append((key, (prefix + h.hexdigest(), size, imode(mode)),
                           (size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)))
        else:
            todo.append((key, path, st))
    if hashed is not None:
        return (keys, modes), hashed

    def work(job: tuple[str, str, os.stat_result]) -> tuple[str, int, int]:
        return entry_row(job[2], hash_file(job[1], job[2].st_size, algorithm))

    rows = map_files(work, todo, lambda job: job[2].st_size, HASH_WORKERS, pure=pure)
    return (keys, modes), [(key, row, (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
                           for (key, _, st), row in zip(todo, rows)]


def joined(parts: Iterable[Digests]) -> Digests:
    """digest_files' answers for parts of a list of jobs, as one."""
    keys: list[str] = []
    modes: list[int] = []
    hashed: list[Any] = []
    for (k, m), h in parts:
        keys += k
        modes += m
        hashed += h
    return (keys, modes), hashed


def listing(path: str, listings: StatCache | None = None) -> list[tuple[str, bool]] | None:
    """(name, is a directory) of each entry of a directory, None when it is not one (or is gone).

    With `listings`, one lstat of the directory stands for the listing while the directory's
    identity is unchanged: adding, removing or renaming an entry moves its mtime and ctime, and,
    as for files, a listing is never remembered within the clock's granularity of a change."""
    if listings is not None:
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        known = listings.lookup(path, st)
        if known is not None:
            return known  # type: ignore[no-any-return]
    try:
        with os.scandir(path) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    except (FileNotFoundError, NotADirectoryError):
        return None
    if listings is not None:
        listings.remember(path, st, entries)
    return entries


def entry_row(st: os.stat_result, digest: str) -> tuple[str, int, int]:
    return digest, st.st_size, stat.S_IMODE(st.st_mode)


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
SPLIT_AT = 2048  # from this many small jobs on, a forked second process takes half of them (fork_half)
_split = True  # off in a process that is itself one of a pool's (no_split), or a forked child (fork_call)
_sharing = False  # running units beside a forked process (share_units): both CPUs are busy, so no
# thread is started either (on a third thread, or blake3's, a file is hashed no sooner, only contended for)
_exiting: list[int] = []  # children of fork_call whose whole answer came while they were still exiting
_forked = False  # in a child of fork_call: blake3's own thread pool (native threads, which a fork does not
# copy, and whose locks it may copy held) is not used there: its hashing stays on the calling thread


def map_files(fn: Callable[[_T], _R], jobs: Sequence[_T], size: Callable[[_T], int], workers: int,
              pure: bool = False) -> list[_R]:
    """[fn(job) for job in jobs], in order, where each job reads one file of size(job) bytes.

    Files under BIG_FILE are done in this thread: hashing a small file is mostly interpreter work
    under the GIL, and on threads it cost twice the CPU and more wall time (a first baseline of
    sglang's 5,771 files on 2 cores: 4.0 s of CPU on 4 threads, 2.0 s in one). Larger files go to up
    to `workers` threads, where hashing releases the GIL for long stretches. With `pure` (fn only
    computes, and returns marshal-able data), a forked second process takes half of many small
    files (fork_half)."""
    big = [i for i, job in enumerate(jobs) if size(job) >= BIG_FILE]
    if len(big) < 2 or _forked or _sharing:  # a forked child (fork_call) starts no thread either
        big = []
    threaded = set(big)
    small = [job for i, job in enumerate(jobs) if i not in threaded]
    results: list[Any] = [None] * len(jobs)
    done: Callable[[], list[_R]] | None = None

    def start() -> None:  # the big files' threads: only once no fork is to come
        nonlocal done
        done = start_threads(fn, [jobs[i] for i in big], workers) if big else None

    if pure:
        out = [r for part in split_work(lambda part: [fn(job) for job in part], small, start) for r in part]
    else:
        start()
        out = [fn(job) for job in small]
    for i, result in zip((i for i in range(len(jobs)) if i not in threaded), out):
        results[i] = result
    if done is not None:
        for i, result in zip(big, done()):
            results[i] = result
    return results


def split_work(fn: Callable[[Sequence[_T]], _R], items: Sequence[_T],
               then: Callable[[], Any] | None = None) -> list[_R]:
    """[fn(items)], or [fn(first half), fn(second half)] with the second half computed in a forked
    process where fork_half allows it; `then` runs once the child is forked and before this half
    (threads may be started there: none may run when a process forks)."""
    forked = fork_half(fn, items)
    if then is not None:
        then()
    return [fn(items)] if forked is None else _with_child(fn, items, forked)


def _with_child(fn: Callable[[Sequence[_T]], _R], items: Sequence[_T],
                forked: tuple[int, Callable[..., _R]]) -> list[_R]:
    """[fn(the first part), the forked child's answer for the rest] (fork_half's `forked`); the
    child is ended when this part fails."""
    half, theirs = forked
    try:
        mine = fn(items[:half])
    except BaseException:
        theirs(abandon=True)
        raise
    return [mine, theirs()]


IDLE_CHUNK = 256  # split_when_idle's items done between two looks for an idle CPU (busy: about 20 µs a look)


def split_when_idle(fn: Callable[[Sequence[_T]], _R], items: Sequence[_T],
                    weigh: Callable[[Sequence[_T]], int] | None = None) -> list[_R]:
    """fn over consecutive parts of `items`, in order, as split_work, but split as soon as a CPU is
    idle rather than only if one is at the start: while every CPU is taken (busy) items are done
    here IDLE_CHUNK at a time, and what is left once one is idle (at least SPLIT_AT items) is split with
    a forked process (fork_half; `weigh` gives where to cut it). So work begun beside another
    process (a rollback's scan beside the environment fingerprint's process, or that process beside
    the planning) takes the CPU the other leaves when it ends, or waits for this one."""
    done: list[_R] = []
    start = 0
    while _split and len(items) - start >= SPLIT_AT:
        if busy():
            done.append(fn(items[start:start + IDLE_CHUNK]))
            start += IDLE_CHUNK
            continue
        rest = items[start:]
        forked = fork_half(fn, rest, weigh(rest) if weigh is not None else None)
        if forked is None:  # no second process here after all (see fork_call)
            break
        return done + _with_child(fn, rest, forked)
    return [*done, fn(items[start:])]


def fork_half(fn: Callable[[Sequence[_T]], _R], items: Sequence[_T],
              half: int | None = None) -> tuple[int, Callable[..., _R]] | None:
    """Start fn(items[half:]) in a forked process (`half`: the middle unless given), as git's
    preloaded index splits its lstat calls over threads (here threads would wait on each other: the
    work is mostly interpreter work).

    Only where it can help and is safe (see fork_call), and for at least SPLIT_AT items. Returns
    (half, the function that waits for the child and gives its result, computed here instead if the
    child failed; called with abandon=True when the caller fails, it only ends the child), or None:
    then the caller does all of it. Not while every CPU is taken (busy): a second process then
    only adds its fork's cost (about 10 ms of CPU for sglang's 13,000 lstat calls), as when many
    audits of one host run at once, or while the environment fingerprint's forked process works."""
    if len(items) < SPLIT_AT or not _split or busy():
        return None
    half = len(items) // 2 if half is None else half
    finish = fork_call(lambda: fn(items[half:]))
    return None if finish is None else (half, finish)


def busy(loadavg: str = "/proc/loadavg") -> bool:
    """Whether this host has no idle CPU now: as many runnable tasks (this one among them; the
    fourth field of Linux's loadavg) as CPUs this process may use. False where it cannot be told."""
    try:
        with open(loadavg, "rb") as f:
            running = int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return False
    return running >= cpus()


def fork_call(fn: Callable[[], _R]) -> Callable[..., _R] | None:
    """Start fn() in a forked process while the caller goes on.

    Only where it can help and is safe: two CPUs, and no other thread in this process (a fork
    copies only the calling one, and whatever locks the others hold). fn must only compute (what
    the child changes is lost; files it writes stay) and return marshal-able data; in the child no
    further fork is made (it is already one of two), and blake3 hashes on the calling thread (see
    _forked). Returns the function that gives the child's result (computed here instead if the child
    failed, so its error, if any, is raised here; called with abandon=True when the caller fails, it
    only ends the child and waits for it), or None: then the caller does the work itself. A child
    whose whole result was read while it was still exiting is waited for by the next fork_call."""
    global _split, _forked
    while _exiting:  # the children that were exiting when their answer was read
        try:
            os.waitpid(_exiting.pop(), 0)
        except ChildProcessError:  # waited for by someone else
            pass
    if not _split or cpus() < 2 or not hasattr(os, "fork") or not alone():
        return None
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid == 0:  # the child: its result down the pipe, then out with none of the parent's cleanup
        code = 1
        try:
            _split = False
            _forked = True
            os.close(r)
            view = memoryview(marshal.dumps(fn()))  # type: ignore[arg-type]
            while view:
                view = view[os.write(w, view):]
            os.close(w)  # the end, now: not once this process's memory is taken down
            code = 0
        finally:
            os._exit(code)
    os.close(w)

    def finish(abandon: bool = False) -> _R:
        chunks = []
        try:
            chunk = b"" if abandon else os.read(r, 1 << 20)
            while chunk:
                chunks.append(chunk)
                chunk = os.read(r, 1 << 20)
        finally:
            os.close(r)  # an abandoned child's next write fails, and it exits
        if not abandon:
            try:
                result = marshal.loads(b"".join(chunks))
            except (ValueError, EOFError, TypeError):
                pass
            else:  # whole: the child wrote it all and closed its end, so it is only exiting now
                if os.waitpid(pid, os.WNOHANG)[0] == 0:  # its memory still being taken down: not
                    _exiting.append(pid)  # waited for here, but by the next fork_call
                return result  # type: ignore[no-any-return]
        os.waitpid(pid, 0)
        if abandon:
            return None  # type: ignore[return-value]
        return fn()  # the child failed: its error, if any, is raised here as it would have been

    return finish


def share_units(run: Callable[[int], _R], count: int,
                state: Callable[[], Any] | None = None) -> tuple[dict[int, _R], Any]:
    """{i: run(i)} for the units 0..count-1, shared by this process and, where fork_call allows, a
    forked second one: each claims the next unit still unclaimed from a pipe holding all their
    numbers (a read of one two-byte number is atomic), so the two end together however unequal the
    units are. Units go in order: put the biggest first. The forked process gives back each unit's
    result as soon as it is done, down a pipe of their own (_Sent): this one reads what has come in
    between its own units, so that once both end only the last few are left to read (a cold audit's
    thousands of digests were read in one piece, with this process idle meanwhile). It also gives
    back `state()` (what its units left in its memory, as plain data; None when no process was
    forked, and this process's own when the forked one failed); a unit it claimed and did not give
    back is run here, so its error, if any, is raised here. run must only compute (and may write
    files) and return marshal-able data; meanwhile no further fork_half is made here, nor a thread
    started to hash (the forked process already keeps the other CPU busy)."""
    if count > 30_000:  # two bytes each: the pipe's 64 KiB must take them all before the fork
        return {i: run(i) for i in range(count)}, None
    r, w = os.pipe()
    try:
        os.write(w, b"".join(i.to_bytes(2, "little") for i in range(count)))
    finally:
        os.close(w)  # once all are claimed, a read gives b"": the end

    def claimed() -> Iterator[int]:
        token = os.read(r, 2)
        while token:
            yield int.from_bytes(token, "little")
            token = os.read(r, 2)

    results_r, results_w = os.pipe()
    here = os.getpid()

    def forked() -> Any:
        if os.getpid() == here:  # fork_call computing it here: the forked process failed, no unit is left
            return state() if state else None
        os.close(results_r)
        send = _Sent(results_w)
        for i in claimed():
            send(marshal.dumps((i, run(i))))  # type: ignore[arg-type]
        send.close()
        return state() if state else None

    results: _Received | None = None
    try:
        global _sharing
        theirs = fork_call(forked)
        os.close(results_w)
        if theirs is not None:
            results = _Received(results_r)
        was, _sharing = allow_split(False), theirs is not None
        try:
            done = {}
            for i in claimed():
                done[i] = run(i)
                if results is not None:
                    results.take()
        except BaseException:
            if theirs is not None:
                while os.read(r, 1 << 16):  # the units left claimed here: the forked process ends soon
                    pass
                results.close()  # type: ignore[union-attr]  # its next result cannot be given: it ends
                theirs(abandon=True)
            raise
        finally:
            allow_split(was)
            _sharing = False
        kept = None
        if theirs is not None:
            done.update(results.take(to_the_end=True))  # type: ignore[union-attr]
            kept = theirs()  # this process's own state if the child failed
        for i in range(count):
            if i not in done:  # claimed by a child that failed
                done[i] = run(i)
        return done, kept
    finally:
        os.close(r)
        if results is not None:
            results.close()
        else:
            os.close(results_r)


class _Sent:
    """The forked process's end of share_units' results: each one framed (its length, then its
    marshal data) and written as far as the pipe takes it without waiting, the rest kept here and
    written with the next one (the other process reads between its own units, which may be long);
    close writes what is left, waiting for the reader, and ends the stream."""

    def __init__(self, fd: int) -> None:
        self.fd, self.pending = fd, bytearray()
        os.set_blocking(fd, False)

    def __call__(self, data: bytes) -> None:
        self.pending += len(data).to_bytes(4, "little")
        self.pending += data
        try:
            while self.pending:
                del self.pending[:os.write(self.fd, self.pending)]
        except BlockingIOError:  # the pipe is full: the rest goes with the next result
            pass

    def close(self) -> None:
        os.set_blocking(self.fd, True)
        view = memoryview(self.pending)
        while view:
            view = view[os.write(self.fd, view):]
        view.release()
        os.close(self.fd)


class _Received:
    """This process's end of share_units' results (see _Sent): the units whose results have come
    in whole, by number; a result cut off by the forked process's end is not one."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd
        self.got: dict[int, Any] = {}
        self.buffer = bytearray()
        os.set_blocking(fd, False)

    def take(self, to_the_end: bool = False) -> dict[int, Any]:
        """Read what has come (with to_the_end, until the forked process closes its end or ends)."""
        if self.fd is None:
            return self.got
        if to_the_end:
            os.set_blocking(self.fd, True)
        buffer = self.buffer
        while True:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:  # nothing more for now
                break
            if not chunk:
                break
            buffer += chunk
            at = 0
            while len(buffer) - at >= 4:
                size = int.from_bytes(buffer[at:at + 4], "little")
                if len(buffer) - at - 4 < size:
                    break
                i, result = marshal.loads(buffer[at + 4:at + 4 + size])
                self.got[i] = result
                at += 4 + size
            del buffer[:at]
        return self.got

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def no_split() -> None:
    """No fork_half in this process: it is one of a pool's workers, which already keep the CPUs busy."""
    allow_split(False)


def allow_split(allowed: bool) -> bool:
    """Allow fork_half in this process, or not (replay.py's recording: a child's reads are out of
    its sight); returns whether it was allowed."""
    global _split
    was, _split = _split, allowed
    return was


def alone() -> bool:
    """No other thread runs in this process (threading never imported: none was started from Python)."""
    threading = sys.modules.get("threading")
    return threading is None or threading.active_count() == 1


def map_threads(fn: Callable[[_T], _R], items: Sequence[_T], workers: int) -> list[_R]:
    """[fn(item) for item in items] on up to `workers` threads, in order; the first error is raised."""
    return start_threads(fn, items, workers)()


def start_threads(fn: Callable[[_T], _R], items: Sequence[_T], workers: int) -> Callable[[], list[_R]]:
    """map_threads, started: the threads run while the caller goes on; the function returned joins
    them and gives the results (or raises the first error).

    Plain threading: concurrent.futures would cost its import (logging with it) on every command."""
    import threading

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
    return stat_line[stat_line.rfind(b")") + 2:][:1] not in (b"Z", b"X")  # field 3, after "(comm)"


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
        pid = name[len(prefix):].split("-", 1)[0].split(".", 1)[0]
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
    import re

    return re.sub(r"[-_.]+", "-", name).lower()
