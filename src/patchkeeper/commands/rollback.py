"""`patchkeeper rollback --to STATE`: give every managed file that state's exact bytes and mode."""

from __future__ import annotations

from ..change import changes, engine
from ..change.session import Session
from ..workspace import Workspace
from .document import Report
from .rollout import Done, Noted
from .show_plan import step_printer


def rollback(ws: Workspace, target: str | None, to: str, dry_run: bool, verify: bool = True,
             as_json: bool = False, noted: Noted | None = None) -> int:
    """`noted` (a rollout's) is told what happened on the target, as a value; `as_json`: one document."""
    with Report(as_json, f"rollback --to {to}", target, step_printer) as report:
        svc = changes.service_of(ws.target(target), verify)
        with Session(ws, target, f"rollback --to {to}", hands_off=dry_run) as s:
            show = report.shower(s.target.name)
            plan = engine.plan_rollback(s, to)
            if plan is None:
                print(f"{s.target.name}: already in state {to}; nothing to do")
                if noted is not None:
                    noted(Done.unchanged(s, f"already in state {to}"))
                current = s.ledger.current()
                return report.done(0, current, current, dry_run)
            outcome = changes.carry_out(ws, s, plan, dry_run, svc, show)
            if noted is not None:
                noted(Done.of(s, plan, outcome, dry_run, svc is not None))
            return report.done(outcome.exit_code, plan.entry.before,
                               plan.entry.after if dry_run else s.ledger.current(), dry_run)
