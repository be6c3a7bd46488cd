"""Scanning a target's managed files: the package (RECORD plus a walk of its top directories) and roles."""

from __future__ import annotations

import posixpath

from ..host.contract import CompareRequest, ScanRequest
from ..records.manifest import Entry, Manifest
from ..targets import Target


def _cache(target: Target) -> str:
    return posixpath.join(target.info.state_dir, "statcache.json")


def scan_request(target: Target, cached: bool = True) -> ScanRequest:
    """Every managed file, with the target's own stat cache (unless not `cached`: every file hashed)."""
    return _scan_request(target, _cache(target) if cached else None)


def _scan_request(target: Target, cache: str | None = None, algorithm: str | None = None) -> ScanRequest:
    """Every managed file: the package (RECORD plus a walk of its top directories) and the roles."""
    info = target.info
    return ScanRequest(
        info.site, tuple(info.loose_paths()), tuple(info.top_dirs()), cache, info.role_keys(), algorithm
    )


def scan_all(target: Target, algorithm: str | None = None) -> Manifest:
    """Every managed file now: the package (RECORD plus a walk of its top directories) and roles.

    `algorithm` asks for digests in another hash than the target's own (to compare two targets)."""
    if algorithm and algorithm != target.algorithm:
        request = _scan_request(target, f"{_cache(target)}.{algorithm}", algorithm)
    else:
        request = _scan_request(target, _cache(target))
    return Manifest.from_scan(target.agent.scan(request).rows)


def compare(target: Target, *manifest_digests: str) -> list[dict[str, tuple[Entry | None, Entry | None]]]:
    """For each recorded manifest, every managed file that differs from it, compared on the target
    itself with one scan: key -> (recorded entry, actual entry). Only differences cross the network."""
    request = CompareRequest(
        target.info.store, tuple(manifest_digests), _scan_request(target, _cache(target))
    )
    results = target.agent.compare_many(request)
    return [
        {
            k: (Entry.of(old) if old else None, Entry.of(new) if new else None)
            for k, (old, new) in c.pairs.items()
        }
        for c in results
    ]
