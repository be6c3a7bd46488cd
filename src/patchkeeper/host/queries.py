"""What a caller asks of an agent in one value: a scan of files, a comparison with stored manifests,
a tree audit. Part of the agent contract (contract.py re-exports them), shipped to hosts with it;
standard library only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple


@dataclass(frozen=True)
class ScanRequest:
    """Which files a scan digests: `paths` (relative to `root`) and every file below the `walk`
    directories, plus the `absolute` key -> path extras; `cache` is the stat cache to use, and
    `algorithm` asks for another hash than the agent's own (give it its own `cache`)."""

    root: str
    paths: Tuple[str, ...] = ()
    walk: Tuple[str, ...] = ()
    cache: Optional[str] = None
    absolute: Dict[str, str] = field(default_factory=dict)
    algorithm: Optional[str] = None

    def to_wire(self) -> Dict[str, Any]:
        return {
            "root": self.root,
            "paths": self.paths,
            "walk": self.walk,
            "cache": self.cache,
            "absolute": self.absolute,
            "algorithm": self.algorithm,
        }

    @classmethod
    def from_wire(cls, doc: Dict[str, Any]) -> "ScanRequest":
        return cls(
            root=doc["root"],
            paths=tuple(doc.get("paths") or ()),
            walk=tuple(doc.get("walk") or ()),
            cache=doc.get("cache"),
            absolute=dict(doc.get("absolute") or {}),
            algorithm=doc.get("algorithm"),
        )


@dataclass(frozen=True)
class CompareRequest:
    """Compare the files a `scan` finds with each of the stored `manifests` (digests in `store`)."""

    store: str
    manifests: Tuple[str, ...]
    scan: ScanRequest

    def to_wire(self) -> Dict[str, Any]:
        return {"store": self.store, "manifests": self.manifests, "scan": self.scan.to_wire()}

    @classmethod
    def from_wire(cls, doc: Dict[str, Any]) -> "CompareRequest":
        return cls(
            store=doc["store"], manifests=tuple(doc["manifests"]), scan=ScanRequest.from_wire(doc["scan"])
        )


@dataclass(frozen=True)
class TreeRequest:
    """An audit of the managed package in one pass: its files against the stored `manifest`, and
    the bytecode below its site dir (`scan.root`) for `cache_tag`, recompiling the pycs of `verify`
    (sources relative to the site dir) and of every source that differs; `bytecode_cache` keeps
    clean pycs' verdicts and `seal` the whole answer while nothing it read has changed (seal.py).
    The distributions named in `records` (dist-info names in the site dir) are checked against
    their RECORD in the same call (audit_record, one stat cache each in `record_cache`), and the
    sources they find changed are recompiled and compared too; with `native_sites`, the shared
    objects below them are read as the fingerprint's native part is (its caches in `native_cache`).
    Every pyc written or replaced since `pycs_since` was (a write-once file on the host: the
    baseline's ledger entry, so the host's own clock is compared with the host's) is recompiled and
    compared whatever its header says (once per identity: `bytecode_cache` keeps that verdict); when
    that file is gone, or `pycs_since` is "" (`audit --rehash`), every pyc is. `compared` keeps the
    pairs of source and pyc bytes found to hold the same code (pycompare.Compared: keyed by the
    bytes, so `audit --rehash` reads it too). `record_also`: the fingerprint's RECORD seals of the
    site dir, whose answers that still hold are taken (distcheck.RecordSeals' `also`)."""

    store: str
    manifest: str
    scan: ScanRequest
    cache_tag: str
    verify: Tuple[str, ...] = ()
    bytecode_cache: Optional[str] = None
    seal: Optional[str] = None
    records: Tuple[str, ...] = ()
    record_cache: Optional[str] = None
    native_sites: Tuple[str, ...] = ()
    native_cache: Optional[str] = None
    pycs_since: Optional[str] = None
    compared: Optional[str] = None
    record_also: Optional[str] = None

    def to_wire(self) -> Dict[str, Any]:
        return {
            "store": self.store,
            "manifest": self.manifest,
            "scan": self.scan.to_wire(),
            "cache_tag": self.cache_tag,
            "verify": self.verify,
            "bytecode_cache": self.bytecode_cache,
            "seal": self.seal,
            "records": self.records,
            "record_cache": self.record_cache,
            "native_sites": self.native_sites,
            "native_cache": self.native_cache,
            "pycs_since": self.pycs_since,
            "compared": self.compared,
            "record_also": self.record_also,
        }

    @classmethod
    def from_wire(cls, doc: Dict[str, Any]) -> "TreeRequest":
        return cls(
            doc["store"],
            doc["manifest"],
            ScanRequest.from_wire(doc["scan"]),
            doc["cache_tag"],
            tuple(doc.get("verify") or ()),
            doc.get("bytecode_cache"),
            doc.get("seal"),
            tuple(doc.get("records") or ()),
            doc.get("record_cache"),
            tuple(doc.get("native_sites") or ()),
            doc.get("native_cache"),
            doc.get("pycs_since"),
            doc.get("compared"),
            doc.get("record_also"),
        )
