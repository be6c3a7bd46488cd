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
import stat
import time
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
    if rel.endswith(_SKIP_SUFFIXES) or "__pycache__" in rel or STAGE_PREFIX in rel:
        parts = rel.split("/")
        return not (_SKIP_DIRS.intersection(parts) or rel.endswith(_SKIP_SUFFIXES)
                    or parts[-1].startswith(STAGE_PREFIX))
    return True


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, mode: int = 0o644, durable: bool = True) -> None:
    """Write a new file at `path` by temp file, fsync, rename, fsync of the directory.

    The destination inode is replaced, never written into, so a file hardlinked elsewhere
    (a uv cache, a test's pristine copy) keeps its bytes. `durable=False` skips the fsyncs, for
    caches whose loss after a power cut only costs time.
    """
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".pk-tmp-{os.getpid()}-{time.monotonic_ns()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
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
    if durable:
        _fsync_dir(directory)


def manifest_rows(data: bytes) -> dict[str, list]:
    """Parse a manifest's text form (see manifest.Manifest): key -> [digest, size, mode]."""
    rows: dict[str, list] = {}
    for line in data.decode("utf-8", "surrogateescape").split("\n"):
        if line:
            mode, size, digest, key = line.split(" ", 3)
            rows[json.loads(key) if key[0] == '"' else key] = [digest, int(size), int(mode, 8)]
    return rows


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
            write_atomic(self.path, json.dumps(self.fresh, separators=(",", ":")).encode(), durable=False)


def _walk(root: str, rel_dir: str) -> Iterator[str]:
    """Relative paths of the managed files below root/rel_dir, directory by directory."""
    stack = [rel_dir]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(os.path.join(root, current) if current else root) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError):
            continue
        prefix = current + "/" if current else ""
        for entry in entries:
            name = entry.name
            if entry.is_dir(follow_symlinks=False):
                if name not in _SKIP_DIRS:
                    stack.append(prefix + name)
            elif not (name.endswith(_SKIP_SUFFIXES) or name.startswith(STAGE_PREFIX)):
                yield prefix + name


def _entry(st: os.stat_result, digest: str) -> list:
    return [digest, st.st_size, stat.S_IMODE(st.st_mode)]


