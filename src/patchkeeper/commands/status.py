"""`patchkeeper status`: the applied stack, and whether the files still match the recorded state."""

from __future__ import annotations

from .. import audit, engine
from ..session import Session
from ..workspace import Workspace
from . import emit_json


def status(ws: Workspace, target: str | None, as_json: bool) -> int:
    with Session(ws, target, "status", write=False) as s:
        info = s.target.info
        current = s.ledger.current()
        doc = {"target": s.target.name, "host": info.host, "package": info.package, "version": info.version,
               "site": info.site, "state_dir": info.state_dir, "state": current.to_dict() if current else None,
               "differences": {}, "unfinished": s.unfinished.message if s.unfinished else None}
        if current is not None:
            doc["differences"] = engine.drift(s.target, current.manifest)  # compared on the target
        if as_json:
            emit_json(doc)
            return 0
        print(f"target {s.target.name}: {info.package} {info.version} in {info.site}")
        if s.unfinished is not None:
            print(f"UNFINISHED: {s.unfinished.message}\n  hint: {s.unfinished.hint}")
        if current is None:
            print("no recorded state: patchkeeper has not changed this target yet")
            return 0
        print(f"state {current.id}{' (' + current.name + ')' if current.name else ''}: {current.stack_text()}")
        for p in current.stack:
            print(f"  {p['name']}@{p['version']}  {p['digest'][:19]}…")
        if audit.is_warm(s.target):  # cheap only when the audit's stat caches are warm
            print("audit: " + audit.audit_target(s.target, s.ledger, owners=engine.owners_of(ws, current.stack)).summary())
        diffs = doc["differences"]
        if not diffs:
            print("files match the recorded state")
        else:
            print(f"{len(diffs)} file(s) differ from the recorded state (changed outside patchkeeper):")
            for key, kind in list(diffs.items())[:20]:
                print(f"  {kind:8} {key}")
            if len(diffs) > 20:
                print(f"  … and {len(diffs) - 20} more")
        return 0
