"""A pyc's code against its source's, compiled once per pair of bytes (for bytecode.py).

A pyc is compared by compiling its source, the dearest step of an audit (on the bare sglang venv,
16 of 20 s of `audit --rehash` were `compile()`). What a comparison found holds for those bytes:
the same source bytes and the same pyc bytes, under the same interpreter and optimization level,
hold the same code again. So each pyc found to hold its source's code is kept in `Compared` by the
digest of that pair (sha256 of the interpreter's magic number, the level, the source and the pyc,
as read for the comparison), one entry per pyc path; when the bytes read next time give the same
digest, the comparison is not made again. A pair that differs in one byte is compiled, so a
foreign pyc is found whatever the file's identity or header says. Kept in the target's audit/
beside the verdicts; read by `audit --rehash` too, since an entry depends on the bytes only,
never on a file's stat identity (docs/files-and-caches.md).

With the releases' code digests beside the pairs (`.release`, placed by the controller: checks/release_code.py),
a pyc of level 0 whose code, every file name blanked, marshals (version 2: no references) to the digest its
source's sha256 names holds that code without a compile: equal bytes unmarshal to equal code objects.
Any other pyc is compiled as above: a table made from another wheel, or a stale one, costs compiles,
never a foreign pyc believed (an entry names the bytes of the source it was compiled from). The file
is believed as the pairs are: a cache of the target's, where only its owner may write (read_cache).

Many comparisons (the first `audit --rehash` of a host compiles every source) run on the host's
cores: `compare_pairs` hands them to worker processes of the same interpreter, each started with
the one text of the comparison (`_PAIR`, which this module runs too), reading the files itself and
answering each pair as it is done (the progress follows them). Standard library only (shipped to
hosts, where the agent is one program: a worker is `python -c` with that text, no module to import).
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import selectors
import struct
import subprocess
import sys

from . import progress
from .statcache import load_cache, save_cache

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs a command's start about 10 ms)
    from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

    Job = Tuple[str, str, str, int, Optional[bytes]]  # (rel, pyc path, source path, opt, known digest)
    # (rel, other code?, pair digest, how: 0 a known pair, 1 compiled, 2 by the release's code digest)
    Judged = Tuple[str, Union[bool, str], bytes, int]


class Compared:
    """The pairs (source bytes, pyc bytes) found to hold the same code, by the pyc's path relative
    to the site dir: its pair's digest. Read at the first comparison (an audit that makes none
    pays nothing for it); `path` None: nothing is read or kept."""

    FORMAT = ("pk-pyc-compared", 1, sys.version_info[:2], importlib.util.MAGIC_NUMBER)
    RELEASE = ("pk-release-code", 1, importlib.util.MAGIC_NUMBER)  # beside it, `.release`: see `release`

    def __init__(self, path: Optional[str]) -> None:
        self.path = path
        self._known: Optional[Dict[str, bytes]] = None if path else {}
        self._release: Optional[Dict[bytes, bytes]] = None if path else {}
        self.made: Dict[str, bytes] = {}  # pairs compared by this run, found to hold the same code
        self.compiled = 0  # sources this run compiled
        self.vouched = 0  # pyc found to hold the release's code by its digest, none compiled

    @property
    def release(self) -> Dict[bytes, bytes]:
        """sha256 of a source -> code_digest of what it compiles to (optimization level 0) under this
        interpreter's magic number, as the controller compiled the release's own sources (written by
        checks/release_code.py); empty when absent, damaged or of another interpreter."""
        if self._release is None:
            self._release = (load_cache(self.path + ".release", self.RELEASE) or {}) if self.path else {}
        return self._release

    @property
    def known(self) -> Dict[str, bytes]:
        if self._known is None:
            self._known = (load_cache(self.path, self.FORMAT) or {}) if self.path else {}
        return self._known

    def save(self, present: Optional[Iterable[str]] = None) -> None:
        """Keep the pairs this run compared with those known before; with `present` (every pyc
        path the check found), only the known pairs of the pycs still there. Nothing is written
        when nothing was read."""
        if not self.path or self._known is None:
            return
        known = self._known
        kept = dict(known) if present is None else {rel: known[rel] for rel in present if rel in known}
        if self.made or len(kept) != len(known):
            kept.update(self.made)
            save_cache(self.path, self.FORMAT, kept)


# The comparison of one pair, as text: run by this module (exec below) and by each worker process
# (`python -c`: the worker needs no module of ours on the host). A pair whose digest is the known one
# is not compiled; the digest is of the very bytes compared.
_PAIR = """
import hashlib, importlib.util, marshal, warnings

