"""Near-disk operations on a target: hashing, scanning, atomic writes, the object store.

This module is the part of patchkeeper that runs next to the target's files. It uses the
standard library only (blake3 when importable), so it can run in-process for a local target
or inside the target's own interpreter on a remote host. Every argument and result is a
plain value (str, int, bytes, list, dict) so calls can cross a process boundary unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

try:  # blake3 is patchkeeper's hash; a host without it falls back to sha256 (and says so).
    import blake3 as _blake3
except ImportError:  # pragma: no cover - exercised on hosts without blake3
    _blake3 = None

ALGORITHM = "blake3" if _blake3 is not None else "sha256"
_CHUNK = 1 << 20
_BIG = 4 << 20  # files above this size are hashed with blake3's own threads
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo")
STAGE_PREFIX = ".pk-stage-"


class AgentError(Exception):
    """A near-disk operation failed; `kind` names the failure for the controller."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _hasher(size: int = 0, algorithm: str | None = None):
    algorithm = algorithm or ALGORITHM
    if algorithm == "sha256":
        return hashlib.sha256()
    if algorithm != "blake3" or _blake3 is None:
        raise AgentError("no-algorithm", f"this Python cannot hash with {algorithm!r} (it has {ALGORITHM})")
    if size >= _BIG:
        return _blake3.blake3(max_threads=_blake3.blake3.AUTO)
    return _blake3.blake3()


def algorithm_of(digest: str) -> str:
    """The algorithm a digest names: "blake3:<hex>" -> "blake3"."""
    return digest.partition(":")[0]


def hash_bytes(data: bytes, algorithm: str | None = None) -> str:
    h = _hasher(len(data), algorithm)
    h.update(data)
    return f"{algorithm or ALGORITHM}:{h.hexdigest()}"


def hash_file(path: str, size: int = 0, algorithm: str | None = None) -> str:
    h = _hasher(size, algorithm)
    with open(path, "rb") as f:
        if size and size < _CHUNK:
            h.update(f.read())
        else:
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                h.update(chunk)
    return f"{algorithm or ALGORITHM}:{h.hexdigest()}"


