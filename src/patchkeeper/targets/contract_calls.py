"""The agent contract as calls: each method of `host.contract.AgentContract` one call of its name
with its arguments, its answer cast to the type the contract declares (the answer was rebuilt and
checked against that type before: shapes.answer_from_wire). AgentProxy makes the calls, over the wire.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, cast

from ..host import contract as c


class ContractCalls(c.AgentContract):
    """The agent contract, method by method, each one `_call`."""

    @abstractmethod
    def _call(self, method: str, *args: Any) -> Any:
        """The answer of one call of `method` on the agent, rebuilt as the agent's own value."""

    def hostname(self) -> str:
        return cast(str, self._call("hostname"))

    def interpreter(self) -> c.Interpreter:
        return cast("c.Interpreter", self._call("interpreter"))

    def algorithm(self) -> str:
        return cast(str, self._call("algorithm"))

    def pid(self) -> int:
        return cast(int, self._call("pid"))

    def hands_off(self) -> None:
        self._call("hands_off")

    def read(self, path: str, owned: bool = False, regular: bool = False) -> bytes:
        return cast(bytes, self._call("read", path, owned, regular))

    def lstat(self, path: str) -> c.FileStat | None:
        return cast("c.FileStat | None", self._call("lstat", path))

    def realpath(self, path: str) -> str:
        return cast(str, self._call("realpath", path))

    def escaping(self, root: str, rels: list[str]) -> dict[str, str]:
        return cast("dict[str, str]", self._call("escaping", root, rels))

    def write_atomic(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._call("write_atomic", path, data, mode)

    def write_new(self, path: str, data: bytes, mode: int, durable: bool = True) -> None:
        self._call("write_new", path, data, mode, durable)

    def sync_files(self, paths: list[str]) -> None:
        self._call("sync_files", paths)

    def obstacles(self, writes: list[str], removes: list[str]) -> dict[str, str]:
        return cast("dict[str, str]", self._call("obstacles", writes, removes))

    def read_changed(self, directory: str, suffix: str, known: dict[str, Any]) -> c.ChangedFiles:
        return cast("c.ChangedFiles", self._call("read_changed", directory, suffix, known))

    def rename(self, src: str, dst: str, durable: bool = True) -> None:
        self._call("rename", src, dst, durable)

    def unlink(self, path: str, durable: bool = True) -> bool:
        return cast(bool, self._call("unlink", path, durable))

    def sync_dirs(self, paths: list[str]) -> None:
        self._call("sync_dirs", paths)

    def listdir(self, path: str) -> list[str]:
        return cast("list[str]", self._call("listdir", path))

    def dir_entries(self, dirs: list[str], suffixes: list[str]) -> dict[str, dict[str, Any] | None]:
        return cast("dict[str, dict[str, Any] | None]", self._call("dir_entries", dirs, suffixes))

    def remove_bytecode(self, paths: list[str]) -> int:
        return cast(int, self._call("remove_bytecode", paths))

    def missing_dirs(self, paths: list[str]) -> list[str]:
        return cast("list[str]", self._call("missing_dirs", paths))

    def remove_empty_dirs(self, dirs: list[str]) -> list[str]:
        return cast("list[str]", self._call("remove_empty_dirs", dirs))

    def dist_info(self, site_dirs: list[str], package: str, paths: bool = True) -> c.DistInfo | None:
        return cast("c.DistInfo | None", self._call("dist_info", site_dirs, package, paths))

    def scan(self, request: c.ScanRequest) -> c.ScanResult:
        return cast("c.ScanResult", self._call("scan", request))

    def compare_many(self, request: c.CompareRequest) -> list[c.Comparison]:
        return cast("list[c.Comparison]", self._call("compare_many", request))

    def store_put(self, store: str, data: bytes, digest: str | None = None) -> str:
        return cast(str, self._call("store_put", store, data, digest))

    def store_get(self, store: str, digest: str) -> bytes:
        return cast(bytes, self._call("store_get", store, digest))

    def manifest_rows(self, store: str, digest: str) -> c.Rows:
        return cast("c.Rows", self._call("manifest_rows", store, digest))

    def store_missing(self, store: str, digests: list[str]) -> list[str]:
        return cast("list[str]", self._call("store_missing", store, digests))

    def store_damage(self, store: str) -> list[str]:
        return cast("list[str]", self._call("store_damage", store))

    def store_put_files(self, store: str, files: dict[str, str]) -> dict[str, str]:
        return cast("dict[str, str]", self._call("store_put_files", store, files))

    def stage(self, store: str, digest: str, path: str, mode: int, durable: bool = True) -> None:
        self._call("stage", store, digest, path, mode, durable)

    def state_dir_owner(self, prefix: str, state_dir: str, site: str, claim: bool) -> c.StateDirOwner:
        return cast("c.StateDirOwner", self._call("state_dir_owner", prefix, state_dir, site, claim))

    def lock(self, path: str, holder: dict[str, Any]) -> c.LockHolder | None:
        return cast("c.LockHolder | None", self._call("lock", path, holder))

    def unlock(self, path: str) -> None:
        self._call("unlock", path)

    def clean_temps(self, state_dir: str, store: str) -> list[c.Removed]:
        return cast("list[c.Removed]", self._call("clean_temps", state_dir, store))

    def dist_infos(self, site: str) -> list[str]:
        return cast("list[str]", self._call("dist_infos", site))

    def audit_record(
        self, site: str, dist_infos: list[str], cache_dir: str | None = None, also: str | None = None
    ) -> dict[str, c.RecordCheck]:
        return cast("dict[str, c.RecordCheck]", self._call("audit_record", site, dist_infos, cache_dir, also))

    def audit_installation(self, site: str, dist_info: str, cache_dir: str | None = None) -> c.RecordCheck:
        return self._call("audit_installation", site, dist_info, cache_dir)  # type: ignore[no-any-return]

    def audit_bytecode(
        self,
        site: str,
        cache_tag: str,
        verify: list[str],
        cache: str | None = None,
        pycs_since: str | None = None,
        compared: str | None = None,
    ) -> c.BytecodeCheck:
        return cast(
            "c.BytecodeCheck",
            self._call("audit_bytecode", site, cache_tag, verify, cache, pycs_since, compared),
        )

    def installed_bytecode(
        self, site: str, cache_tag: str, dirs: list[str], record: str, compared: str | None = None
    ) -> c.BytecodeCheck:
        return self._call("installed_bytecode", site, cache_tag, dirs, record, compared)  # type: ignore[no-any-return]

    def audit_tree(self, request: c.TreeRequest) -> c.TreeCheck:
        return cast("c.TreeCheck", self._call("audit_tree", request))

    def interpreter_facts(self) -> c.InterpreterFacts:
        return cast("c.InterpreterFacts", self._call("interpreter_facts"))

    def fingerprint(
        self,
        sites: list[str],
        cache_root: str | None,
        main_site: str | None = None,
        parts: list[str] | None = None,
        managed: str | None = None,
        stdlib: list[str] | None = None,
        audit_seals: str | None = None,
    ) -> c.Fingerprint:
        return cast(
            "c.Fingerprint",
            self._call("fingerprint", sites, cache_root, main_site, parts, managed, stdlib, audit_seals),
        )
