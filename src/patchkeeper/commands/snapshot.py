"""`patchkeeper snapshot --name NAME`: record a named state of a target."""

from __future__ import annotations

from typing import cast

from .. import engine
from ..changes import mirror
from ..errors import BadInput
from ..ledger import RecordExtra
from ..session import Session
from ..workspace import Workspace


def snapshot(ws: Workspace, target: str | None, name: str, manifest_only: bool) -> int:
    if name in ("previous",) or not name.strip():
        raise BadInput(f"{name!r} cannot name a state", "pick another name")
    with Session(ws, target, f"snapshot --name {name}") as s:
        baseline = engine.ensure_baseline(s, bytes_kept=not manifest_only)
        if baseline is not None:
            files = cast(RecordExtra, baseline.extra)["files"]
            print(f"recorded baseline of {s.target.name}: {files} files, state {baseline.after.id}")
        entry = engine.record_state(s, "snapshot", name, bytes_kept=not manifest_only)
        mirror(ws, s)
        kept = "digests only" if manifest_only else "bytes kept"
        print(f"{s.target.name}: recorded state {entry.after.id} as {name!r} "
              f"({cast(RecordExtra, entry.extra)['files']} files, {kept})")
        return 0
