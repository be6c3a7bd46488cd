"""The content-addressed object store: loose objects at objects/<algo>/ab/cdef…, packs for bulk."""

from __future__ import annotations

import json
import os
import time

from .disk import TEMP_PREFIX, algorithm_of, discard, hash_bytes, remove_stale_temps, write_atomic
from .errors import AgentError

TEMP_PACK = ".tmp-"  # a pack being written: .tmp-<pid>-<ns>


class Store:
    """Content-addressed objects: loose files at objects/<algo>/ab/cdef…, packs for bulk.

    Objects are written once, atomically, made read-only, and verified whenever read back:
    a corrupt object raises and is never handed out.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self._index: list[tuple[str, str, dict[str, list[int]]]] | None = None

    def _loose(self, digest: str) -> str:
        algo, _, hexd = digest.partition(":")
        if algo not in ("blake3", "sha256") or len(hexd) != 64 or hexd.strip("0123456789abcdef"):
            raise AgentError("bad-digest", f"not a digest: {digest!r}")  # it becomes a path below
        return os.path.join(self.root, "objects", algo, hexd[:2], hexd[2:])

    def _loose_digests(self, algorithms: set[str]) -> set[str]:
        """Every loose object's digest, from one listing per object directory (not a stat per digest)."""
        out: set[str] = set()
        for algo in algorithms:
            base = os.path.join(self.root, "objects", algo)
            try:
                subdirs = os.listdir(base)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for sub in subdirs:
                try:
                    out.update(
                        f"{algo}:{sub}{name}"
                        for name in os.listdir(os.path.join(base, sub))
                        if not name.startswith(TEMP_PREFIX)
                    )
                except (FileNotFoundError, NotADirectoryError):
                    continue
        return out

    def _packs(self) -> list[tuple[str, str, dict[str, list[int]]]]:
        """(pack, index path, digest -> [offset, size]) of every pack, oldest name first; an index's
        rows are read as JSON once and looked up as they are (`_where`), not copied row by row."""
        if self._index is None:
            packs = []
            pack_dir = os.path.join(self.root, "packs")
            for name in sorted(os.listdir(pack_dir)) if os.path.isdir(pack_dir) else []:
                if name.endswith(".idx"):
                    path = os.path.join(pack_dir, name)
                    pack = os.path.join(pack_dir, name[:-4] + ".pack")
                    try:
                        idx = self._read_index(path)
                    except (ValueError, TypeError) as exc:
                        raise _damaged_index(path, pack, exc) from None
                    packs.append((pack, path, idx))
            self._index = packs
        return self._index

    def _read_index(self, path: str) -> dict[str, list[int]]:
        """A pack index's rows (JSON: 5,600 rows of a baseline of sglang parse in about 2 ms, so no
        copy is kept between commands; issue 31)."""
        with open(path, "rb") as f:
            idx = json.loads(f.read())
        if not isinstance(idx, dict):
            raise TypeError(f"a JSON {type(idx).__name__}, not an object")
        return idx

    def _where(self, digest: str) -> tuple[str, int, int] | None:
        """(pack, offset, size) of a packed object (the first pack listing it), None when none does."""
        for pack, path, idx in self._packs():
            row = idx.get(digest)
            if row is not None:
                try:
                    offset, size = row
                    return pack, int(offset), int(size)
                except (ValueError, TypeError) as exc:
                    raise _damaged_index(path, pack, exc) from None
        return None

    def loose_path(self, digest: str) -> str:
        """Where the object is (or would be) kept loose."""
        return self._loose(digest)

    def damage(self) -> list[str]:
        """What is visibly broken in the store's layout: a pack without its index, or the reverse."""
        pack_dir = os.path.join(self.root, "packs")
        names = set(os.listdir(pack_dir)) if os.path.isdir(pack_dir) else set()
        out = []
        for name in sorted(names):
            stem, ext = os.path.splitext(name)
            if ext == ".pack" and stem + ".idx" not in names:
                out.append(f"the pack index {os.path.join(pack_dir, stem + '.idx')} is missing")
            elif ext == ".idx" and stem + ".pack" not in names:
                out.append(f"the pack {os.path.join(pack_dir, stem + '.pack')} is missing")
        if not os.path.isdir(self.root):
            out.append(f"the store {self.root} is missing")
        return out

    def has(self, digest: str) -> bool:
        if self._index is not None and self._where(digest) is not None:  # indexes read already: no stat
            return True
        return (
            os.path.exists(self._loose(digest)) or self._where(digest) is not None
        )  # else loose first: none read

    def put(self, data: bytes, digest: str | None = None) -> str:
        actual = hash_bytes(data, algorithm_of(digest) if digest else None)
        if digest is not None and digest != actual:
            raise AgentError("digest-mismatch", f"bytes hash to {actual}, not {digest}")
        if not self.has(actual) or not self._intact(actual):
            path = self._loose(actual)  # a loose object is read before a packed one: it mends a bad copy
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_atomic(path, data, 0o444)
        return actual

    def _intact(self, digest: str) -> bool:
        try:
            self.get(digest)
        except AgentError:
            return False
        return True

    def get(self, digest: str) -> bytes:
        path = self._loose(digest)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            where = self._where(digest)
            if where is None:
                raise AgentError("missing-object", f"object {digest} is not in the store {self.root}")  # noqa: B904
            pack, offset, size = where
            with open(pack, "rb") as f:
                f.seek(offset)
                data = f.read(size)
        if hash_bytes(data, algorithm_of(digest)) != digest:
            raise AgentError(
                "corrupt-object",
                f"object {digest} in {self.root} is corrupt (its bytes hash differently); "
                "it will not be restored",
            )
        return data

    def put_files(self, files: dict[str, str]) -> dict[str, str]:
        """Pack the files not yet stored; verify each against its expected digest while copying."""
        loose = self._loose_digests({algorithm_of(d) for d in files})
        todo = [(d, p) for d, p in files.items() if d not in loose and self._where(d) is None]
        mismatched: dict[str, str] = {}
        if not todo:
            return mismatched
        pack_dir = os.path.join(self.root, "packs")
        os.makedirs(pack_dir, exist_ok=True)
        tmp = os.path.join(pack_dir, f"{TEMP_PACK}{os.getpid()}-{time.monotonic_ns()}")
        index: dict[str, tuple[int, int]] = {}
        offset = 0
        try:
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
            try:
                write_atomic(base + ".idx", json.dumps(index).encode(), 0o444)
            except BaseException:
                os.unlink(base + ".pack")  # a pack without its index is never read: do not keep it
                raise
        except BaseException:
            discard(tmp)  # a pack that cannot be finished (no space, Ctrl-C) leaves nothing behind
            raise
        self._index = None
        return mismatched

    def clean(self) -> list[tuple[str, int]]:
        """Remove the temporary packs and indexes of dead writers; return (path, size) of each.
        A finished pack whose index is missing is kept: its bytes are backups, and the store's
        check names the missing index. Call it only under the target's lock: every pack writer holds it."""
        return remove_stale_temps(os.path.join(self.root, "packs"), (TEMP_PACK, TEMP_PREFIX))


def _damaged_index(path: str, pack: str, exc: Exception) -> AgentError:
    return AgentError(
        "damaged-index",
        f"the pack index {path} is damaged ({type(exc).__name__}: {exc}); "
        "the backups it lists cannot be found",
        f"move it and its pack aside (mv {path} {pack} /some/where/), then retry: states that "
        "need those backups are then refused by name; nothing was changed",
    )
