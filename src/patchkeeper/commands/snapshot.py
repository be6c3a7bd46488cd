"""`patchkeeper snapshot --name NAME`: record a named state; `mirror` copies records to the workspace."""

from __future__ import annotations

import json

from .. import engine
from ..session import Session
from ..workspace import Workspace


def snapshot(ws: Workspace, target: str | None, name: str, manifest_only: bool, adopt: str | None = None) -> int:
    from ..errors import BadInput

    if name in ("previous",) or not name.strip():
        raise BadInput(f"{name!r} cannot name a state", "pick another name")
    with Session(ws, target, f"snapshot --name {name}") as s:
        engine.ensure_baseline(s, bytes_kept=not manifest_only, adopt=adopt)
        entry = engine.record_state(s, "snapshot", name, bytes_kept=not manifest_only)
        mirror(ws, s)
        kept = "digests only" if manifest_only else "bytes kept"
        print(f"{s.target.name}: recorded state {entry.after.id} as {name!r} "
              f"({entry.extra['files']} files, {kept})")
        return 0


def mirror(ws: Workspace, s: Session, manifest: bool = True) -> list:
    """Copy the target's ledger entries and the manifest of every state they name into
    snapshots/<target>/ (manifests/<state id>.txt, each written once), and the current state as
    manifest.txt and state.json, whose git history reads as the target's."""
    out = ws.snapshots_dir / s.target.name
    (out / "ledger").mkdir(parents=True, exist_ok=True)
    (out / "manifests").mkdir(exist_ok=True)
    written, fresh = [], []
    texts: dict[str, bytes] = {}
    for entry in s.ledger.entries():
        path = out / "ledger" / entry.file_name()
        if not path.exists():
            path.write_text(json.dumps(entry.to_dict(), indent=1) + "\n")
            written.append(path)
            fresh.append(entry)
        kept = out / "manifests" / f"{entry.after.id}.txt"
        if manifest and not kept.exists():
            texts.setdefault(entry.after.manifest, s.target.agent.store_get(s.target.info.store, entry.after.manifest))
            kept.write_bytes(texts[entry.after.manifest])
            written.append(kept)
    current = s.ledger.current()
    if current is not None and manifest:
        path = out / "manifest.txt"
        path.write_bytes(texts.get(current.manifest) or (out / "manifests" / f"{current.id}.txt").read_bytes())
        (out / "state.json").write_text(json.dumps({"target": s.target.name, **current.to_dict()}, indent=1) + "\n")
        written += [path, out / "state.json"]
    if fresh:
        from .. import history

        history.commit_paths(ws.root, written, history_message(s.target.name, fresh))
    return written


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
