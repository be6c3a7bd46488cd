"""The agent contract: every method a target's agent answers, its request values and its answer values.

Both sides declare it: `host.agent.Agent` (the implementation, next to the files) and
`targets.remote_agent.AgentProxy` (the controller's end of the wire), and both return the answer
values, so a caller never knows which one it talks to (the requests' classes are in queries.py, the
answers' in answers.py; both are re-exported here). Standard library only: this module is shipped
to the host with the agent. The conversion to and from the wire's plain data is here and in the
values: a value's `to_wire` and `from_wire`, `to_wire` for any call's arguments or answer,
`requests_from_wire` (on the host) and `shapes.answer_from_wire` (on the controller, which checks
each answer against this contract's types).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from .answers import (  # the contract's answers, re-exported
    Answer as Answer,
    BytecodeCheck as BytecodeCheck,
    ChangedFiles as ChangedFiles,
    Comparison as Comparison,
    DistInfo as DistInfo,
    FileStat as FileStat,
    Fingerprint as Fingerprint,
    Interpreter as Interpreter,
    InterpreterFacts as InterpreterFacts,
    LockHolder as LockHolder,
    RecordCheck as RecordCheck,
    Removed as Removed,
    Row as Row,
    Rows as Rows,
    ScanResult as ScanResult,
    StateDirOwner as StateDirOwner,
    TreeCheck as TreeCheck,
    rows_from_wire,
)
from .queries import (
    CompareRequest as CompareRequest,  # the contract's requests, re-exported
    ScanRequest as ScanRequest,
    TreeRequest as TreeRequest,
)

try:
    from typing import Protocol
except ImportError:  # Python 3.7 on an old host: the contract is then documentation only
    Protocol = object  # type: ignore[assignment]

ROLE_PREFIX = "@"  # manifest keys of role files (the unit file...) are "@unit"; the rest are paths


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
    "manifest_rows": rows_from_wire,
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
    """A request or answer as plain data for the wire: a value of the contract as the dict of its
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
        self, site: str, dist_infos: List[str], cache_dir: Optional[str] = None, also: Optional[str] = None
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
        audit_seals: Optional[str] = None,
    ) -> Fingerprint: ...