class Agent:
    """The near-disk half of a target; the controller calls these methods locally or over SSH."""

    def __init__(self) -> None:
        self._stores: dict[str, Store] = {}

    def _store(self, root: str) -> "Store":
        """One Store per root, so its pack index is read once per process."""
        if root not in self._stores:
            self._stores[root] = Store(root)
        return self._stores[root]

    def hostname(self) -> str:
        return _hostname()

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
        names = dict.fromkeys(_walked for rel_dir in walk for _walked in _walk(root, rel_dir))
        walked = tuple(d + "/" for d in walk)
        names.update(dict.fromkeys(p for p in paths if not p.startswith(walked) and is_managed_name(p)))
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

        def work(batch: list[tuple[str, str, os.stat_result]]) -> list[tuple[str, list]]:
            done = []
            for key, path, st in batch:
                digest = hash_file(path, st.st_size, algorithm)
                cached.remember(key, st, digest)
                done.append((key, _entry(st, digest)))
            return done

        batches = [todo[i:i + 64] for i in range(0, len(todo), 64)]
        if len(batches) > 1:
            with _pool(max_workers=min(8, (os.cpu_count() or 2) * 2)) as pool:
                for done in pool.map(work, batches):
                    out.update(done)
        else:
            for batch in batches:
                out.update(work(batch))
        cached.save()
        return dict(sorted(out.items()))

    def compare(self, store: str, manifest: str, root: str, paths: list[str], walk: list[str],
                cache: str | None = None, absolute: dict[str, str] | None = None) -> dict[str, list]:
        """Scan as `scan` does and compare with the stored manifest object `manifest`, here, next
        to the files: only differing keys come back, as key -> [recorded row, actual row] (None
        where absent). Files are hashed with the algorithm the manifest's digests use."""
        return self.compare_many(store, [manifest], root, paths, walk, cache, absolute)[0]

    def compare_many(self, store: str, manifests: list[str], root: str, paths: list[str], walk: list[str],
                     cache: str | None = None, absolute: dict[str, str] | None = None) -> list[dict[str, list]]:
        """`compare` against several manifests of this target with one scan."""
        recorded = [manifest_rows(self._store(store).get(m)) for m in manifests]
        out: list[dict[str, list]] = []
        scans: dict[str, dict[str, list]] = {}
        for rows in recorded:
            algorithm = algorithm_of(next(iter(rows.values()))[0]) if rows else ALGORITHM
            if algorithm not in scans:
                own = cache if algorithm == ALGORITHM or not cache else f"{cache}.{algorithm}"
                scans[algorithm] = self.scan(root, paths, walk, own, absolute, algorithm)
            actual = scans[algorithm]
            out.append({k: [rows.get(k), actual.get(k)] for k in sorted(set(rows) | set(actual))
                        if rows.get(k) != actual.get(k)})
        return out

    # ---- object store ------------------------------------------------------------------
    def store_put(self, store: str, data: bytes, digest: str | None = None) -> str:
        return self._store(store).put(data, digest)

    def store_get(self, store: str, digest: str) -> bytes:
        return self._store(store).get(digest)

    def store_missing(self, store: str, digests: list[str]) -> list[str]:
        s = self._store(store)
        return [d for d in digests if not s.has(d)]

    def store_put_files(self, store: str, files: dict[str, str]) -> dict[str, str]:
        """Copy files (digest -> path) into the store as one pack; return digests that failed
        verification (the file changed since it was hashed) with their actual digest."""
        return self._store(store).put_files(files)

    def stage(self, store: str, digest: str, path: str, mode: int) -> None:
        """Write an object's verified bytes to the stage file `path`."""
        self.write_new(path, self._store(store).get(digest), mode)

    # ---- lock --------------------------------------------------------------------------
    def lock(self, path: str, holder: dict) -> dict | None:
        """Take the lock file; return None on success or the live holder's record."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        holder = dict(holder, pid=os.getpid(), host=_hostname(), since=time.time())
        for _ in range(3):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                current = self._read_lock(path)
                if current and current.get("host") == _hostname() and not _alive(current.get("pid", 0)):
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

    # ---- audit -------------------------------------------------------------------------
    def dist_infos(self, site: str) -> list[str]:
        """The names of every *.dist-info directory in a site-packages directory."""
        return [n for n in self.listdir(site) if n.endswith(".dist-info")]

    def audit_record(self, site: str, dist_infos: list[str], cache_dir: str | None = None) -> dict[str, dict]:
        """Check installed distributions against their RECORD (hash, size), one stat cache each.

        Returns, per dist-info name: {"files": checked, "findings": [[path, kind, detail], ...]}.
        Entries without a hash (bytecode, RECORD itself) are skipped; a console script whose
        shebang line alone was rewritten is not a finding.
        """
        return {name: _check_record(site, name, cache_dir) for name in dist_infos}

    def audit_bytecode(self, site: str, cache_tag: str, verify: list[str], cache: str | None = None) -> dict:
        """Every .pyc below `site` that Python would run instead of its source: a header that
        matches a changed source, an unchecked-hash pyc of other code, a legacy pyc with no source.
        Stale pycs (header differs: Python recompiles them) and __pycache__ entries without a
        source (never imported) are only counted.

        `verify` names sources (relative to site) whose pyc is also recompiled and compared,
        which catches a pyc whose header matches a source that was changed in the same tick.
        `cache` keeps each clean pyc's verdict keyed by its own and its source's stat identity.
        """
        return _check_bytecode(site, cache_tag, verify, cache)


def _hostname() -> str:
    import socket

    return socket.gethostname()


def _pool(max_workers: int):
    """A thread pool, imported only when a scan is big enough to want one."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=max_workers)


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



