"""Installed distributions against their RECORD, and bytecode against its source (for audit)."""

from __future__ import annotations

import importlib.util
import os
import stat
import struct
import sys
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List

from . import seal
from .disk import feed, is_install_record, listing, map_files, write_atomic
from .statcache import Listings, StatCache, load_cache, save_cache
from .distinfo import console_scripts, record_paths, record_rows, record_text_rows

_IDENTITIES = struct.Struct("<10q")  # a pyc's identity and its source's (see VerdictCache)
_STALE_AT = _IDENTITIES.size  # where a packed verdict says whether the pyc is stale


def _record_digest(path: str, algo: str) -> str:
    """`algo:<urlsafe base64 without padding>`, the form RECORD files use."""
    import base64
    import hashlib

    h = hashlib.new(algo)
    feed(path, h)
    return f"{algo}:{base64.urlsafe_b64encode(h.digest()).rstrip(b'=').decode()}"


_LAUNCHER = None


def _is_launcher(rest: bytes, entry_points: set[str]) -> bool:
    """pip/distlib's console-script template calling one of this distribution's entry points."""
    import re

    global _LAUNCHER
    if _LAUNCHER is None:
        _LAUNCHER = re.compile(
            rb"(?:# -\*- coding: utf-8 -\*-\n)?import re\nimport sys\nfrom ([\w.]+) import ([\w.]+)\n"
            rb"if __name__ == ['\"]__main__['\"]:\n    sys\.argv\[0\] = re\.sub\(.*\)\n"
            rb"    sys\.exit\(([\w.]+)\(\)\)\n?")
    m = _LAUNCHER.fullmatch(rest)
    return m is not None and f"{m.group(1).decode()}:{m.group(2).decode()}" in entry_points


def record_hash(data: bytes, algo: str) -> str:
    """`algo:<urlsafe base64 without padding>` of bytes, the form RECORD files use."""
    import base64
    import hashlib

    return f"{algo}:{base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b'=').decode()}"


def _shebang_only(path: str, algo: str, expected: str, entry_points: set[str]) -> bool:
    """True when a script differs from RECORD in its interpreter line alone (rewritten on install
    or relocation): its body is the wheel's with `#!python`, or a generated launcher."""
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return False
    if not data.startswith(b"#!"):
        return False
    first, _, rest = data.partition(b"\n")
    if rest.startswith(b"'''exec' "):  # pip's long-shebang form: #!/bin/sh, '''exec' python "$0" "$@", ' '''
        rest = rest.split(b"\n", 2)[-1]
    elif b"python" not in first:
        return False
    for head in (b"#!python\n", b"#!python\r\n"):
        if record_hash(head + rest, algo) == expected:
            return True
    return _is_launcher(rest, entry_points)


