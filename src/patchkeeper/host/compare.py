"""A scan of a target's files (digest, size and mode of each, by its stat cache) and its comparison
with stored manifests, next to the files: only the differences go back to the controller.
Standard library only (shipped to hosts)."""

from __future__ import annotations

from dataclasses import replace

from .contract import Comparison, CompareRequest, ScanRequest, ScanResult
from .disk import (ALGORITHM, StatCache, algorithm_of, digest_files, install_records, is_managed_name, joined,
                   split_when_idle, walk_files)
from .manifests import Manifests

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Dict, List, Optional, Sequence, Tuple

    from .contract import Rows
    from .disk import Digests


def scan(request: ScanRequest, ordered: bool = True, expected: Optional[Rows] = None) -> ScanResult:
    """Digest, size and mode of the files the request names (see ScanRequest); missing paths are left
    out, unchanged files (by the stat cache) not read. Rows come sorted by key unless not `ordered`
    (a comparison needs no order). `expected` (the recorded rows) only weighs the halves of a split:
    a file to hash costs by its size."""
    root, paths, walk, absolute = request.root, request.paths, request.walk, request.absolute
    cache, algorithm = request.cache, request.algorithm or ALGORITHM
    cached = StatCache(cache)
    listings = StatCache(cache + ".dirs") if cache else None  # each walked directory's entries
    names = dict.fromkeys(walked for rel_dir in walk for walked in walk_files(root, rel_dir, None, listings))
    tops = tuple(d + "/" for d in walk)
    names.update(dict.fromkeys(p for p in paths if not p.startswith(tops) and is_managed_name(p)))
    jobs: List[Tuple[str, str]] = [(rel, f"{root}/{rel}" if rel[:1] != "/" else rel) for rel in names]
    jobs.extend((key, path) for key, path in (absolute or {}).items())
    out: Rows = {}
    cached.take(_digests_split(jobs, cached.entries, algorithm, expected or {}), out)
    cached.save()
    if listings is not None:
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
            scans[asked.algorithm] = scan(asked, False, rows).rows  # type: ignore[index]
        out.append(comparison(rows, scans[asked.algorithm]))  # type: ignore[index]
    return out


def _halfway(jobs: Sequence[tuple[str, str]], known: dict[str, tuple[Any, ...]], expected: Rows) -> int:
    """Where to cut the jobs in two halves of about equal work: a file the stat cache knows costs an
    lstat, one to hash about as much as hashing 50 kB more than its recorded size (unknown: 0)."""
    weights = [1 if key in known else 1 + (expected[key][1] if key in expected else 0) // 50_000
               for key, _ in jobs]
    total, acc = sum(weights) / 2, 0
    for half, weight in enumerate(weights):
        if acc + weight > total:  # this job on the side that leaves the halves nearer
            return half + 1 if acc + weight - total < total - acc else half
        acc += weight
    return len(jobs)


def _digests_split(jobs: list[tuple[str, str]], known: dict[str, tuple[Any, ...]], algorithm: str,
                   expected: Rows) -> Digests:
    """disk.digest_files of the jobs; when the stat cache knows most of them (a warm scan is one lstat
    per file), split with a forked process as soon as a CPU is idle (disk.split_when_idle; halves by
    _halfway's weights), as git's preloaded index splits its lstat calls: the environment
    fingerprint's process may still be working on the other CPU when a rollback's scan begins.
    Else all of them here, where many files to hash are split by size instead (map_files: big ones
    on threads, which a forked process does not start)."""
    if 2 * len(known) < len(jobs):
        return digest_files(jobs, known, algorithm, {}, True)
    return joined(split_when_idle(lambda part: digest_files(part, known, algorithm, {}, False), jobs,
                                  lambda rest: _halfway(rest, known, expected)))


def in_algorithm_of(request: ScanRequest, rows: Rows) -> ScanRequest:
    """The scan in the hash algorithm of a manifest's rows, with a stat cache of its own for another
    algorithm than the agent's."""
    algorithm = algorithm_of(next(iter(rows.values()))[0]) if rows else ALGORITHM
    cache = request.cache if algorithm == ALGORITHM or not request.cache else f"{request.cache}.{algorithm}"
    return replace(request, cache=cache, algorithm=algorithm)


def comparison(rows: Rows, actual: Rows) -> Comparison:
    """How the files found (`actual`) differ from a manifest's rows: key -> (recorded, actual)."""
    if rows == actual:  # the common case, at C speed
        return Comparison({})
    differ = {k for k, _ in rows.items() ^ actual.items()}  # rows are tuples: at C speed; few: sorted after
    return Comparison({k: (rows.get(k), actual.get(k)) for k in sorted(differ)})


def without_install_records(rows: Rows) -> Rows:
    """A manifest's rows without install records (states recorded before they were left out had them)."""
    old = install_records(rows)
    if not old:
        return rows
    return {k: row for k, row in rows.items() if k not in old}
