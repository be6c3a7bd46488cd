"""Bytecode against its source (for audit): every pyc Python would run instead of its source.

Standard library only (shipped to hosts). A pyc is judged by its header (magic number, flags, the
source's mtime and size or hash); one whose header cannot be believed (its source changed, or the
pyc itself was written since the baseline) is compared with its source's code, after every header
is read (the comparisons are the long phase of an audit that makes them, counted in `progress`),
by compiling the source unless the same pair of bytes was found to hold the same code before
(pycompare.py).
"""

from __future__ import annotations

import importlib.util
import os
import struct
import sys
from typing import Any, Callable, Dict, Iterable, Iterator

from . import progress
from .disk import listing
from .pycompare import Compared, compare_pairs
from .statcache import Listings, StatCache

_IDENTITIES = struct.Struct("<10q")  # a pyc's identity and its source's (see VerdictCache)
_FLAG_AT = _IDENTITIES.size  # where a packed verdict says how the pyc was judged
# what _pyc_verdict says of a pyc Python would run when its code is still to be compared (settle)
_BY_HASH, _BY_HEADER = "compare: hash", "compare: header"
PHASE = "bytecode compared with its source"  # the long phase of an audit that compares many pycs


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


def _walk_pyc(
    root: str, skip: frozenset[str] = frozenset(), listings: Listings | None = None
) -> Iterator[tuple[str, bool]]:
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


def check_bytecode(
    site: str,
    cache_tag: str,
    verify: list[str],
    cache_path: str | None = None,
    since_ns: int | None = None,
    compared: str | None = None,
) -> dict[str, Any]:
    """See Agent.audit_bytecode: every pyc below `site` judged, its verdict cache (`cache_path`)
    and its walked directories' listings (beside it, `.dirs`) saved; `compared`: the pairs of
    bytes found to hold the same code (pycompare.Compared)."""
    cache = VerdictCache(cache_path)
    listings = Listings(cache_path + ".dirs") if cache_path else None
    found = list(_walk_pyc(site, listings=listings))
    judge = _judge(site, cache_tag, frozenset(verify), {}, cache, since_ns)
    memo = Compared(compared)
    outcomes = settle(site, found, [judge(rel, in_cache) for rel, in_cache in found], memo)
    memo.save(rel for rel, in_cache in found if in_cache)
    if listings is not None:
        listings.save()
    return _tally(found, outcomes, cache)


def settle(site: str, found: list[tuple[str, bool]], outcomes: list[Any], memo: Compared) -> list[Any]:
    """The outcomes of `_judge` with each comparison it left made (one phase, counted in
    `progress` as one file each, under PHASE; on the host's cores when there are many:
    pycompare.compare_pairs): a pyc whose code is not its source's is a finding, one that holds it
    is remembered as COMPARED when its identity may be (`_judge`'s keep), and the pairs compared
    are kept in `memo` (the caller saves it)."""
    jobs = [i for i, outcome in enumerate(outcomes) if outcome is not None and outcome[0] == "compare"]
    if not jobs:
        return outcomes
    progress.phase(PHASE)
    progress.expect(len(jobs))
    pairs = [(found[i][0], f"{site}/{found[i][0]}", f"{site}/{outcomes[i][1]}", outcomes[i][2]) for i in jobs]
    verdicts = compare_pairs(pairs, memo)
    for i in jobs:
        _, src_rel, _, how, keep = outcomes[i]
        other = verdicts[found[i][0]]
        if not other:
            outcomes[i] = ("judged", None, keep)
        else:
            name = os.path.basename(src_rel)
            outcomes[i] = ("judged", ("mismatch", other if other is not True else _told(how, name)), None)
    return outcomes


def _told(how: str, name: str) -> str:
    if how == _BY_HASH:
        return f"its source hash matches {name} but its code does not: Python runs the other code"
    return f"its header matches {name} but its code does not: Python runs the old code"


def installed_bytecode(
    site: str, cache_tag: str, dirs: list[str], record: str, compared: str | None = None
) -> dict[str, Any]:
    """For a first baseline: the pycs below the package's top directories (`dirs`, relative to
    `site`) that run other code than their source. Recompiled and compared: every hash-based pyc
    (pip writes timestamp pycs) and every pyc written after the distribution's RECORD (`record`, a
    path: pip writes the pycs, then RECORD); the others are judged by their header (audit --rehash
    recompiles them all). Counts and findings as check_bytecode's; `compared` as its."""
    try:
        installed_ns = os.stat(record).st_mtime_ns
    except OSError:  # no RECORD to date the install by: every pyc is recompiled
        installed_ns = -1
    pycs: list[tuple[str, bool]] = []
    outcomes: list[Any] = []
    for top in dirs:
        for rel, in_cache in _walk_pyc(f"{site}/{top}"):
            rel = f"{top}/{rel}"
            pycs.append((rel, in_cache))
            outcomes.append(_installed(site, rel, in_cache, cache_tag, installed_ns))
    memo = Compared(compared)
    outcomes = settle(site, pycs, outcomes, memo)
    memo.save()  # (the package's pycs only: the pairs of the others are kept)
    return _tally(pycs, outcomes, StatCache(None))


