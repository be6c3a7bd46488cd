"""`patchkeeper rollback --to STATE`: give every managed file that state's exact bytes and mode."""

from __future__ import annotations

from ..change import changes, engine
from ..change.session import Session
from ..workspace import Workspace
from .show_plan import step_printer


def rollback(ws: Workspace, target: str | None, to: str, dry_run: bool, verify: bool = True) -> int:
    svc = changes.service_of(ws.target(target), verify)
    with Session(ws, target, f"rollback --to {to}") as s:
        if not dry_run:
            engine.begin_fingerprint(s)
        plan = engine.plan_rollback(s, to)
        if plan is None:
            print(f"{s.target.name}: already in state {to}; nothing to do")
            return 0
        return changes.carry_out(ws, s, plan, dry_run, svc, step_printer(s.target.name)).exit_code
