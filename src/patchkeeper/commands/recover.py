"""`patchkeeper recover`: finish or undo an interrupted transaction (the session does the work)."""

from __future__ import annotations

from ..session import Session
from ..workspace import Workspace


def recover(ws: Workspace, target: str | None) -> int:
    with Session(ws, target, "recover") as s:
        if s.recovered is None:
            print(f"{s.target.name}: nothing to recover; no transaction was interrupted")
        else:
            print(f"{s.target.name}: {s.recovered}")
        return 0
