"""`patchkeeper rollback --to STATE`: give every managed file that state's exact bytes and mode."""

from __future__ import annotations

from .. import engine, service
from ..session import Session
from ..workspace import Workspace
from .show_plan import describe
from .snapshot import mirror


def rollback(ws: Workspace, target: str | None, to: str, dry_run: bool, verify: bool = True) -> int:
    svc = service.load(ws.target(target)) if verify else None
    with Session(ws, target, f"rollback --to {to}") as s:
        plan = engine.plan_rollback(s, to)
        if plan is None:
            print(f"{s.target.name}: already in state {to}; nothing to do")
            return 0
        if not dry_run:
            engine.execute(s, plan)
            mirror(ws, s)
        describe(plan, s.target.name, dry_run)
        if svc is not None and not dry_run:
            from .verify import after_change

            return after_change(ws, s, svc, plan.entry)
        return 0
