"""A scan of a target's files (digest, size and mode of each, by its stat cache) and its comparison
with stored manifests, next to the files: only the differences go back to the controller.
Standard library only (shipped to hosts)."""

from __future__ import annotations

import os
import stat
from dataclasses import replace

from .answers import Comparison, ScanResult
from .disk import ALGORITHM, algorithm_of, install_records, is_managed_name, walk_files
from .manifests import Manifests
from .preflight import entry_at
from .queries import CompareRequest, ScanRequest
from .statcache import Listings, StatCache

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Dict, List, Optional, Tuple

    from .answers import Rows


def scan(
    request: ScanRequest,
    ordered: bool = True,
    pycs: Optional[List[Tuple[str, bool]]] = None,
    stats: Optional[Dict[str, os.stat_result]] = None,
    listings: Optional[Listings] = None,
) -> ScanResult:
    """Digest, size and mode of the files the request names (see ScanRequest); missing paths are left
    out, unchanged files (by the stat cache) not read. Rows come sorted by key unless not `ordered`
    (a comparison needs no order). For the tree audit, the walk also appends the bytecode it passes
    to `pycs`, each file's stat goes to `stats`, and the walked directories' listings (kept beside
    the stat cache) are `listings`, saved by the caller."""
    root, paths, walk, absolute = request.root, request.paths, request.walk, request.absolute
    cache, algorithm = request.cache, request.algorithm or ALGORITHM
    cached = StatCache(cache)
    own = listings is None
    if own and cache:
        listings = Listings(cache + ".dirs")  # each walked directory's entries
    names = dict.fromkeys(walked for rel_dir in walk for walked in walk_files(root, rel_dir, pycs, listings))
    tops = tuple(d + "/" for d in walk)
    names.update(dict.fromkeys(p for p in paths if not p.startswith(tops) and is_managed_name(p)))
    jobs: List[Tuple[str, str]] = [(rel, f"{root}/{rel}" if rel[:1] != "/" else rel) for rel in names]
    jobs.extend((key, path) for key, path in (absolute or {}).items())
    out = cached.digests(jobs, algorithm, stats)
    cached.save()
    if own and listings is not None:
        listings.save()
    return ScanResult(dict(sorted(out.items())) if ordered else out)


def compare_many(manifests: Manifests, request: CompareRequest) -> List[Comparison]:
    """Scan as `scan` does and compare with each stored manifest, one scan per hash algorithm: for
    each manifest only the differing keys, as key -> (recorded row, actual row) (None where absent)."""
    scans: Dict[str, Rows] = {}
    out = []
    for digest in request.manifests:
        rows = without_install_records(manifests.rows(request.store, digest))
        asked = in_algorithm_of(request.scan, rows)
        if asked.algorithm not in scans:
            scans[asked.algorithm] = scan(asked, False).rows  # type: ignore[index]
        out.append(comparison(rows, scans[asked.algorithm], asked))  # type: ignore[index]
    return out


def in_algorithm_of(request: ScanRequest, rows: Rows) -> ScanRequest:
    """The scan in the hash algorithm of a manifest's rows, with a stat cache of its own for another
    algorithm than the agent's."""
    algorithm = algorithm_of(next(iter(rows.values()))[0]) if rows else ALGORITHM
    cache = request.cache if algorithm == ALGORITHM or not request.cache else f"{request.cache}.{algorithm}"
    return replace(request, cache=cache, algorithm=algorithm)


def comparison(rows: Rows, actual: Rows, request: Optional[ScanRequest] = None) -> Comparison:
    """How the files found (`actual`, by the scan `request`) differ from a manifest's rows: key ->
    (recorded, actual); with the request, what stands at the path of a key the scan found no regular
    file for (a scan digests regular files only: a symbolic link or a directory there is no row)."""
    if rows == actual:  # the common case, at C speed
        return Comparison({})
    differ = {k for k, _ in rows.items() ^ actual.items()}  # rows are tuples: at C speed; few: sorted after
    pairs = {k: (rows.get(k), actual.get(k)) for k in sorted(differ)}
    standing: Dict[str, str] = {}
    if request is not None:
        for k, (old, new) in pairs.items():
            if old is not None and new is None:
                what = _standing(request.absolute.get(k) or f"{request.root}/{k}")
                if what:
                    standing[k] = what
    return Comparison(pairs, standing)


def _standing(path: str) -> Optional[str]:
    """What is at `path` when it is there and not a regular file ("a symbolic link (to X)", ...)."""
    try:
        st = os.lstat(path)
    except OSError:  # absent (or its directory is not one): removed
        return None
    return None if stat.S_ISREG(st.st_mode) else entry_at(path, st)


def without_install_records(rows: Rows) -> Rows:
    """A manifest's rows without install records (states recorded before they were left out had them)."""
    old = install_records(rows)
    if not old:
        return rows
    return {k: row for k, row in rows.items() if k not in old}
