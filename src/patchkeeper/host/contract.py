"""The agent contract: every method a target's agent answers, and the requests of its larger calls.

Both sides declare it: `host.agent.Agent` (the implementation, next to the files) and
`targets.remote_agent.AgentProxy` (the controller's end of the wire). Standard library only: this
module is shipped to the host with the agent. A request value crosses the wire as a dict of its
fields (`as_wire`) and is rebuilt on the other side (`requests_from_wire`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

try:
    from typing import Protocol
except ImportError:  # Python 3.7 on an old host: the contract is then documentation only
    Protocol = object  # type: ignore[assignment]

Row = List[Any]  # [digest, size, mode] of one file, as disk.entry_row makes it
Rows = Dict[str, Row]  # key -> row
Pair = List[Optional[Row]]  # [recorded row, actual row], None where absent


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
    bytecode: bool = False  # also note the bytecode the walk passes, for an audit_bytecode right after


    @classmethod
    def from_wire(cls, doc: Dict[str, Any]) -> "ScanRequest":
        return cls(root=doc["root"], paths=tuple(doc.get("paths") or ()), walk=tuple(doc.get("walk") or ()),
                   cache=doc.get("cache"), absolute=dict(doc.get("absolute") or {}), algorithm=doc.get("algorithm"),
                   bytecode=bool(doc.get("bytecode")))


@dataclass(frozen=True)
class CompareRequest:
    """Compare the files a `scan` finds with each of the stored `manifests` (digests in `store`)."""

    store: str
    manifests: Tuple[str, ...]
    scan: ScanRequest

    @classmethod
    def from_wire(cls, doc: Dict[str, Any]) -> "CompareRequest":
        return cls(store=doc["store"], manifests=tuple(doc["manifests"]), scan=ScanRequest.from_wire(doc["scan"]))


_REQUESTS: Dict[str, Callable[[Dict[str, Any]], Any]] = {"scan": ScanRequest.from_wire,
                                                          "compare_many": CompareRequest.from_wire}


def as_wire(value: Any) -> Any:
    """A request value as plain data for the wire (other values pass unchanged)."""
    return asdict(value) if isinstance(value, (ScanRequest, CompareRequest)) else value


def requests_from_wire(method: str, args: List[Any]) -> List[Any]:
    """The arguments of a call as the agent takes them: a request rebuilt from its fields."""
    kind = _REQUESTS.get(method)
    if kind is None or not args or not isinstance(args[0], dict):
        return args
    return [kind(args[0]), *args[1:]]


class AgentContract(Protocol):
    """The near-disk half of a target. Every argument and answer is plain data (str, int, bytes,
    list, dict) or a request value of this module, so calls cross a process boundary unchanged."""

    # ---- the host ------------------------------------------------------------------------------
    def hostname(self) -> str: ...

    def interpreter(self) -> Dict[str, str]: ...

    def algorithm(self) -> str: ...

    def pid(self) -> int: ...

    # ---- files ---------------------------------------------------------------------------------
    def read(self, path: str) -> bytes: ...

    def lstat(self, path: str) -> Optional[Dict[str, Any]]: ...

    def realpath(self, path: str) -> str: ...

    def escaping(self, root: str, rels: List[str]) -> Dict[str, str]: ...

    def write_atomic(self, path: str, data: bytes, mode: int = 0o644) -> None: ...

    def write_new(self, path: str, data: bytes, mode: int, durable: bool = True) -> None: ...

    def sync_files(self, paths: List[str]) -> None: ...

    def obstacles(self, writes: List[str], removes: List[str]) -> Dict[str, str]: ...

    def read_all(self, directory: str, suffix: str) -> Dict[str, bytes]: ...

    def rename(self, src: str, dst: str, durable: bool = True) -> None: ...

    def unlink(self, path: str, durable: bool = True) -> bool: ...

    def sync_dirs(self, paths: List[str]) -> None: ...

    def listdir(self, path: str) -> List[str]: ...

    def remove_bytecode(self, paths: List[str]) -> int: ...

    def missing_dirs(self, paths: List[str]) -> List[str]: ...

    def remove_empty_dirs(self, dirs: List[str]) -> List[str]: ...

    def dist_info(self, site_dirs: List[str], package: str) -> Optional[Dict[str, Any]]: ...

    # ---- scanning ------------------------------------------------------------------------------
    def scan(self, request: ScanRequest) -> Rows: ...

    def compare_many(self, request: CompareRequest) -> List[Dict[str, Pair]]: ...

    # ---- object store --------------------------------------------------------------------------
    def store_put(self, store: str, data: bytes, digest: Optional[str] = None) -> str: ...

    def store_get(self, store: str, digest: str) -> bytes: ...

    def manifest_rows(self, store: str, digest: str) -> Rows: ...

    def store_missing(self, store: str, digests: List[str]) -> List[str]: ...

    def store_damage(self, store: str) -> List[str]: ...

    def store_put_files(self, store: str, files: Dict[str, str]) -> Dict[str, str]: ...

    def stage(self, store: str, digest: str, path: str, mode: int, durable: bool = True) -> None: ...

    # ---- where the state lives -----------------------------------------------------------------
    def state_dir_owner(self, prefix: str, state_dir: str, site: str, claim: bool) -> Dict[str, Optional[str]]: ...

    # ---- lock ----------------------------------------------------------------------------------
    def lock(self, path: str, holder: Dict[str, Any]) -> Optional[Dict[str, Any]]: ...

    def unlock(self, path: str) -> None: ...

    def clean_temps(self, state_dir: str, store: str) -> List[List[Any]]: ...

    # ---- audit ---------------------------------------------------------------------------------
    def dist_infos(self, site: str) -> List[str]: ...

    def audit_record(self, site: str, dist_infos: List[str],
                     cache_dir: Optional[str] = None) -> Dict[str, Dict[str, Any]]: ...

    def audit_bytecode(self, site: str, cache_tag: str, verify: List[str],
                       cache: Optional[str] = None) -> Dict[str, Any]: ...

    # ---- environment ---------------------------------------------------------------------------
    def interpreter_facts(self) -> Dict[str, Any]: ...

    def fingerprint(self, sites: List[str], cache_root: Optional[str], main_site: Optional[str] = None,
                    parts: Optional[List[str]] = None, managed: Optional[str] = None) -> Dict[str, Any]: ...