def check_record(site: str, name: str, cache_dir: str | None, outside: bool = False) -> dict[str, Any]:
    """A distribution's files against its RECORD (hash, size); `outside`: only its rows outside its
    package, the console scripts (`../`) and the installer's records (the managed distribution's,
    whose package is its code state)."""
    dist_dir = os.path.join(site, name)
    record = os.path.join(dist_dir, "RECORD")
    if not os.path.exists(record):
        return {"files": 0, "findings": [], "note": "no RECORD: its files cannot be verified"}
    cache = StatCache(os.path.join(cache_dir, name + (".outside" if outside else "") + ".json") if cache_dir else None)
    findings: list[list[str]] = []
    todo: list[tuple[str, str, str, str, os.stat_result]] = []
    checked = 0
    mismatched: list[tuple[str, str, str, str]] = []
    for rel, algo, b64, size in (_outside_rows(record) if outside else record_rows(record)):
        checked += 1
        path = os.path.normpath(os.path.join(site, rel))
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            findings.append([rel, "missing", "listed in RECORD, not on disk"])
            continue
        if not stat.S_ISREG(st.st_mode):
            findings.append([rel, "not-a-file", "RECORD lists a file; this is not a regular file"])
            continue
        expected = f"{algo}:{b64}"
        digest = cache.lookup(rel, st) if size is None or st.st_size == size else None
        if digest is not None:
            if digest != expected:
                mismatched.append((rel, path, algo, expected))
        elif size is not None and st.st_size != size:
            mismatched.append((rel, path, algo, expected))
        else:
            todo.append((rel, path, algo, expected, st))

    def work(job: tuple[str, str, str, str, os.stat_result]) -> tuple[str, str, str, str, str]:
        rel, path, algo, expected, st = job
        try:
            digest = _record_digest(path, algo)
        except OSError as exc:
            return rel, path, algo, expected, f"unreadable: {exc.strerror}"
        return rel, path, algo, expected, digest

    results = map_files(work, todo, lambda job: job[4].st_size)
    for job, (_, _, _, _, digest) in zip(todo, results):
        if not digest.startswith("unreadable: "):
            cache.remember(job[0], job[4], digest)
    mismatched.extend((rel, path, algo, expected) for rel, path, algo, expected, digest in results
                      if digest != expected)
    scripts = None
    for rel, path, algo, expected in mismatched:
        if rel.startswith("../") or os.path.isabs(rel):
            scripts = console_scripts(dist_dir) if scripts is None else scripts
            if _shebang_only(path, algo, expected, scripts):
                continue
        try:
            size = os.stat(path).st_size
        except OSError:
            size = -1
        findings.append([rel, "changed", f"differs from RECORD ({expected.partition(':')[0]}, {size} bytes)"])
    cache.save()
    if cache.path and not os.path.exists(cache.path):  # an audit has run here: status may audit cheaply
        os.makedirs(os.path.dirname(cache.path), mode=0o700, exist_ok=True)
        write_atomic(cache.path, b"{}", 0o600)
    return {"files": checked, "findings": sorted(findings)}

def _outside_rows(record: str) -> Iterator[tuple[str, str, str, int | None]]:
    """RECORD's rows outside the package, as record_rows gives them: the lines that may be one are
    picked by their text first (sglang's RECORD has 10,000 rows; a handful are outside it)."""
    with open(record, newline="", encoding="utf-8") as f:
        lines = [line for line in f if line.startswith(("../", "/", '"')) or ".dist-info/" in line]
    for row in record_text_rows(lines):
        if row[0].startswith(("../", "/")) or is_install_record(row[0]):
            yield row


_SEAL_FORMAT = ("pk-record-seals", 3, tuple(sys.version_info[:2]))


