"""The agent contract: every method a target's agent answers, its request values and its answer values.

Both sides declare it: `host.agent.Agent` (the implementation, next to the files) and
`targets.remote_agent.AgentProxy` (the controller's end of the wire), and both return the answer
values of this module, so a caller never knows which one it talks to (the requests' classes are in
queries.py). Standard library only: this module is shipped to the host with the agent. The
conversion to and from the wire's plain data is here and only here: a value's `to_wire` and
`from_wire`, `to_wire` for any call's arguments or answer, `requests_from_wire` (on the host) and
`shapes.answer_from_wire` (on the controller, which checks each answer against this contract's types).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, TypeVar

from .queries import (
    CompareRequest as CompareRequest,  # the contract's requests, re-exported
    ScanRequest as ScanRequest,
    TreeRequest as TreeRequest,
)

try:
    from typing import Protocol
except ImportError:  # Python 3.7 on an old host: the contract is then documentation only
    Protocol = object  # type: ignore[assignment]

Row = Tuple[str, int, int]  # (digest, size, mode) of one file, as StatCache.digests makes it
Rows = Dict[str, Row]  # key -> row
Pair = Tuple[Optional[Row], Optional[Row]]  # (recorded row, actual row), None where absent
Finding = Tuple[str, str, str]  # (path, kind, detail)
Removed = Tuple[str, int]  # (path, size) of a temporary file removed

A = TypeVar("A", bound="Answer")

ROLE_PREFIX = "@"  # manifest keys of role files (the unit file...) are "@unit"; the rest are paths


def _row(value: Any) -> Row:
    digest, size, mode = value
    return digest, size, mode


def _rows(doc: Dict[str, Any]) -> Rows:
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
        return cls(_rows(doc["rows"]))


@dataclass(frozen=True)
class Comparison(Answer):
    """The files that differ from one stored manifest: key -> (recorded row, actual row)."""

    pairs: Dict[str, Pair]

    @classmethod
    def from_wire(cls, doc: Dict[str, Any]) -> "Comparison":
        return cls(
            {
                k: (None if old is None else _row(old), None if new is None else _row(new))
                for k, (old, new) in doc["pairs"].items()
            }
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


_REQUESTS: Dict[str, Callable[[Dict[str, Any]], Any]] = {
    "scan": ScanRequest.from_wire,
    "compare_many": CompareRequest.from_wire,
    "audit_tree": TreeRequest.from_wire,
}


def _optional(decode: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda doc: None if doc is None else decode(doc)


# method -> how its answer is rebuilt from the wire (answers of plain data need nothing)
ANSWERS: Dict[str, Callable[[Any], Any]] = {
    "interpreter": Interpreter.from_wire,
    "interpreter_facts": InterpreterFacts.from_wire,
    "lstat": _optional(FileStat.from_wire),
    "read_changed": ChangedFiles.from_wire,
    "dist_info": _optional(DistInfo.from_wire),
    "scan": ScanResult.from_wire,
    "compare_many": lambda docs: [Comparison.from_wire(d) for d in docs],
    "manifest_rows": _rows,
    "state_dir_owner": StateDirOwner.from_wire,
    "lock": _optional(LockHolder.from_wire),
    "clean_temps": lambda docs: [(path, size) for path, size in docs],
    "audit_record": lambda docs: {name: RecordCheck.from_wire(d) for name, d in docs.items()},
    "audit_installation": RecordCheck.from_wire,
    "audit_bytecode": BytecodeCheck.from_wire,
    "installed_bytecode": BytecodeCheck.from_wire,
    "audit_tree": TreeCheck.from_wire,
    "fingerprint": Fingerprint.from_wire,
}


def to_wire(value: Any) -> Any:
    """A request or answer as plain data for the wire: a value of this module as the dict of its
    fields, inside a list or a dict too (other values pass unchanged; the wire takes tuples as lists)."""
    if isinstance(value, (Answer, ScanRequest, CompareRequest, TreeRequest)):
        return value.to_wire()
    if isinstance(value, list) and value and isinstance(value[0], Answer):
        return [v.to_wire() for v in value]
    if isinstance(value, dict) and value and isinstance(next(iter(value.values())), Answer):
        return {k: v.to_wire() for k, v in value.items()}
    return value


def requests_from_wire(method: str, args: List[Any]) -> List[Any]:
    """The arguments of a call as the agent takes them: a request rebuilt from its fields."""
    kind = _REQUESTS.get(method)
    if kind is None or not args or not isinstance(args[0], dict):
        return args
    return [kind(args[0]), *args[1:]]


class AgentContract(Protocol):
    """The near-disk half of a target. Every argument and answer is plain data (str, int, bytes,
    list, tuple, dict) or a request or answer value of this module, which `to_wire` and
    `requests_from_wire` / `shapes.answer_from_wire` carry across a process boundary."""

    # ---- the host ------------------------------------------------------------------------------
    def hostname(self) -> str: ...

    def interpreter(self) -> Interpreter: ...

    def algorithm(self) -> str: ...

    def pid(self) -> int: ...

    def hands_off(self) -> None: ...

    def watch(self, listener: Optional[Callable[[int, int, str], None]]) -> None: ...

    # ---- files ---------------------------------------------------------------------------------
    def read(self, path: str, owned: bool = False, regular: bool = False) -> bytes: ...

    def lstat(self, path: str) -> Optional[FileStat]: ...

    def realpath(self, path: str) -> str: ...

    def escaping(self, root: str, rels: List[str]) -> Dict[str, str]: ...

    def write_atomic(self, path: str, data: bytes, mode: int = 0o644) -> None: ...

    def write_new(self, path: str, data: bytes, mode: int, durable: bool = True) -> None: ...

    def sync_files(self, paths: List[str]) -> None: ...

    def obstacles(self, writes: List[str], removes: List[str]) -> Dict[str, str]: ...

    def read_changed(self, directory: str, suffix: str, known: Dict[str, Any]) -> ChangedFiles: ...

    def rename(self, src: str, dst: str, durable: bool = True) -> None: ...

    def unlink(self, path: str, durable: bool = True) -> bool: ...

    def sync_dirs(self, paths: List[str]) -> None: ...

    def listdir(self, path: str) -> List[str]: ...

    def dir_entries(self, dirs: List[str], suffixes: List[str]) -> Dict[str, Optional[Dict[str, Any]]]: ...

    def remove_bytecode(self, paths: List[str]) -> int: ...

    def missing_dirs(self, paths: List[str]) -> List[str]: ...

    def remove_empty_dirs(self, dirs: List[str]) -> List[str]: ...

    def dist_info(self, site_dirs: List[str], package: str, paths: bool = True) -> Optional[DistInfo]: ...

    # ---- scanning ------------------------------------------------------------------------------
    def scan(self, request: ScanRequest) -> ScanResult: ...

    def compare_many(self, request: CompareRequest) -> List[Comparison]: ...

    # ---- object store --------------------------------------------------------------------------
    def store_put(self, store: str, data: bytes, digest: Optional[str] = None) -> str: ...

    def store_get(self, store: str, digest: str) -> bytes: ...

    def manifest_rows(self, store: str, digest: str) -> Rows: ...

    def store_missing(self, store: str, digests: List[str]) -> List[str]: ...

    def store_damage(self, store: str) -> List[str]: ...

    def store_put_files(self, store: str, files: Dict[str, str]) -> Dict[str, str]: ...

    def stage(self, store: str, digest: str, path: str, mode: int, durable: bool = True) -> None: ...

    # ---- where the state lives -----------------------------------------------------------------
    def state_dir_owner(self, prefix: str, state_dir: str, site: str, claim: bool) -> StateDirOwner: ...

    # ---- lock ----------------------------------------------------------------------------------
    def lock(self, path: str, holder: Dict[str, Any]) -> Optional[LockHolder]: ...

    def unlock(self, path: str) -> None: ...

    def clean_temps(self, state_dir: str, store: str) -> List[Removed]: ...

    # ---- audit ---------------------------------------------------------------------------------
    def dist_infos(self, site: str) -> List[str]: ...

    def audit_record(
        self, site: str, dist_infos: List[str], cache_dir: Optional[str] = None
    ) -> Dict[str, RecordCheck]: ...

    def audit_installation(
        self, site: str, dist_info: str, cache_dir: Optional[str] = None
    ) -> RecordCheck: ...

    def audit_bytecode(
        self,
        site: str,
        cache_tag: str,
        verify: List[str],
        cache: Optional[str] = None,
        pycs_since: Optional[str] = None,
        compared: Optional[str] = None,
    ) -> BytecodeCheck: ...

    def installed_bytecode(
        self, site: str, cache_tag: str, dirs: List[str], record: str, compared: Optional[str] = None
    ) -> BytecodeCheck: ...

    def audit_tree(self, request: TreeRequest) -> TreeCheck: ...

    # ---- environment ---------------------------------------------------------------------------
    def interpreter_facts(self) -> InterpreterFacts: ...

    def fingerprint(
        self,
        sites: List[str],
        cache_root: Optional[str],
        main_site: Optional[str] = None,
        parts: Optional[List[str]] = None,
        managed: Optional[str] = None,
        stdlib: Optional[List[str]] = None,
    ) -> Fingerprint: ...
