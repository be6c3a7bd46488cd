"""What an agent answers, as values: each with its `to_wire` and `from_wire`, and the rows of files
they carry. Part of the agent contract (contract.py re-exports them, beside the requests of
queries.py), shipped to hosts with it; standard library only."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, Optional, Tuple, Type, TypeVar

Row = Tuple[str, int, int]  # (digest, size, mode) of one file, as StatCache.digests makes it
Rows = Dict[str, Row]  # key -> row
Pair = Tuple[Optional[Row], Optional[Row]]  # (recorded row, actual row), None where absent
Finding = Tuple[str, str, str]  # (path, kind, detail)
Removed = Tuple[str, int]  # (path, size) of a temporary file removed

A = TypeVar("A", bound="Answer")


def _row(value: Any) -> Row:
    digest, size, mode = value
    return digest, size, mode


def rows_from_wire(doc: Dict[str, Any]) -> Rows:
    """A manifest's rows from the wire (lists there) as tuples."""
    return {k: (v[0], v[1], v[2]) for k, v in doc.items()}


class Answer:
    """An answer value: on the wire, a dict of its fields (values of plain data); from the wire,
    rebuilt from the fields it knows (a field the other side does not send keeps its default)."""

    def to_wire(self) -> Dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_wire(cls: Type[A], doc: Dict[str, Any]) -> A:
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in doc.items() if k in names})


@dataclass(frozen=True)
class Interpreter(Answer):
    """The target's Python: its prefix, site directories, version and bytecode cache tag."""

    prefix: str
    purelib: str
    platlib: str
    python: str  # "3.12.4"
    cache_tag: Optional[str] = None  # "cpython-312"


@dataclass(frozen=True)
class InterpreterFacts(Answer):
    """Implementation, version, tags, libc and site dirs of the target's Python (host/interp.py)."""

    implementation: str
    version: str
    tags: Dict[str, str]  # interpreter, abi, platform, ext_suffix
    machine: str
    libc: Dict[str, str]  # name, version
    where: Dict[str, Any]  # executable, prefix, sites, stdlib


@dataclass(frozen=True)
class FileStat(Answer):
    """What `lstat` says of a path (the link itself, not what it points to)."""

    size: int
    mode: int  # permission bits
    is_file: bool
    is_dir: bool
    is_link: bool
    mtime_ns: int


@dataclass(frozen=True)
class ChangedFiles(Answer):
    """The files of a directory that differ from what the caller remembers (see read_changed): their
    bytes, their identity (size, mtime_ns, ctime_ns, inode, device; None: too fresh to remember), the
    remembered names that are gone, and the files not read because they are not to be trusted (why)."""

    files: Dict[str, bytes]
    identities: Dict[str, Optional[Tuple[int, int, int, int, int]]]
    gone: Tuple[str, ...] = ()
    untrusted: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, doc: Dict[str, Any]) -> "ChangedFiles":
        return cls(
            doc["files"],
            {
                name: None if i is None else (i[0], i[1], i[2], i[3], i[4])
                for name, i in doc["identities"].items()
            },
            tuple(doc.get("gone", ())),
            dict(doc.get("untrusted") or {}),
        )


@dataclass(frozen=True)
class DistInfo(Answer):
    """An installed distribution: where its metadata is, its version, the paths its RECORD lists
    (left empty when not asked for), their layout (host/distinfo.layout) and what identifies this
    installation of it (host/distinfo.installation: installer, RECORD's size and mtime, a digest of
    the release's rows)."""

    site: str
    dist_info: str  # the directory's name, in `site`
    version: str
    record: Tuple[str, ...]  # relative to `site`
    tops: Tuple[str, ...] = ()
    loose: Tuple[str, ...] = ()
    installation: Optional[Dict[str, Any]] = None

    @classmethod
    def from_wire(cls, doc: Dict[str, Any]) -> "DistInfo":
        return cls(
            doc["site"],
            doc["dist_info"],
            doc["version"],
            tuple(doc["record"]),
            tuple(doc.get("tops", ())),
            tuple(doc.get("loose", ())),
            doc.get("installation"),
        )


@dataclass(frozen=True)
class ScanResult(Answer):
    """The files a scan found: key -> (digest, size, mode); missing files are left out."""

    rows: Rows

    @classmethod
    def from_wire(cls, doc: Dict[str, Any]) -> "ScanResult":
        return cls(rows_from_wire(doc["rows"]))


