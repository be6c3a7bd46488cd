"""The near-disk half of a target: the methods the controller calls, locally or on a host.

Every argument and result is plain data or a request or answer value of contract.py, which
carries them across a process boundary; the work itself is in fileops.py, disk.py, store.py,
distcheck.py and bytecode.py, which, like this module, use the standard library only (blake3 when
importable).
"""

from __future__ import annotations

import os
import sys
import sysconfig
import time
from typing import Any, Callable

from . import compare, fileops, fingerprint, interp, progress, seal, statelock, treecheck, unitdirs
from .bytecode import check_bytecode, installed_bytecode
from .contract import (
    AgentContract,
    BytecodeCheck,
    ChangedFiles,
    CompareRequest,
    Comparison,
    DistInfo,
    FileStat,
    Fingerprint,
    Interpreter,
    InterpreterFacts,
    LockHolder,
    RecordCheck,
    Removed,
    Rows,
    ScanRequest,
    ScanResult,
    StateDirOwner,
    TreeCheck,
    TreeRequest,
)
from .disk import (
    ALGORITHM,
    TEMP_PREFIX,
    hostname,
    normalize_name,
    remove_stale_temps,
    write_atomic,
)
from .distcheck import check_record
from .distinfo import installation, installed_version, layout, record_paths
from .manifests import Manifests
from .preflight import obstacles
from .statcache import read_changed, write_caches
from .store import Store

_DIST_INFOS: dict[tuple[Any, ...], tuple[list[str], bytes, DistInfo | None]] = {}  # Agent.dist_info's answers


