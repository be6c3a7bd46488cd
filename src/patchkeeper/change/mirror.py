"""The workspace's copy of a target's records (snapshots/<target>/): written after each change, repaired by recover."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import faults
from ..errors import PatchkeeperError, StoreError
from ..host import manifest_text
from ..host.disk import (
    TEMP_PREFIX,
    algorithm_of,
    discard,
    fsync_dir,
    fsync_path,
    hash_bytes,
    map_threads,
)
from ..host.manifests import DAMAGED_HINT
from ..records import ledger_index
from ..records.ledger import State
from ..workspace import Workspace
from .session import Session


@dataclass(frozen=True)
class NotMirrored:
    """`done` happened on the target, but its records could not be copied into `where` (the
    workspace's snapshots/<target>/): a warning, never an error that would say nothing changed."""

    done: str
    target: str
    where: Path
    reason: str
    errno: int | None = None  # the file system's refusal, when that was it (EROFS, ENOSPC...)
    hint: str = ""  # what to do, when the refusal says (a damaged manifest in the state dir)


def mirror(ws: Workspace, s: Session, manifest: bool = True, check_all: bool = False) -> list[Path]:
    """Copy the target's ledger entries and the manifest of every state they name into
    snapshots/<target>/ (manifests/<state id>.txt), and the current state as manifest.txt and
    state.json, whose git history reads as the target's.

    Every file is written whole or not at all (temp file, fsync, rename; the files of one mirror
    together), so a copy that exists is whole; a missing one is written again (one listing of each
    directory says which exist). `check_all` (what `recover` asks for) also reads every
    copy and writes again a damaged one: a ledger entry that differs, a manifest whose bytes do not
    hash to its digest (an older version could leave one cut short on a full disk). A manifest is
    parsed before it is copied (`_checked`): a damaged or hostile one is refused, nothing is written.
    """
    out = ws.snapshots_dir / s.target.name
    (out / "ledger").mkdir(parents=True, exist_ok=True)
    (out / "manifests").mkdir(exist_ok=True)
    written, fresh = [], []
    pending: list[tuple[Path, bytes]] = []
    repaired = False
    texts: dict[str, bytes] = {}
    checked: set[str] = set()
    copies, manifests = (
        set(os.listdir(out / "ledger")),
        set(os.listdir(out / "manifests")),
    )  # no stat per entry
    entries = s.ledger.entries()
    for i, slot in enumerate(entries.slots):  # an entry is built only where a copy is read or written
        name = ledger_index.file_name(slot.seq, slot.id)
        copy = _read(out / "ledger" / name) if check_all else (b"" if name in copies else None)
        new = copy is None
        if copy is None or (check_all and _parsed(copy) != entries[i].to_dict()):
            path = out / "ledger" / name
            pending.append((path, (json.dumps(entries[i].to_dict(), indent=1) + "\n").encode()))
            written.append(path)
            if new:
                fresh.append(entries[i])
            else:
                repaired = True
        if not manifest or slot.after in checked:
            continue
        checked.add(slot.after)
        kept = out / "manifests" / f"{slot.after}.txt"
        if check_all or kept.name not in manifests:
            state = entries[i].after
            copy = _read(kept) if check_all else None
            intact = copy is not None and hash_bytes(copy, algorithm_of(state.manifest)) == state.manifest
        else:
            intact = True
        if not intact:
            if state.manifest not in texts:
                texts[state.manifest] = _checked(
                    s, state, s.target.agent.store_get(s.target.info.store, state.manifest)
                )
            pending.append((kept, texts[state.manifest]))
            written.append(kept)
            repaired = repaired or not new
    current = s.ledger.current()
    if current is not None and manifest:
        text = texts.get(current.manifest) or (out / "manifests" / f"{current.id}.txt").read_bytes()
        state_doc = (json.dumps({"target": s.target.name, **current.to_dict()}, indent=1) + "\n").encode()
        for path, data in ((out / "manifest.txt", text), (out / "state.json", state_doc)):
            if _read(path) != data:
                pending.append((path, data))
            written.append(path)
    _write_all(pending)
    if (
        fresh or repaired
    ):  # committed once, when the command ends (Session): all, an earlier copy may be uncommitted
        s.record.add([out] if repaired else written, fresh, repaired)
    return written  # copies a command left uncommitted: committed as the next change's Session opens


def try_mirror(
    ws: Workspace, s: Session, done: str, manifest: bool = True, check_all: bool = False
) -> NotMirrored | None:
    """Mirror after `done` happened on the target; a failure comes back as a NotMirrored step."""
    try:
        mirror(ws, s, manifest=manifest, check_all=check_all)
        return None
    except (OSError, PatchkeeperError) as exc:
        if isinstance(exc, OSError) and exc.strerror:
            reason = exc.strerror + (f": {exc.filename}" if exc.filename else "")
        else:
            reason = str(exc).splitlines()[0]
        return NotMirrored(
            done,
            s.target.name,
            ws.snapshots_dir / s.target.name,
            reason,
            exc.errno if isinstance(exc, OSError) else None,
            exc.hint if isinstance(exc, PatchkeeperError) else "",
        )


def mirror_step(
    ws: Workspace, s: Session, done: str, step: Callable[[NotMirrored], None], manifest: bool = True
) -> None:
    failed = try_mirror(ws, s, done, manifest)
    if failed is not None:
        step(failed)


def _checked(s: Session, state: State, text: bytes) -> bytes:
    """A stored manifest's text, parsed before it is copied (host/manifest_text.parse): a hostile or
    damaged state dir's (a key that climbs, a setuid mode) is refused, and the workspace keeps the copy
    it had, which the refusal's hint says to put back from."""
    try:
        manifest_text.parse(text)
    except ValueError as exc:
        raise StoreError(
            f"state {state.id} of target {s.target.name}: the manifest {state.manifest} in its store is "
            f"damaged: {exc}",
            DAMAGED_HINT.replace("<target>", s.target.name),
        ) from None
    return text


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _parsed(data: bytes) -> object:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _write_all(files: list[tuple[Path, bytes]]) -> None:
    """Write each file whole or not at all, all at once: every temp file written, then synced
    together, then renamed into place, then each directory synced once (one wait for the disk
    where one file after the other made eight)."""
    if not files:
        return
    temps: list[str] = []
    try:
        for path, data in files:
            faults.disk_full(str(path))
            tmp = str(path.parent / f"{TEMP_PREFIX}{os.getpid()}-{time.monotonic_ns()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            temps.append(tmp)
            os.fchmod(fd, 0o644)  # as write_atomic: readable by all whatever the umask
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        map_threads(fsync_path, temps, 8)
        for tmp, (path, _) in zip(temps, files):
            os.replace(tmp, str(path))
    except BaseException:
        for tmp in temps:
            discard(tmp)
        raise
    for directory in dict.fromkeys(str(path.parent) for path, _ in files):
        fsync_dir(directory)