# ---- audit: installed files against RECORD, bytecode against its source ------------------------
_AUDIT_WORKERS = min(8, (os.cpu_count() or 2) * 2)


def _record_digest(path: str, algo: str, size: int = 0) -> str:
    """`algo:<urlsafe base64 without padding>`, the form RECORD files use."""
    import base64

    h = hashlib.new(algo)
    with open(path, "rb") as f:
        if 0 < size < _CHUNK:
            h.update(f.read())
        else:
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                h.update(chunk)
    return f"{algo}:{base64.urlsafe_b64encode(h.digest()).rstrip(b'=').decode()}"


def _record_rows(path: str) -> Iterator[tuple[str, str, str, int | None]]:
    """(path, algo, b64 digest, size) of every RECORD row that carries a hash."""
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.reader(f):
            if len(row) < 2 or not row[1] or "=" not in row[1]:
                continue
            algo, _, b64 = row[1].partition("=")
            size = int(row[2]) if len(row) > 2 and row[2].isdigit() else None
            yield row[0], algo, b64, size


_LAUNCHER = None


def _is_launcher(rest: bytes, entry_points: set[str]) -> bool:
    """pip/distlib's console-script template calling one of this distribution's entry points."""
    import re

    global _LAUNCHER
    if _LAUNCHER is None:
        _LAUNCHER = re.compile(
            rb"(?:# -\*- coding: utf-8 -\*-\n)?import re\nimport sys\nfrom ([\w.]+) import ([\w.]+)\n"
            rb"if __name__ == ['\"]__main__['\"]:\n    sys\.argv\[0\] = re\.sub\(.*\)\n"
            rb"    sys\.exit\(([\w.]+)\(\)\)\n?")
    m = _LAUNCHER.fullmatch(rest)
    return bool(m) and f"{m.group(1).decode()}:{m.group(2).decode()}" in entry_points


def _shebang_only(path: str, algo: str, expected: str, entry_points: set[str]) -> bool:
    """True when a script differs from RECORD in its interpreter line alone (rewritten on install
    or relocation): its body is the wheel's with `#!python`, or a generated launcher."""
    import base64

    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return False
    if not data.startswith(b"#!"):
        return False
    first, _, rest = data.partition(b"\n")
    if rest.startswith(b"'''exec' "):  # pip's long-shebang form: #!/bin/sh, '''exec' python "$0" "$@", ' '''
        rest = rest.split(b"\n", 2)[-1]
    elif b"python" not in first:
        return False
    for head in (b"#!python\n", b"#!python\r\n"):
        h = hashlib.new(algo, head + rest).digest()
        if f"{algo}:{base64.urlsafe_b64encode(h).rstrip(b'=').decode()}" == expected:
            return True
    return _is_launcher(rest, entry_points)


