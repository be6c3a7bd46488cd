"""A plain audit's answer, kept whole and given again while nothing it read has changed.

A warm `audit` of an unchanged target spends most of its time starting: the interpreter, our
modules, the workspace, the ledger. Its answer is a function of what it read, so the run that
computes it also records every input, by construction rather than by a list kept by hand:

- every path the process opens, lists, stats, lstats or reads as a link (Python's audit hooks
  report each open and listing, from whatever module and however the function was bound;
  `os.stat`, `os.lstat`, `os.access` and `os.readlink` are wrapped, as our code looks them up at
  each call), every entry of each listed directory (a listing's DirEntry answers its stat without
  a call), and the files of every loaded module (our own code among them);
- every environment variable read (os.environ is a recording mapping while the run lasts);
- the command line, working directory, user, interpreter, its flags, and whether stdout and
  stderr are TTYs.

The next identical command lstats those paths (a symlink is also followed) and compares their
identities (size, mtime_ns, ctime_ns, inode: seal.py's) and the variables' values; when all are as
they were, it prints the recorded output and exits with the recorded code. Anything else runs the
audit in full, as before. (`audit --all` keeps each local target's report the same way.)

Caches are no inputs: a cache is never trusted over the files it caches (keyed by their stat
identity, which is an input), and the code that reads one says so (disk.reading_cache). What the
run writes can only be its caches (audit is a reading verb); a run that wrote any is not kept, and
the next one, which finds them, is. Nothing is kept when the run could have read what this
process cannot see: it started a process, forked, opened a socket (a target behind SSH, an
interpreter of another version) or listed a directory by descriptor; when it wrote to stderr (a
warning, a recovery, a note) or around stdout's text; when it ended in an error; or when any
input changed within the file system's timestamp granularity of the run's start (the
racily-clean rule), since a change made while it ran must show next time. A kept answer that
cannot be used only costs time.
"""

from __future__ import annotations

import marshal
import os
import sys
import time
import zlib
from _thread import get_ident

FORMAT = ("pk-replay", 3)
KEEP = 64  # kept answers per user (one per command line, directory and target): about 0.3 MB each for sglang
_ALL = "\0all"  # the whole environment was read (iterated or copied)
_WRITES = ("w", "a", "x", "+")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_TAINTS = ("subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.system", "os.spawn",
           "socket.connect", "socket.sendto", "socket.bind")
_CHANGES = ("os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.link", "os.symlink", "os.truncate",
            "os.chmod", "os.chown", "os.utime")

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs the replay ~10 ms)
    from typing import Any, Callable, Iterator, Optional


def key(argv: list[str]) -> tuple:
    """What, besides the inputs, the command's answer depends on."""
    return (FORMAT, tuple(argv), os.getcwd(), os.geteuid(), sys.executable, sys.version, tuple(sys.flags),
            os.isatty(1), os.isatty(2), getattr(sys.stdout, "encoding", None))


def path_of(k: tuple) -> str:
    from .host.disk import user_cache

    # named by the key's repr: its marshal form is not canonical (shared objects are written as references)
    return user_cache(os.path.join("replay", "%08x" % zlib.crc32(repr(k).encode())))


def recall(k: tuple) -> Any:
    """What was kept for `k` (Recording.keep), if every input it was computed from is as it was; else None."""
    try:
        with open(path_of(k), "rb") as f:
            stamp, recorded, env, lnames, lids, fnames, fids, wnames, wids, payload = marshal.loads(
                zlib.decompress(f.read()))
    except (OSError, ValueError, EOFError, TypeError, zlib.error):
        return None
    if stamp != FORMAT or recorded != k or env != _env_values(env):
        return None
    from .host import seal

    if (seal.identities(lnames.split("\0")) != lids or seal.stat_identities(_split(fnames), os.stat) != fids
            or _weak_identities(_split(wnames)) != wids):
        return None
    return payload


def answer(k: tuple) -> bool:
    """Print the output kept for the command `k` (Recording.keep_output) and exit with its code, if
    every input it read is as it was; else whether this command ran here before (mark), so that
    its run is worth recording: a first run (a cold one, most likely) pays nothing for it."""
    kept = recall(k)
    if kept is None:
        return os.path.exists(path_of(k))
    out, code = kept
    try:
        view = memoryview(out)
        while view:
            view = view[os.write(1, view):]
    except BrokenPipeError:  # the reader left (`| head`): as run_verb ends then
        os._exit(141)
    sys.exit(code)


def mark(k: tuple) -> None:
    """Note that the command `k` ran here, unrecorded: its next run is recorded."""
    try:
        _write(k, (FORMAT, k))
    except OSError:
        pass  # unwritable: the next run is simply not recorded either