class RecordSeals:
    """Each distribution's RECORD check (check_record's answer), sealed with the stat identity of
    every file it read: the audit's and the fingerprint's, each in a file of its own.

    An answer is given again while the RECORD, the dist-info dir and every file the RECORD lists keep
    the identity (size, mtime, ctime, inode, device; of the file a path resolves to, as check_record
    stats it) they had before the check read them: one stat per file, no RECORD parsed, no cache loaded.
    Any install, removal, rewrite or re-pointed symlink moves one of them; an answer whose files
    changed within the clock's granularity of the check is never sealed (the racily-clean rule)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.seals: Dict[str, Any] = {}
        self.dirty = False
        if path is not None:  # absent, damaged or another version's: every answer is checked again
            self.seals = load_cache(path, _SEAL_FORMAT) or {}

    def checked(self, site: str, dist_infos: List[str], cache_dir: str | None) -> Dict[str, Dict[str, Any]]:
        """check_record(site, name, cache_dir) of each name, sealed (every sealed file's identity
        is taken in one list: torch alone lists about 15,000 files)."""
        dirs = [os.path.join(site, name) for name in dist_infos]
        sealed = [self.seals.get(d) for d in dirs]
        paths = [p for entry in sealed if entry is not None for p in entry[0].split("\0")]
        ids = seal.stat_identities(paths, os.stat)
        out: Dict[str, Dict[str, Any]] = {}
        at = 0
        for name, entry in zip(dist_infos, sealed):
            if entry is not None:
                held, at = ids[at:at + len(entry[1])] == entry[1], at + len(entry[1])
                if held:
                    out[name] = dict(entry[2])
                    continue
            out[name] = self._check(site, name, cache_dir)
        return out

    def _check(self, site: str, dist_info: str, cache_dir: str | None) -> Dict[str, Any]:
        started = time.time_ns()
        dist_dir = os.path.join(site, dist_info)
        record = os.path.join(dist_dir, "RECORD")
        inputs = [dist_dir, record]
        head = seal.stat_identities(inputs, os.stat)  # before the RECORD is read
        inputs += [os.path.normpath(os.path.join(site, rel)) for rel in record_paths(record)]
        ids = head + seal.stat_identities(inputs[2:], os.stat)  # before check_record reads any of them
        result = check_record(site, dist_info, cache_dir)
        if self.path is not None:
            if seal.settled(ids, started):
                self.seals[dist_dir] = ("\0".join(inputs), ids, result)
            else:
                self.seals.pop(dist_dir, None)
            self.dirty = True
        return result

    def save(self) -> None:
        """Write the seals (not durably: a lost seal only costs one full check)."""
        if self.dirty and self.path is not None:
            save_cache(self.path, _SEAL_FORMAT, self.seals)


def _pyc_source(rel: str, cache_tag: str) -> tuple[str, int] | None:
    """(source path, optimization level), both relative, of `<dir>/__pycache__/<stem>.<tag>[.opt-N].pyc`,
    or None when the pyc belongs to another interpreter or its name is not one Python writes.

    importlib.util.source_from_cache's rules, in a few string operations (an audit maps thousands
    of names); under a sys.pycache_prefix, importlib's own."""
    head, _, name = rel.rpartition("/")
    parts = name.split(".")
    if len(parts) < 3 or parts[1] != cache_tag:  # source_from_cache would map another tag's pyc too
        return None
    if sys.pycache_prefix is not None:
        try:
            source = importlib.util.source_from_cache(rel)
        except (ValueError, NotImplementedError):
            return None
    else:
        if len(parts) > 4 or head.rpartition("/")[2] != "__pycache__":  # 2 or 3 dots, in a __pycache__
            return None
        if len(parts) == 4 and not (parts[2].startswith("opt-") and parts[2][4:].isalnum()):
            return None
        folder = head[: -len("__pycache__")]  # "<dir>/" or ""
        source = f"{folder}{parts[0]}.py"
    level = parts[2][4:] if len(parts) == 4 else ""
    return source, int(level) if level.isdigit() else 0


def _walk_pyc(root: str, skip: frozenset[str] = frozenset(),
              listings: Listings | None = None) -> Iterator[tuple[str, bool]]:
    """(relative path, in __pycache__) of every .pyc below root, streamed directory by directory;
    the top-level directories in `skip` are left out (a scan already walked them). `listings`
    remembers directories' entries by their stat identity (disk.listing: statcache.Listings)."""
    stack = [d for d in _top_entries(root) if d not in skip] if skip else [""]  # skip: see _top_pycs
    while stack:
        rel_dir = stack.pop()
        try:
            entries = listing(f"{root}/{rel_dir}" if rel_dir else root, listings)
        except PermissionError:
            continue
        if entries is None:
            continue
        in_cache = rel_dir.endswith("__pycache__") and rel_dir.rpartition("/")[2] == "__pycache__"
        prefix = f"{rel_dir}/" if rel_dir else ""
        for name, is_dir in entries:
            if is_dir:
                if not name.endswith(".dist-info"):
                    stack.append(prefix + name)
            elif name.endswith(".pyc"):
                yield prefix + name, in_cache


def _top_entries(root: str) -> list[str]:
    """The top-level directories of root (to walk), and its top-level .pyc files, oddly placed."""
    try:
        with os.scandir(root) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    return [name for name, is_dir in entries if is_dir and not name.endswith(".dist-info")]


