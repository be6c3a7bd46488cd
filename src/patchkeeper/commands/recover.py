"""`patchkeeper recover`: finish or undo an interrupted transaction (the session does it), copy the records again."""

from __future__ import annotations

from ..session import Session
from ..workspace import Workspace


def recover(ws: Workspace, target: str | None) -> int:
    from .snapshot import mirror_or_warn

    with Session(ws, target, "recover") as s:
        if s.recovered is None:
            print(f"{s.target.name}: nothing to recover; no transaction was interrupted")
        else:
            print(f"{s.target.name}: {s.recovered}")
        copied = mirror_or_warn(ws, s, f"{s.target.name} is recovered" if s.recovered else
                                f"{s.target.name} needed no recovery", check_all=True)
        return 0 if copied or s.recovered else 2