class Agent(AgentContract):
    """The near-disk half of a target; the controller calls these methods locally or over SSH."""

    def __init__(self) -> None:
        self._stores: dict[str, Store] = {}
        self._held: dict[str, int] = {}  # lock path -> the descriptor whose flock says we hold it
        self._manifests = Manifests(self._store)  # the stored manifests' rows, read once each

    def park(self) -> str:
        """The command using this agent is done: release every lock it still holds and forget what
        it remembered for that command, as a newly started agent would be, so a holder can hand this
        process to the next command (targets/holder.py); only answers checked against their files'
        stat identity before each use are kept (dist_info's). Answers "parked"."""
        for path in list(self._held):
            self.unlock(path)
        self.__init__()  # type: ignore[misc]
        write_caches(True)
        return "parked"

    def hands_off(self) -> None:
        """From now on write no cache and no seal (a dry run, `check`, Ansible's check mode: they
        write nothing on the host); what caches there are are still read."""
        write_caches(False)

    def watch(self, listener: Callable[[int, int, str], None] | None) -> None:
        """Tell (files read, files found to read, phase) of each call to `listener` as it goes (progress);
        in the controller's own process only: over the wire the heartbeats carry them."""
        progress.listen(listener if callable(listener) else None)

    def _store(self, root: str) -> "Store":
        """One Store per root, so its pack index is read once per process."""
        if root not in self._stores:
            self._stores[root] = Store(root)
        return self._stores[root]

    def hostname(self) -> str:
        return hostname()

    def interpreter(self) -> Interpreter:
        """This Python's prefix, site directories and version (the agent runs in the target's Python)."""

        paths = sysconfig.get_paths()
        return Interpreter(
            sys.prefix,
            paths["purelib"],
            paths["platlib"],
            "%d.%d.%d" % sys.version_info[:3],
            sys.implementation.cache_tag,
        )

    def algorithm(self) -> str:
        """The hash this agent's digests use: blake3, or sha256 where blake3 is not importable."""
        return ALGORITHM

    def pid(self) -> int:
        return os.getpid()

    # ---- files (fileops.py) -------------------------------------------------------------
    def read(self, path: str, owned: bool = False, regular: bool = False) -> bytes:
        """A file's bytes (fileops.read): whatever is not a regular file is refused without waiting
        on it; `regular` is the unit reading's name for that rule, kept in the contract."""
        return fileops.read(path, owned)

    def lstat(self, path: str) -> FileStat | None:
        return fileops.lstat(path)

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)

    def escaping(self, root: str, rels: list[str]) -> dict[str, str]:
        return fileops.escaping(root, rels)

    def write_atomic(self, path: str, data: bytes, mode: int = 0o644) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, data, mode)

    def write_new(self, path: str, data: bytes, mode: int, durable: bool = True) -> None:
        fileops.write_new(path, data, mode, durable)

    def sync_files(self, paths: list[str]) -> None:
        fileops.sync_files(paths)

    def obstacles(self, writes: list[str], removes: list[str]) -> dict[str, str]:
        """path -> what stands in the way of replacing it by a regular file (`writes`) or unlinking it
        (`removes`), for each path where a rename or unlink would fail (see preflight.py)."""
        return obstacles(writes, removes)

    def read_changed(self, directory: str, suffix: str, known: dict[str, Any]) -> ChangedFiles:
        return read_changed(directory, suffix, known)

    def rename(self, src: str, dst: str, durable: bool = True) -> None:
        fileops.rename(src, dst, durable)

    def unlink(self, path: str, durable: bool = True) -> bool:
        return fileops.unlink(path, durable)

    def sync_dirs(self, paths: list[str]) -> None:
        fileops.sync_dirs(paths)

    def missing_dirs(self, paths: list[str]) -> list[str]:
        return fileops.missing_dirs(paths)

    def remove_empty_dirs(self, dirs: list[str]) -> list[str]:
        return fileops.remove_empty_dirs(dirs)

    def listdir(self, path: str) -> list[str]:
        return fileops.listdir(path)

    def dir_entries(self, dirs: list[str], suffixes: list[str]) -> dict[str, dict[str, Any] | None]:
        return unitdirs.dir_entries(dirs, suffixes)

    def remove_bytecode(self, paths: list[str]) -> int:
        return fileops.remove_bytecode(paths)

    def dist_info(self, site_dirs: list[str], package: str, paths: bool = True) -> DistInfo | None:
        """Find an installed distribution's metadata: name, version, dist-info dir, RECORD paths
        (`paths`: all of them too, else only their layout, which is all a scan needs).

        A process kept for later commands (a parked agent) answers again from memory while the
        site dirs, the dist-info dir, its RECORD and METADATA keep their stat identity (any
        install, removal or rewrite moves a directory's or file's ctime); never for files changed
        within the clock's granularity of the answer (StatCache's racily-clean rule)."""
        key = (tuple(site_dirs), package, paths)
        known = _DIST_INFOS.get(key)
        if known is not None and seal.stat_identities(known[0], os.stat) == known[1]:  # the seal's identities
            return known[2]
        started = time.time_ns()
        found = self._find_dist_info(site_dirs, package, paths)
        watched = list(site_dirs) + (
            [os.path.join(found.site, found.dist_info, f) for f in ("", "RECORD", "METADATA")]
            if found
            else []
        )
        seen = seal.stat_identities(watched, os.stat)
        if seal.settled(seen, started):
            _DIST_INFOS[key] = (watched, seen, found)
        return found

    def _find_dist_info(self, site_dirs: list[str], package: str, paths: bool) -> DistInfo | None:
        want = normalize_name(package)
        for site in site_dirs:
            for name in self.listdir(site):
                if not name.endswith(".dist-info"):
                    continue
                dist, _, version = name[: -len(".dist-info")].partition("-")
                if normalize_name(dist) != want:
                    continue
                record = record_paths(os.path.join(site, name, "RECORD"))
                return DistInfo(
                    site,
                    name,
                    installed_version(os.path.join(site, name)) or version,
                    tuple(record) if paths else (),
                    *layout(record),
                    installation(site, name),
                )
        return None

    # ---- scanning ----------------------------------------------------------------------
    def scan(self, request: ScanRequest) -> ScanResult:
        """Digest, size and mode of the files the request names (see ScanRequest).

        Missing paths are left out. Unchanged files (by the stat cache) are not re-read.
        """
        return compare.scan(request)

    def compare_many(self, request: CompareRequest) -> list[Comparison]:
        """Scan as `scan` does and compare with each stored manifest object, here, next to the
        files, with one scan per hash algorithm: for each manifest only the differing keys come
        back, as key -> (recorded row, actual row) (None where absent)."""
        return compare.compare_many(self._manifests, request)

    def manifest_rows(self, store: str, digest: str) -> Rows:
        """A stored manifest as key -> (digest, size, mode), parsed at most once while it lasts."""
        return self._manifests.rows(store, digest)

    # ---- object store ------------------------------------------------------------------
    def store_put(self, store: str, data: bytes, digest: str | None = None) -> str:
        return self._store(store).put(data, digest)

    def store_get(self, store: str, digest: str) -> bytes:
        return self._store(store).get(digest)

    def store_missing(self, store: str, digests: list[str]) -> list[str]:
        s = self._store(store)
        return [d for d in digests if not s.has(d)]

    def store_damage(self, store: str) -> list[str]:
        """What is visibly broken in the store (a pack without its index...), for error messages."""
        return self._store(store).damage()

    def store_put_files(self, store: str, files: dict[str, str]) -> dict[str, str]:
        """Copy files (digest -> path) into the store as one pack; return digests that failed
        verification (the file changed since it was hashed) with their actual digest."""
        return self._store(store).put_files(files)

    def stage(self, store: str, digest: str, path: str, mode: int, durable: bool = True) -> None:
        """Write an object's verified bytes to the stage file `path` (synced later: see write_new)."""
        self.write_new(path, self._store(store).get(digest), mode, durable)

    # ---- where the state lives, and its lock (statelock.py) ------------------------------
    def state_dir_owner(self, prefix: str, state_dir: str, site: str, claim: bool) -> StateDirOwner:
        return statelock.state_dir_owner(prefix, state_dir, site, claim)

    def lock(self, path: str, holder: dict[str, Any]) -> LockHolder | None:
        return statelock.take(path, holder, self._held)

    def clean_temps(self, state_dir: str, store: str) -> list[Removed]:
        """Remove the temporary files interrupted commands left in the state dir, its ledger, its
        caches (the audit's, the fingerprint's) and the store's packs; [path, size] of each. Only
        under the lock (see Store.clean)."""
        removed = []
        for sub in ("", "ledger", "audit"):
            removed += remove_stale_temps(os.path.join(state_dir, sub) if sub else state_dir, (TEMP_PREFIX,))
        for directory, _, _ in os.walk(os.path.join(state_dir, "env")):  # a few small directories
            removed += remove_stale_temps(directory, (TEMP_PREFIX,))
        removed += self._store(store).clean()
        return [(path, size) for path, size in removed]

    def unlock(self, path: str) -> None:
        statelock.release(path, self._held)

    # ---- environment -------------------------------------------------------------------
    def interpreter_facts(self) -> InterpreterFacts:
        """Implementation, version, tags, libc and site dirs of the Python this agent runs in."""

        return InterpreterFacts.from_wire(interp.facts())

    def fingerprint(
        self,
        sites: list[str],
        cache_root: str | None,
        main_site: str | None = None,
        parts: list[str] | None = None,
        managed: str | None = None,
        stdlib: list[str] | None = None,
        audit_seals: str | None = None,
    ) -> Fingerprint:
        """The environment fingerprint of these site dirs and this host (see fingerprint.py);
        `stdlib`: the target's standard library directories (its site hooks are looked for there first);
        `audit_seals`: the audit's RECORD seals of `main_site`, read only."""

        return Fingerprint.from_wire(
            fingerprint.take(
                sites,
                cache_root,
                main_site,
                tuple(parts) if parts else fingerprint.PARTS,
                managed,
                stdlib,
                audit_seals,
            )
        )

    # ---- audit -------------------------------------------------------------------------
    def dist_infos(self, site: str) -> list[str]:
        """The names of every *.dist-info directory in a site-packages directory."""
        return [n for n in self.listdir(site) if n.endswith(".dist-info")]

    def audit_record(
        self, site: str, dist_infos: list[str], cache_dir: str | None = None, also: str | None = None
    ) -> dict[str, RecordCheck]:
        """Check installed distributions against their RECORD (hash, size), one stat cache each.

        Returns a RecordCheck per dist-info name.
        Entries without a hash (bytecode, RECORD itself) are skipped; a console script whose
        shebang line alone was rewritten is not a finding. With a `cache_dir`, each answer is
        sealed there (distcheck.RecordSeals): given again after one stat per file while none changed;
        `also`: another caller's seals of the site (the fingerprint's), read only.
        """
        return {
            name: RecordCheck.from_wire(doc)
            for name, doc in treecheck.checked_records(site, dist_infos, cache_dir, also).items()
        }

    def audit_installation(self, site: str, dist_info: str, cache_dir: str | None = None) -> RecordCheck:
        """The managed distribution's RECORD rows outside its package (its console scripts in bin/, the
        installer's records; the package's own files are the code state's) against RECORD."""
        return RecordCheck.from_wire(check_record(site, dist_info, cache_dir, outside=True))

    def audit_bytecode(
        self,
        site: str,
        cache_tag: str,
        verify: list[str],
        cache: str | None = None,
        pycs_since: str | None = None,
        compared: str | None = None,
    ) -> BytecodeCheck:
        """Every .pyc below `site` that Python would run instead of its source: a header that
        matches a changed source, an unchecked-hash pyc of other code, a legacy pyc with no source.
        Stale pycs (header differs: Python recompiles them) and __pycache__ entries without a
        source (never imported) are only counted.

        `verify` names sources (relative to site) whose pyc is also recompiled and compared,
        which catches a pyc whose header matches a source that was changed in the same tick.
        `cache` keeps each clean pyc's verdict keyed by its own and its source's stat identity.
        `pycs_since`: as TreeRequest's ("": every pyc recompiled and compared); `compared` too.
        """
        return BytecodeCheck.from_wire(
            check_bytecode(site, cache_tag, verify, cache, treecheck.since(pycs_since), compared)
        )

    def installed_bytecode(
        self, site: str, cache_tag: str, dirs: list[str], record: str, compared: str | None = None
    ) -> BytecodeCheck:
        """The package's pycs that run other code than their source, for its first baseline
        (bytecode.installed_bytecode: the hash-based ones and those written after its RECORD
        compared); `compared` as TreeRequest's."""
        return BytecodeCheck.from_wire(installed_bytecode(site, cache_tag, dirs, record, compared))

    def audit_tree(self, request: TreeRequest) -> TreeCheck:
        """The managed package against a stored manifest, the bytecode below its site dir, the
        distributions of `request.records` against their RECORD and the native libraries (the
        fingerprint's native part), with one walk of the package (treecheck.check)."""
        return treecheck.check(request, self._manifests, self._store(request.store))