def is_managed_name(rel: str) -> bool:
    """Bytecode caches are derived from sources and never part of a code state."""
    parts = rel.split("/")
    return not (_SKIP_DIRS.intersection(parts) or rel.endswith(_SKIP_SUFFIXES)
                or parts[-1].startswith(STAGE_PREFIX))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write a new file at `path` by temp file, fsync, rename, fsync of the directory.

    The destination inode is replaced, never written into, so a file hardlinked elsewhere
    (a uv cache, a test's pristine copy) keeps its bytes.
    """
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".pk-tmp-{os.getpid()}-{time.monotonic_ns()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(mode))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(directory)


class StatCache:
    """Digest cache keyed by (size, mtime_ns, ctime_ns, inode), immune to racily clean files.

    An entry is only cached when the file's mtime and ctime are older than the scan's start by
    more than the file system's timestamp granularity; any later change then moves ctime forward,
    so a cached digest is never trusted for a file that could have changed within the same tick
    it was hashed in (git's "racily clean" problem).
    """

    GRANULARITY_NS = 2_000_000_000

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.entries: dict[str, list] = {}
        self.fresh: dict[str, list] = {}
        self.started_ns = time.time_ns()
        if path:
            try:
                with open(path, "rb") as f:
                    self.entries = json.loads(f.read())
            except (FileNotFoundError, ValueError):
                self.entries = {}

    def lookup(self, rel: str, st: os.stat_result) -> str | None:
        key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        hit = self.entries.get(rel)
        if hit is not None and hit[:4] == key:
            self.fresh[rel] = hit
            return hit[4]
        return None

    def remember(self, rel: str, st: os.stat_result, digest: str) -> None:
        newest = max(st.st_mtime_ns, st.st_ctime_ns)
        if newest + self.GRANULARITY_NS < self.started_ns:
            self.fresh[rel] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, digest]

    def save(self) -> None:
        if self.path and self.fresh != self.entries:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            write_atomic(self.path, json.dumps(self.fresh, separators=(",", ":")).encode())


def _walk(root: str, rel_dir: str) -> Iterator[str]:
    base = os.path.join(root, rel_dir) if rel_dir else root
    try:
        with os.scandir(base) as it:
            entries = list(it)
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
        if entry.is_dir(follow_symlinks=False):
            if entry.name not in _SKIP_DIRS:
                yield from _walk(root, rel)
        elif is_managed_name(rel):
            yield rel


def _entry(st: os.stat_result, digest: str) -> list:
    return [digest, st.st_size, stat.S_IMODE(st.st_mode)]


class Agent:
    """The near-disk half of a target; the controller calls these methods locally or over SSH."""

    def hostname(self) -> str:
        return socket.gethostname()

    def interpreter(self) -> dict:
        """This Python's prefix, site directories and version (the agent runs in the target's Python)."""
        import sys
        import sysconfig

        paths = sysconfig.get_paths()
        return {"prefix": sys.prefix, "purelib": paths["purelib"], "platlib": paths["platlib"],
                "python": "%d.%d.%d" % sys.version_info[:3]}

    def algorithm(self) -> str:
        """The hash this agent's digests use: blake3, or sha256 where blake3 is not importable."""
        return ALGORITHM

    def pid(self) -> int:
        return os.getpid()

    # ---- files -------------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def lstat(self, path: str) -> dict | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        return {"size": st.st_size, "mode": stat.S_IMODE(st.st_mode),
                "is_file": stat.S_ISREG(st.st_mode), "is_dir": stat.S_ISDIR(st.st_mode),
                "is_link": stat.S_ISLNK(st.st_mode), "mtime_ns": st.st_mtime_ns}

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)

    def write_atomic(self, path: str, data: bytes, mode: int = 0o644) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, data, mode)

    def write_new(self, path: str, data: bytes, mode: int) -> None:
        """Write `path` directly (a stage file named in the journal, so recovery can remove it)."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), stat.S_IMODE(mode))
            os.fsync(f.fileno())

    def read_all(self, directory: str, suffix: str) -> dict[str, bytes]:
        """Every file of a directory whose name ends with `suffix`, by name."""
        out = {}
        for name in self.listdir(directory):
            if name.endswith(suffix):
                with open(os.path.join(directory, name), "rb") as f:
                    out[name] = f.read()
        return out

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)
        _fsync_dir(os.path.dirname(dst))

    def unlink(self, path: str) -> bool:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        _fsync_dir(os.path.dirname(path))
        return True

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def remove_bytecode(self, paths: list[str]) -> int:
        """Remove the cached bytecode of each source path; return how many files went."""
        removed = 0
        for path in paths:
            if not path.endswith(".py"):
                continue
            cache = os.path.join(os.path.dirname(path), "__pycache__")
            stem = os.path.basename(path)[:-3] + "."
            for name in self.listdir(cache):
                if name.startswith(stem) and name.endswith(".pyc"):  # <stem>.<tag>[.opt-N].pyc
                    removed += self.unlink(os.path.join(cache, name))
        return removed

    def dist_info(self, site_dirs: list[str], package: str) -> dict | None:
        """Find an installed distribution's metadata: name, version, dist-info dir, RECORD paths."""
        want = _normalize(package)
        for site in site_dirs:
            for name in self.listdir(site):
                if not name.endswith(".dist-info"):
                    continue
                dist, _, version = name[: -len(".dist-info")].partition("-")
                if _normalize(dist) != want:
                    continue
                meta = os.path.join(site, name, "METADATA")
                try:
                    with open(meta, encoding="utf-8", errors="replace") as f:
                        for line in f:
                            if line.startswith("Version:"):
                                version = line.split(":", 1)[1].strip()
                                break
                except FileNotFoundError:
                    pass
                return {"site": site, "dist_info": name, "version": version,
                        "record": self._record_paths(os.path.join(site, name, "RECORD"))}
        return None

    @staticmethod
    def _record_paths(record: str) -> list[str]:
        import csv

        try:
            with open(record, newline="", encoding="utf-8") as f:
                return [row[0] for row in csv.reader(f) if row]
        except FileNotFoundError:
            return []

    # ---- scanning ----------------------------------------------------------------------
    def scan(self, root: str, paths: list[str], walk: list[str], cache: str | None = None,
             absolute: dict[str, str] | None = None, algorithm: str | None = None) -> dict[str, list]:
        """Digest, size and mode of files under `root`: the given relative paths plus every
        file below the `walk` directories, and the `absolute` key -> path extras.

        Missing paths are left out. Unchanged files (by the stat cache) are not re-read.
        `algorithm` asks for another hash than the agent's own (give it its own `cache`).
        """
        algorithm = algorithm or ALGORITHM
        cached = StatCache(cache)
        names = dict.fromkeys(p for p in paths if is_managed_name(p))
        for rel_dir in walk:
            names.update(dict.fromkeys(_walk(root, rel_dir)))
        jobs: list[tuple[str, str]] = [(rel, os.path.join(root, rel)) for rel in names]
        jobs.extend((key, path) for key, path in (absolute or {}).items())
        out: dict[str, list] = {}
        todo: list[tuple[str, str, os.stat_result]] = []
        for key, path in jobs:
            try:
                st = os.lstat(path)
            except (FileNotFoundError, NotADirectoryError):
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            digest = cached.lookup(key, st)
            if digest is None or not digest.startswith(algorithm + ":"):
                todo.append((key, path, st))
            else:
                out[key] = _entry(st, digest)

        def work(job: tuple[str, str, os.stat_result]) -> tuple[str, list]:
            key, path, st = job
            digest = hash_file(path, st.st_size, algorithm)
            cached.remember(key, st, digest)
            return key, _entry(st, digest)

        if len(todo) > 64:
            with ThreadPoolExecutor(max_workers=min(8, (os.cpu_count() or 2) * 2)) as pool:
                out.update(pool.map(work, todo, chunksize=32))
        else:
            out.update(map(work, todo))
        cached.save()
        return dict(sorted(out.items()))

    def compare(self, store: str, manifest: str, root: str, paths: list[str], walk: list[str],
                cache: str | None = None, absolute: dict[str, str] | None = None) -> dict[str, list]:
        """Scan as `scan` does and compare with the stored manifest object `manifest`, here, next
        to the files: only differing keys come back, as key -> [recorded row, actual row] (None
        where absent). Files are hashed with the algorithm the manifest's digests use."""
        recorded: dict[str, list] = {}
        for line in Store(store).get(manifest).decode("utf-8").splitlines():
            mode, size, digest, key = line.split(" ", 3)
            recorded[json.loads(key)] = [digest, int(size), int(mode, 8)]
        algorithm = algorithm_of(next(iter(recorded.values()))[0]) if recorded else ALGORITHM
        if algorithm != ALGORITHM:
            cache = f"{cache}.{algorithm}" if cache else None
        actual = self.scan(root, paths, walk, cache, absolute, algorithm)
        return {k: [recorded.get(k), actual.get(k)] for k in sorted(set(recorded) | set(actual))
                if recorded.get(k) != actual.get(k)}

    # ---- object store ------------------------------------------------------------------
    def store_put(self, store: str, data: bytes, digest: str | None = None) -> str:
        return Store(store).put(data, digest)

    def store_get(self, store: str, digest: str) -> bytes:
        return Store(store).get(digest)

    def store_missing(self, store: str, digests: list[str]) -> list[str]:
        s = Store(store)
        return [d for d in digests if not s.has(d)]

    def store_put_files(self, store: str, files: dict[str, str]) -> dict[str, str]:
        """Copy files (digest -> path) into the store as one pack; return digests that failed
        verification (the file changed since it was hashed) with their actual digest."""
        return Store(store).put_files(files)

    def stage(self, store: str, digest: str, path: str, mode: int) -> None:
        """Write an object's verified bytes to the stage file `path`."""
        self.write_new(path, Store(store).get(digest), mode)

    # ---- lock --------------------------------------------------------------------------
    def lock(self, path: str, holder: dict) -> dict | None:
        """Take the lock file; return None on success or the live holder's record."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        holder = dict(holder, pid=os.getpid(), host=socket.gethostname(), since=time.time())
        for _ in range(3):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                current = self._read_lock(path)
                if current and current.get("host") == socket.gethostname() and not _alive(current.get("pid", 0)):
                    stale = f"{path}.stale-{os.getpid()}"
                    try:
                        os.rename(path, stale)
                        os.unlink(stale)
                    except FileNotFoundError:
                        pass
                    continue
                return current or {"pid": "?", "host": "?", "command": "?", "since": 0}
            with os.fdopen(fd, "w") as f:
                json.dump(holder, f)
                f.flush()
                os.fsync(f.fileno())
            return None
        return self._read_lock(path)

    def unlock(self, path: str) -> None:
        current = self._read_lock(path)
        if current and current.get("pid") == os.getpid():
            os.unlink(path)

    @staticmethod
    def _read_lock(path: str) -> dict | None:
        try:
            with open(path) as f:
                return json.load(f)
        except (FileNotFoundError, ValueError):
            return None


def _alive(pid: int) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError):
        return True
    return True


def _normalize(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


class Store:
    """Content-addressed objects: loose files at objects/<algo>/ab/cdef…, packs for bulk.

    Objects are written once, atomically, made read-only, and verified whenever read back:
    a corrupt object raises and is never handed out.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self._index: dict[str, tuple[str, int, int]] | None = None

    def _loose(self, digest: str) -> str:
        algo, _, hexd = digest.partition(":")
        if not hexd or not all(c in "0123456789abcdef" for c in hexd):
            raise AgentError("bad-digest", f"not a digest: {digest!r}")
        return os.path.join(self.root, "objects", algo, hexd[:2], hexd[2:])

    def _packs(self) -> dict[str, tuple[str, int, int]]:
        if self._index is None:
            self._index = {}
            pack_dir = os.path.join(self.root, "packs")
            for name in sorted(os.listdir(pack_dir)) if os.path.isdir(pack_dir) else []:
                if name.endswith(".idx"):
                    with open(os.path.join(pack_dir, name), "rb") as f:
                        idx = json.loads(f.read())
                    pack = os.path.join(pack_dir, name[:-4] + ".pack")
                    for digest, (offset, size) in idx.items():
                        self._index.setdefault(digest, (pack, offset, size))
        return self._index

    def has(self, digest: str) -> bool:
        return os.path.exists(self._loose(digest)) or digest in self._packs()

    def put(self, data: bytes, digest: str | None = None) -> str:
        actual = hash_bytes(data, algorithm_of(digest) if digest else None)
        if digest is not None and digest != actual:
            raise AgentError("digest-mismatch", f"bytes hash to {actual}, not {digest}")
        if not self.has(actual):
            path = self._loose(actual)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_atomic(path, data, 0o444)
        return actual

    def get(self, digest: str) -> bytes:
        path = self._loose(digest)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            where = self._packs().get(digest)
            if where is None:
                raise AgentError("missing-object", f"object {digest} is not in the store {self.root}")
            pack, offset, size = where
            with open(pack, "rb") as f:
                f.seek(offset)
                data = f.read(size)
        if hash_bytes(data, algorithm_of(digest)) != digest:
            raise AgentError("corrupt-object",
                             f"object {digest} in {self.root} is corrupt (its bytes hash differently); "
                             "it will not be restored")
        return data

    def put_files(self, files: dict[str, str]) -> dict[str, str]:
        """Pack the files not yet stored; verify each against its expected digest while copying."""
        todo = [(d, p) for d, p in files.items() if not self.has(d)]
        mismatched: dict[str, str] = {}
        if not todo:
            return mismatched
        pack_dir = os.path.join(self.root, "packs")
        os.makedirs(pack_dir, exist_ok=True)
        tmp = os.path.join(pack_dir, f".tmp-{os.getpid()}-{time.monotonic_ns()}")
        index: dict[str, tuple[int, int]] = {}
        offset = 0
        with open(tmp, "wb") as out:
            for digest, path in todo:
                with open(path, "rb") as f:
                    data = f.read()
                actual = hash_bytes(data, algorithm_of(digest))
                if actual != digest:
                    mismatched[digest] = actual
                if actual in index:
                    continue
                out.write(data)
                index[actual] = (offset, len(data))
                offset += len(data)
            out.flush()
            os.fsync(out.fileno())
        pack_id = hash_bytes(json.dumps(sorted(index)).encode()).partition(":")[2][:32]
        base = os.path.join(pack_dir, pack_id)
        os.chmod(tmp, 0o444)
        os.replace(tmp, base + ".pack")
        write_atomic(base + ".idx", json.dumps(index).encode(), 0o444)
        self._index = None
        return mismatched