def _write(k: tuple, record: tuple) -> None:
    """Write what is kept for `k`, leaving at most KEEP files (the least recently written go first)."""
    from .host.disk import write_atomic

    target = path_of(k)
    folder = os.path.dirname(target)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    # compressed: sorted paths share long prefixes (sglang's 1.9 MB is 0.28 MB, 3 ms to inflate)
    write_atomic(target, zlib.compress(marshal.dumps(record), 3), 0o600, durable=False)
    try:
        with os.scandir(folder) as it:
            kept = sorted((e.stat().st_mtime_ns, e.path) for e in it if e.is_file(follow_symlinks=False))
        for _, old in kept[:-KEEP]:
            os.unlink(old)
    except OSError:
        pass  # another command pruning too: only space is lost


def remembered(k: tuple, compute: Callable[[], Any]) -> Any:
    """compute()'s value (picklable), kept for `k` and given again while its inputs are as they
    were; computed afresh, without recording, inside another recording (one per process at a time)."""
    import pickle

    kept = recall(k)
    if kept is not None:
        return pickle.loads(kept)
    if _active is not None:
        return compute()
    if not os.path.exists(path_of(k)):  # a first run: only noted
        value = compute()
        mark(k)
        return value
    with Recording() as rec:
        value = compute()
    rec.keep(k, pickle.dumps(value))
    return value


def _split(names: str) -> list:
    return names.split("\0") if names else []