def _top_pycs(root: str) -> Iterator[tuple[str, bool]]:
    try:
        with os.scandir(root) as it:
            names = [e.name for e in it if e.name.endswith(".pyc") and not e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return
    for name in names:
        yield name, False


def recompiled(path: str, kind: str) -> bool:
    """Whether a finding (a path relative to the site dir, and its kind) names a source whose pycs
    the bytecode check recompiles and compares: a .py changed, added or with another mode."""
    return path.endswith(".py") and kind in ("changed", "added", "mode") and not path.startswith(("../", "@"))


def recompiled_sources(findings: Iterable[Any]) -> set[str]:
    """The paths of the findings ([path, kind, detail]) that `recompiled` names."""
    return {f[0] for f in findings if recompiled(f[0], f[1])}


def check_bytecode(site: str, cache_tag: str, verify: list[str], cache_path: str | None = None) -> dict[str, Any]:
    """See Agent.audit_bytecode: every pyc below `site` judged, its verdict cache (`cache_path`)
    and its walked directories' listings (beside it, `.dirs`) saved."""
    cache = VerdictCache(cache_path)
    listings = Listings(cache_path + ".dirs") if cache_path else None
    found = list(_walk_pyc(site, listings=listings))
    judge = _judge(site, cache_tag, frozenset(verify), {}, cache)
    outcomes = [judge(rel, in_cache) for rel, in_cache in found]
    if listings is not None:
        listings.save()
    return _tally(found, outcomes, cache)


class VerdictCache(StatCache):
    """The verdicts of clean pycs (not a finding: they run their source's code, or are stale), each
    kept while the pyc and its source keep their identity: (size, mtime_ns, ctime_ns, inode, device) of both,
    then whether it is stale, packed (a few thousand are read and written as one marshal string each,
    where tuples of big ints took several times longer)."""

    FORMAT = ("pk-pyc-verdicts", 2, sys.version_info[:2])


def _judge(site: str, cache_tag: str, deep: frozenset[str], stats: Dict[str, os.stat_result],
           cache: StatCache) -> Callable[[str, bool], Any]:
    """The function giving one pyc's outcome (its verdict is remembered by _tally)."""
    known_verdicts: Dict[str, Any] = cache.entries  # (VerdictCache: packed identities)
    limit = cache.started_ns - cache.GRANULARITY_NS  # a verdict is remembered only for files older than this
    pack = _IDENTITIES.pack

    def judge(rel: str, in_cache: bool) -> Any:
        pyc = f"{site}/{rel}"
        if not in_cache:  # a legacy pyc beside its module: imported only when there is no source
            return ("sourceless",) if rel[:-1] not in stats and not os.path.exists(pyc[:-1]) else None
        found = _pyc_source(rel, cache_tag)
        if found is None:
            return None
        src_rel, opt = found
        compare = src_rel in deep
        hit = None if compare else known_verdicts.get(rel)  # StatCache.lookup, inlined: this runs per pyc
        head: bytes | OSError | None = None
        try:
            st = stats.get(src_rel) or os.stat(f"{site}/{src_rel}")
            if hit is not None:
                pst = os.stat(pyc)
            else:  # no verdict to reuse: the header is read, and the stat taken, through one open
                pst, head = _stat_and_head(pyc)
        except (FileNotFoundError, NotADirectoryError):
            return ("orphan",)  # a __pycache__ entry without source is never imported
        ids = pack(pst.st_size, pst.st_mtime_ns, pst.st_ctime_ns, pst.st_ino, pst.st_dev,
                   st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
        if hit is not None and hit[:_STALE_AT] == ids:
            return ("hit",)
        verdict = _pyc_verdict(pyc, f"{site}/{src_rel}", st, opt, compare, head)
        keep = None
        if (verdict is None or verdict == "stale") and st.st_mtime_ns < limit and st.st_ctime_ns < limit \
                and pst.st_mtime_ns < limit and pst.st_ctime_ns < limit:
            keep = ids + (b"\1" if verdict == "stale" else b"\0")
        return ("judged", verdict, keep)

    return judge


def _tally(found: list[tuple[str, bool]], outcomes: list[Any], cache: StatCache) -> dict[str, Any]:
    """The counts and findings of the pycs' outcomes, and the verdict cache saved."""
    findings: list[list[str]] = []
    pycs = orphans = stale = 0
    known_verdicts = cache.entries
    for (rel, _), outcome in zip(found, outcomes):
        if outcome is None:
            continue
        pycs += 1
        kind = outcome[0]
        if kind == "sourceless":
            findings.append([rel, "sourceless", "a .pyc without its .py: Python imports this bytecode"])
        elif kind == "orphan":
            orphans += 1
        elif kind == "hit":
            hit = known_verdicts[rel]
            cache.fresh[rel] = hit
            stale += hit[_STALE_AT]
        else:
            verdict, keep = outcome[1], outcome[2]
            if verdict is None or verdict == "stale":
                stale += verdict == "stale"
                if keep is not None:
                    cache.fresh[rel] = keep
            else:
                findings.append([rel, *verdict])
    cache.save()
    return {"pycs": pycs, "orphans": orphans, "stale": stale, "findings": sorted(findings)}


def _stat_and_head(pyc: str) -> tuple[os.stat_result, bytes | OSError]:
    """A pyc's stat and its first 16 bytes (or the error reading them), through one open: one
    lookup of its path where os.stat and a read took two. A pyc that is gone raises as os.stat
    would; one that cannot be opened is stat'ed by its path, as before."""
    try:
        fd = os.open(pyc, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        raise
    except OSError as exc:
        return os.stat(pyc), exc
    try:
        st = os.fstat(fd)
        try:
            return st, os.read(fd, 16)
        except OSError as exc:
            return st, exc
    finally:
        os.close(fd)


def _pyc_verdict(pyc: str, src: str, st: os.stat_result, opt: int, compare: bool,
                 head: bytes | OSError | None = None) -> tuple[str, str] | str | None:
    """None when the pyc runs its source's code, "stale" when Python will recompile it, else a
    finding (kind, detail). With `compare`, a pyc whose header matches is also recompiled. `head`:
    its first 16 bytes, or the error reading them, when already read (_stat_and_head)."""
    magic = importlib.util.MAGIC_NUMBER
    if head is None:
        try:
            fd = os.open(pyc, os.O_RDONLY)
            try:
                head = os.read(fd, 16)
            finally:
                os.close(fd)
        except OSError as exc:
            head = exc
    if isinstance(head, OSError):
        return "unreadable", head.strerror or str(head)
    if len(head) < 16:
        return "stale"  # Python recompiles it on import: never run, not a finding
    flags = int.from_bytes(head[4:8], "little")
    if flags & 1:  # hash-based (PEP 552)
        if head[:4] != magic:
            return None  # compiled by another interpreter version: its source hash cannot be computed here
        with open(src, "rb") as f:
            source_hash = importlib.util.source_hash(f.read())
        if source_hash == head[8:16]:
            return None
        if flags & 2:
            return "stale"
        return "mismatch", (f"unchecked-hash pyc was compiled from other code than "
                            f"{os.path.basename(src)}: Python runs it without checking")
    mtime = int.from_bytes(head[8:12], "little")
    size = int.from_bytes(head[12:16], "little")
    if mtime != (int(st.st_mtime) & 0xFFFFFFFF) or size != (st.st_size & 0xFFFFFFFF):
        return "stale"
    if compare and head[:4] == magic:
        import marshal

        try:
            with open(pyc, "rb") as f:
                code = marshal.loads(f.read()[16:])
            with open(src, "rb") as f:
                fresh = compile(f.read(), src, "exec", dont_inherit=True, optimize=opt)
        except (ValueError, EOFError, TypeError, SyntaxError) as exc:
            return "mismatch", f"cannot be compared with its source: {exc}"
        if code != fresh:
            return "mismatch", (f"its header matches {os.path.basename(src)} but its code "
                                "does not: Python runs the old code")
    return None
