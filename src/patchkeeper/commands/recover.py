"""`patchkeeper recover`: finish or undo an interrupted transaction (the session does it), copy the records again."""

from __future__ import annotations

from ..change.mirror import try_mirror
from ..change.session import Session
from ..change.show_plan import render_not_mirrored
from ..workspace import Workspace
from . import json_answer


def recover(ws: Workspace, target: str | None, as_json: bool = False) -> int:
    """Finish or undo the target's interrupted transaction, commit a record left uncommitted, copy the
    records; with --json: {"target", "recovered", "patchsets", "mirrored"}."""
    with json_answer(as_json) as doc:
        return _recover(ws, target, doc)


def _recover(ws: Workspace, target: str | None, doc: dict[str, object]) -> int:
    doc["patchsets"] = list(ws.recovered)
    for line in ws.recovered:  # the workspace's own: a save of a patch set, finished as the command began
        print(f"patchsets: {line}")
    with Session(ws, target, "recover") as s:
        s.warn_installation()
        s.ledger.entries()  # a damaged entry is an error of its own, not a copy that could not be made
        if s.recovered is None:
            print(f"{s.target.name}: nothing to recover; no transaction was interrupted")
        else:
            print(f"{s.target.name}: {s.recovered}")
        failed = try_mirror(
            ws,
            s,
            f"{s.target.name} is recovered" if s.recovered else f"{s.target.name} needed no recovery",
            check_all=True,
        )
        doc.update(target=s.target.name, recovered=s.recovered, mirrored=failed is None)
        if failed is not None:
            render_not_mirrored(failed)
            return 0 if s.recovered else 2
        return 0
