"""One audit of a site dir (Agent.audit_tree): the managed package against its recorded manifest,
the bytecode below the site dir, other distributions against their RECORD and the native libraries,
with one walk of the package; the answer sealed while nothing it read has changed (seal.py). It also
counts the package's files that share their inode with others (hard links, as uv installs them: a
link count moves a file's ctime, so a sealed count holds while the seal does), from the scan's stats.
Standard library only (shipped to hosts).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from itertools import chain

from . import compare, fingerprint, seal
from .answers import BytecodeCheck, RecordCheck, TreeCheck
from .bytecode import VerdictCache, _judge, _tally, _top_pycs, _walk_pyc, recompiled_sources, settle
from .disk import start_threads
from .distcheck import SEALS, Covered, RecordSeals, shared_files
from .manifests import Manifests
from .pycompare import Compared
from .queries import TreeRequest
from .statcache import Listings
from .store import Store

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs a command's start about 10 ms)
    from typing import Any, Callable, Dict, List, Tuple


def check(request: TreeRequest, manifests: Manifests, store: Store) -> TreeCheck:
    """The package's files against the stored manifest, every pyc below the site dir (those of
    sources that differ, or that a RECORD check found changed, recompiled and compared), the
    distributions of `request.records` against their RECORD and the native part. With a `seal`, the
    tree's answer is given again while every entry it read is unchanged (the RECORD checks, from their
    own seals, and the native part are read as always), and sealed anew once the scan's stat cache
    exists (a cold audit pays no walk for it). Every pyc written since `request.pycs_since` is
    recompiled and compared whatever its header says (bytecode._judge)."""
    vouched = _Handed()
    native_of = _native_started(request, vouched.get)
    try:
        return _check(request, manifests, store, native_of, vouched)
    finally:  # joined whatever happened; a native error is _check's to raise (it asks for the answer)
        vouched.give(None)  # (no-op once given) after a failure: the native part ends, reading nothing more
        try:
            native_of()
        except Exception:
            pass


class _Handed:
    """A value one thread gives once and another waits for."""

    def __init__(self) -> None:
        self._given = threading.Event()
        self._value: Dict[str, List[Any]] | None = None

    def give(self, value: Dict[str, List[Any]] | None) -> None:
        if not self._given.is_set():
            self._value = value
            self._given.set()

    def get(self) -> Dict[str, List[Any]] | None:
        self._given.wait()
        return self._value


def _native_started(
    request: TreeRequest, vouched: Callable[[], Dict[str, List[Any]] | None]
) -> Callable[[], Any]:
    """The native part (fingerprint.native), started on a thread of its own beside the RECORD
    checks: it parses the shared objects and resolves their libraries meanwhile, then takes the
    digests of the libraries the checks read from them (`vouched`) instead of reading 3.2 GB again
    on a first audit of the serving venv (fingerprint.Resolver)."""
    if not request.native_sites:
        return lambda: None

    done = start_threads(
        lambda sites: fingerprint.native(sites, request.native_cache, vouched),
        [list(request.native_sites)],
        1,
    )
    return lambda: done()[0]


def _check(
    request: TreeRequest, manifests: Manifests, store: Store, native_of: Callable[[], Any], vouched: _Handed
) -> TreeCheck:
    scan, root = request.scan, request.scan.root
    records, covered = _records(root, list(request.records), request.record_cache, request.record_also)
    vouched.give(fingerprint.vouched_libraries(root, records))
    key = _key(request, records) + (covered.digest,)
    with_records = {name: RecordCheck.from_wire(r) for name, r in records.items()}
    if request.seal:
        sealed = seal.load(request.seal, key)
        if sealed is not None:
            return TreeCheck.from_wire({**sealed, "records": records, "native": native_of()})
    taken = None
    if request.seal and scan.cache and os.path.exists(scan.cache):  # identities first, then the reads
        named = [p if p[:1] == "/" else f"{root}/{p}" for p in scan.paths]
        named += [*scan.absolute.values(), store.loose_path(request.manifest)]
        # the stored manifest too: never believed over it; the files the RECORD checks stat'ed are
        # left to them (their identities in the key: covered.digest), once those are old enough
        taken = (
            seal.entries(root, scan.walk, named, covered.paths()) if covered.settled(time.time_ns()) else None
        )
    expected = compare.without_install_records(manifests.rows(request.store, request.manifest))
    scan = compare.in_algorithm_of(scan, expected)
    pycs: List[Tuple[str, bool]] = []
    stats: Dict[str, os.stat_result] = {}
    listings = Listings(scan.cache + ".dirs") if scan.cache else None
    rows = compare.scan(scan, False, pycs, stats, listings).rows
    if listings is not None:
        listings.save()
    comparison = compare.comparison(expected, rows, scan)
    found = pycs + _beside(root, scan.walk, request.bytecode_cache)
    verify = set(request.verify) | recompiled_sources(f for r in records.values() for f in r["findings"])
    verify.update(
        k
        for k, (_, new) in comparison.pairs.items()
        if new is not None and k.endswith(".py") and not k.startswith(("../", "@"))
    )
    verdicts = VerdictCache(request.bytecode_cache)
    judge = _judge(root, request.cache_tag, frozenset(verify), stats, verdicts, since(request.pycs_since))
    memo = Compared(request.compared)
    outcomes = settle(root, found, [judge(rel, in_cache) for rel, in_cache in found], memo)
    memo.save(rel for rel, in_cache in found if in_cache)
    bytecode = BytecodeCheck.from_wire(_tally(found, outcomes, verdicts))
    linked = sorted((key, st.st_nlink) for key, st in stats.items() if st.st_nlink > 1 and key[:1] != "@")
    answer = TreeCheck(len(rows), comparison, bytecode, linked=len(linked), linked_examples=tuple(linked[:5]))
    if taken is not None and request.seal:
        seal.save(request.seal, key, taken, answer.to_wire())
    return replace(answer, records=with_records, native=native_of())


def checked_records(
    site: str, dist_infos: List[str], cache_dir: str | None, also: str | None = None
) -> Dict[str, Dict[str, Any]]:
    """check_record of each distribution, sealed in `cache_dir` (RecordSeals; `also`: another
    caller's seals, read only), a file two of them install told apart from a change (distcheck.shared_files)."""
    return _records(site, dist_infos, cache_dir, also)[0]


def _records(
    site: str, dist_infos: List[str], cache_dir: str | None, also: str | None = None
) -> Tuple[Dict[str, Dict[str, Any]], Covered]:
    """checked_records, and what those checks stat'ed (distcheck.Covered)."""
    seals = RecordSeals(os.path.join(cache_dir, SEALS), also) if cache_dir else RecordSeals(None)
    try:
        return shared_files(site, seals.checked(site, dist_infos, cache_dir)), seals.covered()
    finally:
        seals.save()


def _beside(root: str, walk: Tuple[str, ...], bytecode_cache: str | None) -> List[Tuple[str, bool]]:
    """The bytecode below the site dir outside the package's directories (the scan's walk yields
    the package's own), with the listings of the directories walked kept beside the verdicts."""
    listings = Listings(bytecode_cache + ".dirs") if bytecode_cache else None
    skip = frozenset(walk)
    found = list(
        chain(_top_pycs(root), _walk_pyc(root, skip, listings))
        if skip
        else _walk_pyc(root, listings=listings)
    )
    if listings is not None:
        listings.save()
    return found


def _key(request: TreeRequest, records: Dict[str, Any]) -> Tuple[Any, ...]:
    """What a tree's seal is for: the scan, the manifest, and every source whose pycs are
    recompiled (those named, and those the RECORD checks found changed)."""
    verify = set(request.verify) | recompiled_sources(f for r in records.values() for f in r["findings"])
    return (
        request.scan.to_wire(),
        request.store,
        request.manifest,
        request.cache_tag,
        tuple(sorted(verify)),
        request.pycs_since,
        since(request.pycs_since),
        "linked",
        "standing",
    )  # (answers sealed before they counted hard links or said what stands at a removed file's path: not given again)


def since(marker: str | None) -> int | None:
    """When the write-once file `marker` was written (ns, the host's clock); 0 when it is gone or
    named "" (every pyc is then new: `audit --rehash`); None without one (before any baseline)."""
    if marker is None:
        return None
    try:
        return os.stat(marker).st_mtime_ns if marker else 0
    except OSError:
        return 0