CODE = type(compile("", "", "exec"))


def pair_digest(source, pyc, opt):
    h = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    h.update(b"%d:%d:" % (opt, len(source)))
    h.update(source)
    h.update(pyc)
    return h.digest()


def code_digest(code):
    # marshal (version 2: no references, so the bytes follow the values alone) of the code with every
    # file name blanked: equal digests, equal code objects (== ignores only the file name)
    def blank(c):
        return c.replace(co_filename="", co_consts=tuple(blank(k) if type(k) is CODE else k for k in c.co_consts))
    return hashlib.sha256(marshal.dumps(blank(code), 2)).digest()


def release_code(source, name):
    return code_digest(compile(source, name, "exec", dont_inherit=True, optimize=0))


def judge_pair(job, release=None):
    rel, pyc, src, opt, known = job
    try:
        with open(pyc, "rb") as f:
            pyc_bytes = f.read()
        with open(src, "rb") as f:
            source = f.read()
    except OSError as exc:
        return rel, "cannot be compared with its source: %s" % (exc.strerror or exc), b"", 0
    digest = pair_digest(source, pyc_bytes, opt)
    if known == digest:
        return rel, False, digest, 0
    try:
        code = marshal.loads(pyc_bytes[16:])
        vouched = release.get(hashlib.sha256(source).digest()) if release and opt == 0 else None
        if vouched is not None and type(code) is CODE and code_digest(code) == vouched:
            return rel, False, digest, 2  # the code the release's source compiles to, not compiled here
        with warnings.catch_warnings():  # a source's SyntaxWarnings are its own, not the audit's to print
            warnings.simplefilter("ignore")
            fresh = compile(source, src, "exec", dont_inherit=True, optimize=opt)
    except (ValueError, EOFError, TypeError, SyntaxError) as exc:
        return rel, "cannot be compared with its source: %s" % (exc,), digest, 1
    return rel, code != fresh, digest, 1
"""
_WORKER = (
    _PAIR
    + """
import struct, sys
jobs, release = marshal.loads(sys.stdin.buffer.read())
out = sys.stdout.buffer
for job in jobs:
    answer = marshal.dumps(judge_pair(job, release))
    out.write(struct.pack("<I", len(answer)) + answer)
    out.flush()
"""
)
# The release's code digests (Compared.release), as the controller makes them in an interpreter of its own
# (checks/release_code.py): argv wheel, i, n: every n-th source of the wheel from the i-th, compiled.
RELEASE_BUILDER = _PAIR + (
    """
import sys, zipfile
STAMP = %r  # Compared.RELEASE but the magic number, which is the builder's own
wheel, first, step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
table = {}
with zipfile.ZipFile(wheel) as zf:
    for name in sorted(n for n in zf.namelist() if n.endswith(".py"))[first::step]:
        source = zf.read(name)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                table[hashlib.sha256(source).digest()] = release_code(source, name)
        except (SyntaxError, ValueError):
            pass