def _weak_identities(paths: list) -> list:
    """A directory's type, mode, owner and inode (not its times: entries come and go in /tmp or a
    home directory); anything else, or an absent path, by its whole lstat identity."""
    out: list = []
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_mode, st.st_uid, st.st_ino) if st.st_mode & 0o170000 == 0o040000 else
                   (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return out


def _env_values(recorded: dict) -> dict:
    if _ALL in recorded:
        return {_ALL: dict(os.environ)}
    return {name: os.environ.get(name) for name in recorded}


def _recording_environ(real: Any, noted: set) -> Any:
    """os.environ while a run is recorded: a mapping over the real one whose every read notes the
    name (iterating or copying it notes them all)."""
    from collections.abc import MutableMapping

    class Environ(MutableMapping):  # type: ignore[type-arg]
        def __getitem__(self, name: str) -> str:
            noted.add(name)
            return real[name]  # type: ignore[no-any-return]

        def __contains__(self, name: object) -> bool:
            noted.add(name)
            return name in real

        def __setitem__(self, name: str, value: str) -> None:
            noted.add(name)
            real[name] = value

        def __delitem__(self, name: str) -> None:
            noted.add(name)
            del real[name]

        def __iter__(self) -> Iterator[str]:
            noted.add(_ALL)
            return iter(real)

        def __len__(self) -> int:
            noted.add(_ALL)
            return len(real)

        def copy(self) -> dict:
            noted.add(_ALL)
            return dict(real)

    return Environ()


class _Tee:
    """A stream that keeps what is written to it and passes it on; whoever reaches past it (to its
    bytes or its file descriptor) writes what it cannot keep, and taints the recording."""

    def __init__(self, stream: Any, rec: "Recording") -> None:
        self.stream, self.rec, self.parts = stream, rec, []  # type: ignore[var-annotated]

    def write(self, text: str) -> int:
        self.parts.append(text)
        return self.stream.write(text)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        if name in ("buffer", "fileno"):
            self.rec.tainted = self.rec.tainted or f"the stream's {name} was used"
        return getattr(self.stream, name)


_active: Optional["Recording"] = None


def _hook(event: str, args: tuple) -> None:
    rec = _active
    if rec is None:
        return
    if event == "open":
        where, mode, flags = args
        if isinstance(where, int) or where is None:
            return
        written = (mode is not None and any(c in mode for c in _WRITES)) or (mode is None and flags & _WRITE_FLAGS)
        rec.note(where, rec.written if written else rec.read)
    elif event in ("os.listdir", "os.scandir"):
        where = args[0]
        if isinstance(where, int):  # a listing by descriptor names no path to check again
            rec.tainted = rec.tainted or f"{event} of a file descriptor"
        else:
            rec.note("." if where is None else where, rec.listed)
    elif event.startswith(_CHANGES):
        for where in args[:2] if event in ("os.rename", "os.link", "os.symlink") else args[:1]:
            if isinstance(where, (str, bytes)) or hasattr(where, "__fspath__"):
                rec.note(where, rec.written)
    elif event.startswith(_TAINTS):
        rec.tainted = rec.tainted or event


_hooked = False


class Recording:
    """`with Recording() as rec:` notes the inputs of what runs inside; `rec.keep(k, payload)` then
    keeps a payload for `recall(k)`, when it may be kept (see the module's docstring)."""

    def __init__(self) -> None:
        self.read: set = set()
        self.listed: set = set()
        self.written: set = set()
        self.weak: set = set()  # directories realpath passed through: only that each is still that directory
        self.caches: set = set()  # files read as caches (disk.reading_cache): never an answer's input
        self.env: set = set()
        self._resolving: dict = {}  # thread -> depth of realpath calls it is in
        self.tainted: Optional[str] = None
        self.started = 0

    def note(self, where: Any, into: set) -> None:
        if where.__class__ is str and where[:1] == "/":  # most are: kept as given (checked again as given)
            into.add(where)
            return
        try:
            into.add(os.path.abspath(os.fsdecode(where)))
        except (TypeError, ValueError):
            self.tainted = self.tainted or f"a path of type {type(where).__name__}"

    def _cache(self, where: str) -> None:
        self.note(where, self.caches)

    def __enter__(self) -> "Recording":
        global _active, _hooked
        from .host import disk

        self._split = disk.allow_split(False)  # a forked half's reads would be out of sight
        self._disk = disk
        disk._cache_readers.append(self._cache)
        self.started = time.time_ns()
        self._saved = (os.stat, os.lstat, os.access, os.readlink, os.path.realpath, os.environ, sys.stdout, sys.stderr)
        stat, lstat, access, readlink, realpath = os.stat, os.lstat, os.access, os.readlink, os.path.realpath

        def noted_stat(where: Any, *a: Any, **kw: Any) -> os.stat_result:
            if not isinstance(where, int):
                self.note(where, self.read)
            return stat(where, *a, **kw)

        resolving, thread = self._resolving, get_ident

        def noted_lstat(where: Any, *a: Any, **kw: Any) -> os.stat_result:
            self.note(where, self.weak if resolving.get(thread()) else self.read)
            return lstat(where, *a, **kw)

        def noted_readlink(where: Any, *a: Any, **kw: Any) -> Any:
            self.note(where, self.weak if resolving.get(thread()) else self.read)  # a link's identity: its text
            return readlink(where, *a, **kw)

        def noted_realpath(where: Any, *a: Any, **kw: Any) -> Any:
            me = thread()  # its lstat of each component only asks: a link, or not? (this thread's only)
            resolving[me] = resolving.get(me, 0) + 1
            try:
                return realpath(where, *a, **kw)
            finally:
                resolving[me] -= 1

        def noted_access(where: Any, *a: Any, **kw: Any) -> bool:
            if not isinstance(where, int):
                self.note(where, self.read)
            return access(where, *a, **kw)

        os.stat, os.lstat, os.access = noted_stat, noted_lstat, noted_access  # type: ignore[assignment]
        os.readlink, os.path.realpath = noted_readlink, noted_realpath  # type: ignore[assignment]
        os.environ = _recording_environ(os.environ, self.env)
        self.out, self.err = _Tee(sys.stdout, self), _Tee(sys.stderr, self)
        sys.stdout, sys.stderr = self.out, self.err  # type: ignore[assignment]
        if not _hooked:
            sys.addaudithook(_hook)  # for good (a hook cannot be removed): idle while no recording runs
            _hooked = True
        _active = self
        return self

    def __exit__(self, *exc: Any) -> None:
        global _active
        _active = None
        self._disk._cache_readers.remove(self._cache)
        self._disk.allow_split(self._split)
        os.stat, os.lstat, os.access, os.readlink, os.path.realpath, os.environ, sys.stdout, sys.stderr = self._saved  # type: ignore[misc]

    def keep_output(self, k: tuple, code: int) -> Optional[str]:
        """Keep what the run printed and its exit code for answer(k); see keep."""
        out = "".join(self.out.parts).encode(getattr(sys.stdout, "encoding", None) or "utf-8", "replace")
        return self.keep(k, (out, code))

    def keep(self, k: tuple, payload: Any) -> Optional[str]:
        """Keep `payload` (marshal-able) for recall(k) with the identities of the run's inputs;
        None when kept, else why not (see the module's docstring)."""
        why = self._refusal()
        if why is not None:
            return why
        from .host import seal

        names = self._inputs()
        lids = seal.stat_identities(names)
        links = [p for p in names if os.path.islink(p)]
        fids = seal.stat_identities(links, os.stat)
        weak = sorted(self.weak.difference(names, self.written, self.caches))
        wids = _weak_identities(weak)
        if not seal.settled(lids + fids, self.started):
            return "an input changed within the timestamp granularity of the run"
        env = {_ALL: dict(os.environ)} if _ALL in self.env else {n: os.environ.get(n) for n in self.env}
        try:
            _write(k, (FORMAT, k, env, "\0".join(names), lids, "\0".join(links), fids, "\0".join(weak), wids, payload))
        except OSError as exc:
            return f"cannot write {path_of(k)}: {exc}"
        return None

    def _refusal(self) -> Optional[str]:
        if self.tainted:
            return f"the run used what this process cannot see ({self.tainted})"
        if any(self.err.parts):
            return "the run wrote to stderr"
        if self.written:  # and the next run, which finds them, keeps its answer: a cold run pays nothing here
            return f"the run wrote its caches ({len(self.written)} paths)"
        return None

    def _inputs(self) -> list:
        """Every path read, listed or inside a listed directory, and every loaded module's file,
        less what the run wrote (its caches)."""
        names = set(self.read) | self.listed
        for directory in self.listed:
            try:
                with os.scandir(directory) as it:
                    names.update(entry.path for entry in it)
            except OSError:
                pass
        for module in list(sys.modules.values()):
            where = getattr(module, "__file__", None)
            if isinstance(where, str):
                names.add(os.path.abspath(where))
        names.difference_update(self.written, self.caches)
        return sorted(names)