def _installed(site: str, rel: str, in_cache: bool, cache_tag: str, installed_ns: int) -> Any:
    """One pyc's outcome for installed_bytecode, as _judge's (a comparison left to settle)."""
    pyc = f"{site}/{rel}"
    if not in_cache:
        return ("sourceless",) if not os.path.exists(pyc[:-1]) else ("judged", None, None)
    found = _pyc_source(rel, cache_tag)
    if found is None:
        return None
    try:
        st = os.stat(f"{site}/{found[0]}")
        pst, head = _stat_and_head(pyc)
    except (FileNotFoundError, NotADirectoryError):
        return ("orphan",)
    hashed = isinstance(head, bytes) and len(head) >= 8 and bool(head[4] & 1)
    verdict = _pyc_verdict(pyc, f"{site}/{found[0]}", st, hashed or pst.st_mtime_ns > installed_ns, head)
    if verdict in (_BY_HASH, _BY_HEADER):
        return ("compare", found[0], found[1], verdict, None)
    return ("judged", verdict, None)


class VerdictCache(StatCache):
    """The verdicts of clean pycs (not a finding: they run their source's code, or are stale), each
    kept while the pyc and its source keep their identity: (size, mtime_ns, ctime_ns, inode, device) of both,
    then how it was judged (CLEAN, STALE, or COMPARED: recompiled and found to hold its source's
    code), packed (a few thousand are read and written as one marshal string each, where tuples of
    big ints took several times longer)."""

    FORMAT = ("pk-pyc-verdicts", 3, sys.version_info[:2])
    CLEAN, STALE, COMPARED = b"\0", b"\1", b"\2"


def _judge(
    site: str,
    cache_tag: str,
    deep: frozenset[str],
    stats: Dict[str, os.stat_result],
    cache: StatCache,
    since_ns: int | None = None,
) -> Callable[[str, bool], Any]:
    """The function giving one pyc's outcome (its verdict is remembered by _tally; a comparison is
    left to `settle`). The pycs of the sources in `deep`, and every pyc whose identity is newer
    than `since_ns` (the baseline's recording: written or replaced since, by whatever means), are
    compared with their source whatever their header says, once per identity."""
    known_verdicts: Dict[str, Any] = cache.entries  # (VerdictCache: packed identities)
    limit = cache.started_ns - cache.GRANULARITY_NS  # a verdict is remembered only for files older than this
    # a pyc changed at or after then is new; a file system with coarse timestamps gives one written in
    # the same tick after it an equal time, which counts (the marker is expected on the site's file system)
    newer = since_ns
    pack = _IDENTITIES.pack
    compared, stale_flag = VerdictCache.COMPARED[0], VerdictCache.STALE[0]

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
        ids = pack(
            pst.st_size,
            pst.st_mtime_ns,
            pst.st_ctime_ns,
            pst.st_ino,
            pst.st_dev,
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
            st.st_ino,
            st.st_dev,
        )
        new = newer is not None and pst.st_ctime_ns >= newer
        if hit is not None and hit[:_FLAG_AT] == ids and (not new or hit[_FLAG_AT] in (compared, stale_flag)):
            return ("hit",)
        verdict = _pyc_verdict(pyc, f"{site}/{src_rel}", st, compare or new, head)
        settled = (
            st.st_mtime_ns < limit
            and st.st_ctime_ns < limit
            and pst.st_mtime_ns < limit
            and pst.st_ctime_ns < limit
        )
        if verdict in (_BY_HASH, _BY_HEADER):  # its code is compared by settle, after every header
            return ("compare", src_rel, opt, verdict, ids + VerdictCache.COMPARED if settled else None)
        keep = None
        if (verdict is None or verdict == "stale") and settled:
            keep = ids + (VerdictCache.STALE if verdict == "stale" else VerdictCache.CLEAN)
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
            stale += hit[_FLAG_AT] == VerdictCache.STALE[0]
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


def _pyc_verdict(
    pyc: str, src: str, st: os.stat_result, compare: bool, head: bytes | OSError | None = None
) -> tuple[str, str] | str | None:
    """None when the pyc runs its source's code, "stale" when Python will recompile it, else a
    finding (kind, detail). With `compare`, a pyc Python would run is left to compare with its
    source's code, whatever its header says (_BY_HASH or _BY_HEADER: how it claims its source).
    `head`: its first 16 bytes, or the error reading them, when already read (_stat_and_head)."""
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
    if len(head) < 16 or head[:4] != importlib.util.MAGIC_NUMBER:
        return "stale"  # Python recompiles it on import (a bad magic number is an ImportError it catches)
    flags = int.from_bytes(head[4:8], "little")
    if flags & ~3:
        return "stale"  # flags Python does not know: it recompiles
    name = os.path.basename(src)
    if flags & 1:  # hash-based (PEP 552)
        with open(src, "rb") as f:
            source_hash = importlib.util.source_hash(f.read())
        if source_hash != head[8:16]:
            if flags & 2:
                return "stale"
            return "mismatch", (
                f"unchecked-hash pyc was compiled from other code than {name}: "
                "Python runs it without checking"
            )
        return _BY_HASH if compare else None
    mtime = int.from_bytes(head[8:12], "little")
    size = int.from_bytes(head[12:16], "little")
    if mtime != (int(st.st_mtime) & 0xFFFFFFFF) or size != (st.st_size & 0xFFFFFFFF):
        return "stale"
    return _BY_HEADER if compare else None