sys.stdout.buffer.write(marshal.dumps((STAMP + (importlib.util.MAGIC_NUMBER,), table)))
"""
) % (Compared.RELEASE[:2],)
_ns: Dict[str, Any] = {}
exec(compile(_PAIR, "pycompare._PAIR", "exec"), _ns)
pair_digest: Callable[[bytes, bytes, int], bytes] = _ns["pair_digest"]
judge_pair: Callable[[Job, Optional[Dict[bytes, bytes]]], Judged] = _ns["judge_pair"]
code_digest: Callable[[Any], bytes] = _ns["code_digest"]
"""pair_digest: what a comparison of these bytes depends on: the interpreter (its magic number), the
optimization level, the source and the pyc (its header with it). judge_pair: one job compared (a
pyc's code object against what its source compiles to: code objects compare by what they run, their
bytecode, constants, names, line tables and flags, not the file name they were compiled under)."""

POOL_FROM = 64  # comparisons from which workers are started (each costs an interpreter's start)
PER_WORKER = 32  # comparisons at least for each worker


def cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def other_code(
    pyc: str, src: str, opt: int, rel: str = "", memo: Optional[Compared] = None
) -> Union[bool, str]:
    """Whether a pyc's code object is not what its source compiles to (a detail string when it
    cannot be compared at all). With `memo`, a pair of bytes found the same before is not compiled
    again."""
    return _settled(judge_pair((rel, pyc, src, opt, _known(memo, rel)), _release(memo)), memo)


def compare_pairs(
    jobs: List[Tuple[str, str, str, int]], memo: Compared, workers: int = 0
) -> Dict[str, Union[bool, str]]:
    """other_code of each (rel, pyc path, source path, opt), by rel, one `progress` step each; on
    `workers` processes (0: one per core) when there are enough of them to be worth starting."""
    full = [(rel, pyc, src, opt, _known(memo, rel)) for rel, pyc, src, opt in jobs]
    workers = min(workers or cores(), len(full) // PER_WORKER)
    pooled = workers > 1 and len(full) >= POOL_FROM and bool(sys.executable)  # (none when embedded)
    release = _release(memo)
    procs = _started(full, workers, release) if pooled else []
    verdicts: Dict[str, Union[bool, str]] = {}
    try:
        for answer in _answers(procs, len(full)) if procs else (judge_pair(job, release) for job in full):
            verdicts[answer[0]] = _settled(answer, memo)
            progress.step()
    finally:
        ended(procs)
    return verdicts


def _known(memo: Optional[Compared], rel: str) -> Optional[bytes]:
    return memo.known.get(rel) if memo is not None else None


def _release(memo: Optional[Compared]) -> Dict[bytes, bytes]:
    return memo.release if memo is not None else {}


def _settled(answer: Judged, memo: Optional[Compared]) -> Union[bool, str]:
    rel, other, digest, how = answer
    if memo is not None and how:
        memo.compiled += how == 1
        memo.vouched += how == 2
        if other is False:
            memo.made[rel] = digest
    return other


def _started(jobs: List[Job], workers: int, release: Dict[bytes, bytes]) -> List[subprocess.Popen[bytes]]:
    """`workers` processes of this interpreter, each given its share of the jobs to judge (the
    biggest sources dealt first and spread, so that they end together); [] when none can start
    (the jobs are then judged here)."""
    try:
        sizes = {job[0]: os.stat(job[2]).st_size for job in jobs}
    except OSError:
        sizes = {}
    ordered = sorted(jobs, key=lambda job: sizes.get(job[0], 0), reverse=True)
    procs: List[subprocess.Popen[bytes]] = []
    try:
        for i in range(workers):
            proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _WORKER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            procs.append(proc)
            assert proc.stdin is not None
            proc.stdin.write(marshal.dumps((ordered[i::workers], release)))  # read whole before it answers
            proc.stdin.close()
    except OSError:  # no interpreter to start (or it died at once): the comparisons are made here
        ended(procs)
        return []
    return procs


def ended(procs: List[subprocess.Popen[bytes]]) -> None:
    """Every worker stopped (at the end they have ended already; on an error or Ctrl-C, killed)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _answers(procs: List[subprocess.Popen[bytes]], expected: int) -> Iterable[Judged]:
    """The workers' answers (each a length, then marshal of judge_pair's), read as they come."""
    buffers = {}
    with selectors.DefaultSelector() as sel:
        for proc in procs:
            assert proc.stdout is not None
            sel.register(proc.stdout, selectors.EVENT_READ, proc)
            buffers[proc.pid] = b""
        got = 0
        while got < expected:
            ready = sel.select()
            for key, _ in ready:
                proc = key.data
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    if not sel.get_map():
                        raise OSError(
                            f"a bytecode worker ended with {expected - got} comparison(s) unanswered"
                        )
                    continue
                data = buffers[proc.pid] + chunk
                while len(data) >= 4:
                    (size,) = struct.unpack_from("<I", data)
                    if len(data) < 4 + size:
                        break
                    got += 1
                    yield marshal.loads(data[4 : 4 + size])
                    data = data[4 + size :]
                buffers[proc.pid] = data
