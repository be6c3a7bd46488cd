"""`patchkeeper rollback --to STATE`: give every managed file that state's exact bytes and mode."""

from __future__ import annotations

from ..change import changes, engine
from ..change.session import Session
from ..workspace import Workspace
from .document import Report
from .show_plan import step_printer


def rollback(ws: Workspace, target: str | None, to: str, dry_run: bool, verify: bool = True,
             as_json: bool = False) -> int:
    with Report(as_json, f"rollback --to {to}", target, step_printer) as report:
        svc = changes.service_of(ws.target(target), verify)
        with Session(ws, target, f"rollback --to {to}") as s:
            show = report.shower(s.target.name)
            if not dry_run:
                engine.begin_fingerprint(s)
            plan = engine.plan_rollback(s, to)
            if plan is None:
                print(f"{s.target.name}: already in state {to}; nothing to do")
                current = s.ledger.current()
                return report.done(0, current, current, dry_run)
            code = changes.carry_out(ws, s, plan, dry_run, svc, show).exit_code
            return report.done(code, plan.entry.before, plan.entry.after if dry_run else s.ledger.current(), dry_run)