def _console_scripts(dist_dir: str) -> set[str]:
    out: set[str] = set()
    section = ""
    try:
        with open(os.path.join(dist_dir, "entry_points.txt"), encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("["):
                    section = line.strip("[]").strip()
                elif "=" in line and section in ("console_scripts", "gui_scripts"):
                    out.add(line.split("=", 1)[1].split("[", 1)[0].strip())
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    return out


def _check_record(site: str, name: str, cache_dir: str | None) -> dict:
    dist_dir = os.path.join(site, name)
    record = os.path.join(dist_dir, "RECORD")
    if not os.path.exists(record):
        return {"files": 0, "findings": [], "note": "no RECORD: its files cannot be verified"}
    cache = StatCache(os.path.join(cache_dir, name + ".json") if cache_dir else None)
    findings: list[list] = []
    todo: list[tuple[str, str, str, str, os.stat_result]] = []
    checked = 0
    mismatched: list[tuple[str, str, str, str]] = []
    for rel, algo, b64, size in _record_rows(record):
        checked += 1
        path = os.path.normpath(os.path.join(site, rel))
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            findings.append([rel, "missing", "listed in RECORD, not on disk"])
            continue
        if not stat.S_ISREG(st.st_mode):
            findings.append([rel, "not-a-file", "RECORD lists a file; this is not a regular file"])
            continue
        expected = f"{algo}:{b64}"
        digest = cache.lookup(rel, st) if size is None or st.st_size == size else None
        if digest is not None:
            if digest != expected:
                mismatched.append((rel, path, algo, expected))
        elif size is not None and st.st_size != size:
            mismatched.append((rel, path, algo, expected))
        else:
            todo.append((rel, path, algo, expected, st))

    def work(job: tuple[str, str, str, str, os.stat_result]) -> tuple[str, str, str, str, str]:
        rel, path, algo, expected, st = job
        try:
            digest = _record_digest(path, algo, st.st_size)
        except OSError as exc:
            return rel, path, algo, expected, f"unreadable: {exc.strerror}"
        cache.remember(rel, st, digest)
        return rel, path, algo, expected, digest

    results = _in_batches(work, todo)
    mismatched.extend((rel, path, algo, expected) for rel, path, algo, expected, digest in results
                      if digest != expected)
    scripts = None
    for rel, path, algo, expected in mismatched:
        if rel.startswith("../") or os.path.isabs(rel):
            scripts = _console_scripts(dist_dir) if scripts is None else scripts
            if _shebang_only(path, algo, expected, scripts):
                continue
        try:
            size = os.stat(path).st_size
        except OSError:
            size = -1
        findings.append([rel, "changed", f"differs from RECORD ({expected.partition(':')[0]}, {size} bytes)"])
    cache.save()
    if cache.path and not os.path.exists(cache.path):  # an audit has run here: status may audit cheaply
        os.makedirs(os.path.dirname(cache.path), exist_ok=True)
        write_atomic(cache.path, b"{}")
    return {"files": checked, "findings": sorted(findings)}


def _in_batches(fn, jobs: list) -> list:
    """fn over jobs on all cores: batches of files per task, so that small files cost no more
    in pool overhead than they do to hash."""
    if len(jobs) <= 32:
        return [fn(j) for j in jobs]
    size = max(16, len(jobs) // (_AUDIT_WORKERS * 8))
    batches = [jobs[i:i + size] for i in range(0, len(jobs), size)]
    with _pool(max_workers=_AUDIT_WORKERS) as pool:
        return [r for rs in pool.map(lambda b: [fn(j) for j in b], batches) for r in rs]


def _pyc_source(rel: str, cache_tag: str) -> tuple[str, int] | None:
    """(source path, optimization level), both relative, of `<dir>/__pycache__/<stem>.<tag>[.opt-N].pyc`,
    or None when the pyc belongs to another interpreter."""
    cache_dir, _, name = rel.rpartition("/")
    parts = name[:-4].split(".")
    opt = 0
    if len(parts) > 2 and parts[-1].startswith("opt-"):
        opt = int(parts.pop()[4:] or 0) if parts[-1][4:].isdigit() else 0
    if len(parts) < 2 or parts[-1] != cache_tag:
        return None
    parent = cache_dir.rpartition("/")[0]
    stem = ".".join(parts[:-1])
    return (f"{parent}/{stem}.py" if parent else f"{stem}.py"), opt


def _walk_pyc(root: str) -> Iterator[tuple[str, bool]]:
    """(relative path, in __pycache__) of every .pyc below root, streamed directory by directory."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(f"{root}/{rel_dir}" if rel_dir else root) as it:
                entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        in_cache = rel_dir.endswith("__pycache__") and rel_dir.rpartition("/")[2] == "__pycache__"
        prefix = f"{rel_dir}/" if rel_dir else ""
        for name, is_dir in entries:
            if is_dir:
                if not name.endswith(".dist-info"):
                    stack.append(prefix + name)
            elif name.endswith(".pyc"):
                yield prefix + name, in_cache


def _check_bytecode(site: str, cache_tag: str, verify: list[str], cache_path: str | None = None) -> dict:
    deep = set(verify)
    cache = StatCache(cache_path)  # verdicts of clean pycs, keyed by the pyc's and its source's identity
    findings: list[list] = []
    pycs = orphans = stale = 0
    for rel, in_cache in _walk_pyc(site):
        pyc = f"{site}/{rel}"
        if not in_cache:  # a legacy pyc beside its module: imported only when there is no source
            src = pyc[:-1]
            if not os.path.exists(src):
                pycs += 1
                findings.append([rel, "sourceless", "a .pyc without its .py: Python imports this bytecode"])
            continue
        found = _pyc_source(rel, cache_tag)
        if found is None:
            continue
        src_rel, opt = found
        src = f"{site}/{src_rel}"
        pycs += 1
        try:
            st, pst = os.stat(src), os.stat(pyc)
        except (FileNotFoundError, NotADirectoryError):
            orphans += 1  # a __pycache__ entry without source is never imported
            continue
        source_id = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        compare = src_rel in deep
        known = None if compare else cache.lookup(rel, pst)
        if known is not None and known[0] == source_id:
            stale += known[1]
            continue
        verdict = _pyc_verdict(pyc, src, st, opt, compare)
        if verdict is None or verdict == "stale":
            stale += verdict == "stale"
            if max(st.st_mtime_ns, st.st_ctime_ns) + cache.GRANULARITY_NS < cache.started_ns:
                cache.remember(rel, pst, [source_id, int(verdict == "stale")])
        else:
            findings.append([rel, *verdict])
    cache.save()
    return {"pycs": pycs, "orphans": orphans, "stale": stale, "findings": sorted(findings)}


def _pyc_verdict(pyc: str, src: str, st: os.stat_result, opt: int, compare: bool) -> tuple[str, str] | str | None:
    """None when the pyc runs its source's code, "stale" when Python will recompile it, else a
    finding (kind, detail). With `compare`, a pyc whose header matches is also recompiled."""
    import importlib.util
    import marshal

    magic = importlib.util.MAGIC_NUMBER
    try:
        with open(pyc, "rb") as f:
            head = f.read(16)
    except OSError as exc:
        return "unreadable", exc.strerror or str(exc)
    if len(head) < 16:
        return "stale"  # Python recompiles it on import: never run, not a finding
    flags = int.from_bytes(head[4:8], "little")
    if flags & 1:  # hash-based (PEP 552)
        if head[:4] != magic:
            return None  # compiled by another interpreter version: its source hash cannot be computed here
        with open(src, "rb") as f:
            source_hash = importlib.util.source_hash(f.read())
        if source_hash == head[8:16]:
            return None
        if flags & 2:
            return "stale"
        return "mismatch", (f"unchecked-hash pyc was compiled from other code than "
                            f"{os.path.basename(src)}: Python runs it without checking")
    mtime = int.from_bytes(head[8:12], "little")
    size = int.from_bytes(head[12:16], "little")
    if mtime != (int(st.st_mtime) & 0xFFFFFFFF) or size != (st.st_size & 0xFFFFFFFF):
        return "stale"
    if compare and head[:4] == magic:
        try:
            with open(pyc, "rb") as f:
                code = marshal.loads(f.read()[16:])
            with open(src, "rb") as f:
                fresh = compile(f.read(), src, "exec", dont_inherit=True, optimize=opt)
        except (ValueError, EOFError, TypeError, SyntaxError) as exc:
            return "mismatch", f"cannot be compared with its source: {exc}"
        if code != fresh:
            return "mismatch", (f"its header matches {os.path.basename(src)} but its code "
                                "does not: Python runs the old code")
    return None