@dataclass(frozen=True)
class Comparison(Answer):
    """The files that differ from one stored manifest: key -> (recorded row, actual row); and, for a
    key recorded as a file and gone as one, what stands at its path instead when something does
    (`standing`: key -> "a symbolic link (to X)", "a directory", ...: preflight.kind_of)."""

    pairs: Dict[str, Pair]
    standing: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, doc: Dict[str, Any]) -> "Comparison":
        return cls(
            {
                k: (None if old is None else _row(old), None if new is None else _row(new))
                for k, (old, new) in doc["pairs"].items()
            },
            dict(doc.get("standing") or {}),
        )


@dataclass(frozen=True)
class StateDirOwner(Answer):
    """The real paths of a state dir and a site dir, and the state dir the venv is managed from
    (None: its marker names none)."""

    state_dir: str
    site: str
    owner: Optional[str]


@dataclass(frozen=True)
class LockHolder(Answer):
    """Who holds a target's lock: a process (`pid` is "?" when the lock file is damaged) on a host,
    running a command since a time (seconds since the epoch)."""

    pid: Any
    host: str
    command: str
    since: float = 0.0

    @classmethod
    def from_wire(cls, doc: Dict[str, Any]) -> "LockHolder":
        return cls(
            doc.get("pid", "?"), str(doc.get("host", "?")), str(doc.get("command", "?")), doc.get("since", 0)
        )


@dataclass(frozen=True)
class RecordCheck(Answer):
    """An installed distribution against its RECORD: how many files were checked, what differs, a
    note when it could not be checked, and what the distribution is (distinfo.record_identity)."""

    files: int
    findings: Tuple[Finding, ...]
    note: Optional[str] = None
    identity: Optional[str] = None

    @classmethod
    def from_wire(cls, doc: Dict[str, Any]) -> "RecordCheck":
        return cls(
            doc["files"],
            tuple((p, k, d) for p, k, d in doc["findings"]),
            doc.get("note"),
            doc.get("identity"),
        )


@dataclass(frozen=True)
class BytecodeCheck(Answer):
    """The bytecode below a site dir: pycs checked, __pycache__ entries without source, stale pycs
    (Python recompiles them) and the pycs that run other code than their source."""

    pycs: int
    orphans: int
    stale: int
    findings: Tuple[Finding, ...]

    @classmethod
    def from_wire(cls, doc: Dict[str, Any]) -> "BytecodeCheck":
        return cls(doc["pycs"], doc["orphans"], doc["stale"], tuple((p, k, d) for p, k, d in doc["findings"]))


@dataclass(frozen=True)
class Fingerprint(Answer):
    """The host's part of an environment fingerprint (host/fingerprint.py): the hash its digests
    use and the parts asked for (None: not taken), each plain JSON-able data kept as it is."""

    algorithm: str
    system: Optional[Dict[str, Any]] = None
    distributions: Optional[Dict[str, Any]] = None
    native: Optional[Dict[str, Any]] = None
    gpu: Optional[Dict[str, Any]] = None
    startup: Optional[Dict[str, Any]] = None

    def to_wire(self) -> Dict[str, Any]:
        return {k: v for k, v in super().to_wire().items() if v is not None}


@dataclass(frozen=True)
class TreeCheck(Answer):
    """A TreeRequest's answer: the files scanned, how they differ from the manifest, the bytecode,
    each distribution of `records` against its RECORD (by dist-info name), the fingerprint's
    native part of `native_sites` (None when not asked for), and how many of the package's files
    share their inode with other files (hard links, as uv installs them), with a few of them and
    their link counts."""

    files: int
    comparison: Comparison
    bytecode: BytecodeCheck
    records: Dict[str, RecordCheck] = field(default_factory=dict)
    native: Optional[Dict[str, Any]] = None
    linked: int = 0
    linked_examples: Tuple[Tuple[str, int], ...] = ()

    def to_wire(self) -> Dict[str, Any]:
        return {
            "files": self.files,
            "comparison": self.comparison.to_wire(),
            "bytecode": self.bytecode.to_wire(),
            "records": {name: r.to_wire() for name, r in self.records.items()},
            "native": self.native,
            "linked": self.linked,
            "linked_examples": self.linked_examples,
        }

    @classmethod
    def from_wire(cls, doc: Dict[str, Any]) -> "TreeCheck":
        return cls(
            doc["files"],
            Comparison.from_wire(doc["comparison"]),
            BytecodeCheck.from_wire(doc["bytecode"]),
            {name: RecordCheck.from_wire(r) for name, r in (doc.get("records") or {}).items()},
            doc.get("native"),
            doc.get("linked", 0),
            tuple((key, n) for key, n in doc.get("linked_examples") or ()),
        )
