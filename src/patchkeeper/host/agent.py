"""The near-disk half of a target: the methods the controller calls, locally or on a host.

Every argument and result is plain data or a request or answer value of contract.py, which
carries them across a process boundary; the work itself is in disk.py, store.py, distcheck.py and
bytecode.py, which, like this module, use the standard library only (blake3 when importable).
"""

from __future__ import annotations

import os
import stat
import sys
import sysconfig
import time
from typing import Any, Callable

from . import compare, fingerprint, interp, progress, seal, statelock, treecheck, unitdirs
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
    fsync_dir,
    fsync_path,
    hostname,
    map_threads,
    normalize_name,
    open_regular,
    remove_stale_temps,
    write_atomic,
)
from .distcheck import check_record
from .distinfo import installation, installed_version, layout, record_paths
from .errors import AgentError
from .manifests import Manifests
from .preflight import obstacles
from .statcache import read_changed, untrusted, write_caches
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

    # ---- files -------------------------------------------------------------------------
    def read(self, path: str, owned: bool = False, regular: bool = False) -> bytes:
        """A file's bytes; `owned`: only a state file to be believed (see untrusted), else AgentError
        "untrusted" saying why. Whatever is not a regular file is refused without waiting on it (a FIFO
        or a device is never read: disk.open_regular; a directory raises IsADirectoryError); `regular`
        is the unit reading's name for that rule, kept in the contract."""
        if os.path.isdir(path):
            raise IsADirectoryError(21, "Is a directory", path)
        with os.fdopen(open_regular(path), "rb") as f:
            if owned:
                why = untrusted(os.fstat(f.fileno()))
                if why is not None:
                    raise AgentError("untrusted", f"{path}: {why}")
            return f.read()

    def lstat(self, path: str) -> FileStat | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        return FileStat(
            st.st_size,
            stat.S_IMODE(st.st_mode),
            stat.S_ISREG(st.st_mode),
            stat.S_ISDIR(st.st_mode),
            stat.S_ISLNK(st.st_mode),
            st.st_mtime_ns,
        )

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)

    def escaping(self, root: str, rels: list[str]) -> dict[str, str]:
        """rel -> where its directory really is, for each relative path whose directory resolves
        (through a symlink) elsewhere than its own place below `root`: outside it, or to another
        directory inside (git apply writes beyond no symlink either); directories that do not exist
        yet are judged by their nearest existing ancestor."""
        top = os.path.realpath(root)
        seen: dict[str, str | None] = {}
        out: dict[str, str] = {}
        for rel in rels:
            parent = os.path.dirname(os.path.join(root, rel))
            if parent not in seen:
                probe = parent
                while not os.path.lexists(probe) and probe != root and len(probe) > len(root):
                    probe = os.path.dirname(probe)
                real = os.path.realpath(probe)
                own = os.path.normpath(os.path.join(top, os.path.relpath(probe, root)))
                seen[parent] = None if real == own else real
            where = seen[parent]
            if where is not None:
                out[rel] = where
        return out

    def write_atomic(self, path: str, data: bytes, mode: int = 0o644) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, data, mode)

    def write_new(self, path: str, data: bytes, mode: int, durable: bool = True) -> None:
        """Write `path` directly (a stage file named in the journal, so recovery can remove it);
        `durable=False` leaves its fsync to a later sync_files."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), stat.S_IMODE(mode))
            if durable:
                os.fsync(f.fileno())

    def sync_files(self, paths: list[str]) -> None:
        """fsync each file, several at once (the file system commits them together): makes files
        written with durable=False as durable as if each had synced itself."""

        map_threads(fsync_path, list(dict.fromkeys(paths)), 8)

    def obstacles(self, writes: list[str], removes: list[str]) -> dict[str, str]:
        """path -> what stands in the way of replacing it by a regular file (`writes`) or unlinking it
        (`removes`), for each path where a rename or unlink would fail (see preflight.py)."""
        return obstacles(writes, removes)

    def read_changed(self, directory: str, suffix: str, known: dict[str, Any]) -> ChangedFiles:
        return read_changed(directory, suffix, known)

    def rename(self, src: str, dst: str, durable: bool = True) -> None:
        """Rename; `durable=False` leaves the directory's fsync to a later sync_dirs (one per directory)."""
        os.replace(src, dst)
        if durable:
            fsync_dir(os.path.dirname(dst))

    def unlink(self, path: str, durable: bool = True) -> bool:
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError):  # not there (or its parent is no directory)
            return False
        if durable:
            fsync_dir(os.path.dirname(path))
        return True

    def sync_dirs(self, paths: list[str]) -> None:
        """fsync the directory of each path, once per directory: makes renames and unlinks done
        with durable=False as durable as if each had synced its own."""

        def sync(directory: str) -> None:
            try:
                fsync_dir(directory)
            except (FileNotFoundError, NotADirectoryError):  # removed since (an emptied created dir)
                pass

        map_threads(sync, list(dict.fromkeys(os.path.dirname(p) for p in paths)), 8)

    def missing_dirs(self, paths: list[str]) -> list[str]:
        """The directories that writing each path would create: its missing ancestors."""
        out: dict[str, None] = {}
        for path in paths:
            parent = os.path.dirname(path)
            chain = []
            while parent and parent != os.path.dirname(parent) and not os.path.lexists(parent):
                chain.append(parent)
                parent = os.path.dirname(parent)
            out.update(dict.fromkeys(reversed(chain)))
        return list(out)

    def remove_empty_dirs(self, dirs: list[str]) -> list[str]:
        """Remove each directory that is empty (but for an empty __pycache__), deepest first;
        return those removed. A directory with anything else in it stays."""
        removed = []
        for path in sorted(dirs, key=lambda d: d.count("/"), reverse=True):
            try:
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    continue
                try:
                    os.rmdir(os.path.join(path, "__pycache__"))
                except OSError:
                    pass  # absent, or holds bytecode of other modules: then the directory stays too
                os.rmdir(path)
            except OSError:  # not empty, or already gone
                continue
            fsync_dir(os.path.dirname(path))
            removed.append(path)
        return removed

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []

    def dir_entries(self, dirs: list[str], suffixes: list[str]) -> dict[str, dict[str, Any] | None]:
        return unitdirs.dir_entries(dirs, suffixes)

    def remove_bytecode(self, paths: list[str]) -> int:
        """Remove the cached bytecode of each source path; return how many files went."""
        pycs: list[str] = []
        for path in paths:
            if not path.endswith(".py"):
                continue
            cache = os.path.join(os.path.dirname(path), "__pycache__")
            stem = os.path.basename(path)[:-3] + "."
            try:
                names = os.listdir(cache)
            except (FileNotFoundError, NotADirectoryError):  # none, or a file in its place: no bytecode
                continue
            pycs.extend(
                os.path.join(cache, name) for name in names if name.startswith(stem) and name.endswith(".pyc")
            )  # <stem>.<tag>[.opt-N].pyc
        # unlinked on threads (freeing an inode can wait for the file system's journal: the waits
        # overlap), then each __pycache__ synced once
        removed = map_threads(lambda pyc: self.unlink(pyc, durable=False), pycs, 8)
        self.sync_dirs([p for p, gone in zip(pycs, removed) if gone])
        return sum(removed)

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
    ) -> Fingerprint:
        """The environment fingerprint of these site dirs and this host (see fingerprint.py);
        `stdlib`: the target's standard library directories (its site hooks are looked for there first)."""

        return Fingerprint.from_wire(
            fingerprint.take(
                sites, cache_root, main_site, tuple(parts) if parts else fingerprint.PARTS, managed, stdlib
            )
        )

    # ---- audit -------------------------------------------------------------------------
    def dist_infos(self, site: str) -> list[str]:
        """The names of every *.dist-info directory in a site-packages directory."""
        return [n for n in self.listdir(site) if n.endswith(".dist-info")]

    def audit_record(
        self, site: str, dist_infos: list[str], cache_dir: str | None = None
    ) -> dict[str, RecordCheck]:
        """Check installed distributions against their RECORD (hash, size), one stat cache each.

        Returns a RecordCheck per dist-info name.
        Entries without a hash (bytecode, RECORD itself) are skipped; a console script whose
        shebang line alone was rewritten is not a finding. With a `cache_dir`, each answer is
        sealed there (distcheck.RecordSeals): given again after one stat per file while none changed.
        """
        return {
            name: RecordCheck.from_wire(doc)
            for name, doc in self._records(site, dist_infos, cache_dir).items()
        }

    @staticmethod
    def _records(site: str, dist_infos: list[str], cache_dir: str | None) -> dict[str, dict[str, Any]]:
        """check_record of each distribution, sealed in `cache_dir` (see audit_record)."""
        return treecheck.checked_records(site, dist_infos, cache_dir)

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
