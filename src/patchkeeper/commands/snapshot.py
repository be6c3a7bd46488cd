"""`patchkeeper snapshot --name NAME`: record a named state; `mirror` copies records to the workspace."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import engine, faults
from ..host.disk import algorithm_of, hash_bytes, write_atomic
from ..session import Session
from ..workspace import Workspace


def snapshot(ws: Workspace, target: str | None, name: str, manifest_only: bool) -> int:
    from ..errors import BadInput

    if name in ("previous",) or not name.strip():
        raise BadInput(f"{name!r} cannot name a state", "pick another name")
    with Session(ws, target, f"snapshot --name {name}") as s:
        engine.ensure_baseline(s, bytes_kept=not manifest_only)
        entry = engine.record_state(s, "snapshot", name, bytes_kept=not manifest_only)
        mirror_or_warn(ws, s, f"state {entry.after.id} was recorded on {s.target.name}")
        kept = "digests only" if manifest_only else "bytes kept"
        print(f"{s.target.name}: recorded state {entry.after.id} as {name!r} "
              f"({entry.extra['files']} files, {kept})")
        return 0


RECENT = 20  # the manifests of the states of the newest ledger entries are checked on every mirror


def mirror(ws: Workspace, s: Session, manifest: bool = True, check_all: bool = False) -> list:
    """Copy the target's ledger entries and the manifest of every state they name into
    snapshots/<target>/ (manifests/<state id>.txt), and the current state as manifest.txt and
    state.json, whose git history reads as the target's.

    Every file is written whole or not at all (temp file, fsync, rename). A copy that is missing or
    damaged (a ledger entry that differs, a manifest whose bytes do not hash to its digest) is
    written again; manifests are checked for the newest states, or all of them with `check_all`.
    """
    out = ws.snapshots_dir / s.target.name
    (out / "ledger").mkdir(parents=True, exist_ok=True)
    (out / "manifests").mkdir(exist_ok=True)
    written, fresh = [], []
    repaired = False
    texts: dict[str, bytes] = {}
    entries = s.ledger.entries()
    recent = {e.after.id for e in entries[-RECENT:]}
    checked: set[str] = set()
    for entry in entries:
        path = out / "ledger" / entry.file_name()
        doc = entry.to_dict()
        copy = _read(path)
        if copy is None or _parsed(copy) != doc:
            _write(path, (json.dumps(doc, indent=1) + "\n").encode())
            written.append(path)
            if copy is None:
                fresh.append(entry)
            else:
                repaired = True
        state = entry.after
        if not manifest or state.id in checked:
            continue
        checked.add(state.id)
        kept = out / "manifests" / f"{state.id}.txt"
        if check_all or state.id in recent:
            copy = _read(kept)
            intact = copy is not None and hash_bytes(copy, algorithm_of(state.manifest)) == state.manifest
        else:
            intact = kept.exists()
        if not intact:
            texts.setdefault(state.manifest, s.target.agent.store_get(s.target.info.store, state.manifest))
            _write(kept, texts[state.manifest])
            written.append(kept)
            repaired = repaired or entry not in fresh
    current = s.ledger.current()
    if current is not None and manifest:
        text = texts.get(current.manifest) or (out / "manifests" / f"{current.id}.txt").read_bytes()
        state_doc = (json.dumps({"target": s.target.name, **current.to_dict()}, indent=1) + "\n").encode()
        for path, data in ((out / "manifest.txt", text), (out / "state.json", state_doc)):
            if _read(path) != data:
                _write(path, data)
            written.append(path)
    if fresh or repaired:
        from .. import history

        message = history_message(s.target.name, fresh) if fresh else \
            f"{s.target.name}: records copied again into the workspace (patchkeeper {s.command})\n"
        history.commit_paths(ws.root, [out] if repaired else written, message)
    return written


def mirror_or_warn(ws: Workspace, s: Session, done: str, check_all: bool = False, manifest: bool = True) -> bool:
    """Mirror after a change that is already done on the target: a failure is a warning saying so
    and how to copy the records again, never an error that would claim nothing changed."""
    from ..errors import PatchkeeperError

    try:
        mirror(ws, s, manifest=manifest, check_all=check_all)
        return True
    except (OSError, PatchkeeperError) as exc:
        why = (f"{exc.strerror}{': ' + str(exc.filename) if exc.filename else ''}" if isinstance(exc, OSError)
               and exc.strerror else str(exc).splitlines()[0])
        print(f"patchkeeper: warning: {done}, but its records could not be copied into "
              f"{ws.snapshots_dir / s.target.name}: {why}\n"
              f"  hint: make room, then run `patchkeeper recover -t {s.target.name}`: it copies them again",
              file=sys.stderr)
        return False


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _parsed(data: bytes):
    try:
        return json.loads(data)
    except ValueError:
        return None


def _write(path: Path, data: bytes) -> None:
    faults.disk_full(str(path))
    write_atomic(str(path), data)


def history_message(target: str, entries: list) -> str:
    """Commit message of a target's history: the command, the patch sets (name@version), the target."""
    last = entries[-1]
    sets = ", ".join(f"{p['name']}@{p['version']}" for p in last.patchsets)
    what = sets or (f"state {last.after.name!r}" if last.after.name else last.after.stack_text())
    lines = [f"{target}: {last.kind} {what} (patchkeeper {last.command})", ""]
    for e in entries:
        lines.append(f"{e.kind} {e.before.id if e.before else '-'} -> {e.after.id}: {e.after.stack_text()}; "
                     f"{len(e.changed)} file(s) changed; transaction {e.id}")
    return "\n".join(lines) + "\n"
