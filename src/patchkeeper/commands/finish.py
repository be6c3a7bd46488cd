"""The end of a change verb (apply, rollback): carry out its plan, tell a rollout, report."""

from __future__ import annotations

from collections.abc import Callable

from ..change import changes
from ..change.document import Report
from ..change.plans import Plan
from ..change.rollout import Done, Noted
from ..change.service import ServiceConfig
from ..change.session import Session
from ..workspace import Workspace


def finish(
    ws: Workspace,
    s: Session,
    plan: Plan | None,
    nothing: str,
    dry_run: bool,
    svc: ServiceConfig | None,
    show: Callable[[changes.Step], None],
    report: Report,
    noted: Noted | None,
) -> int:
    """The end of a change verb (apply, rollback): say `nothing` (to do) when there is no plan, else carry
    it out (execute, mirror, verify); tell a rollout (`noted`) and the report, and return the exit code."""
    if plan is None:
        print(f"{s.target.name}: {nothing}; nothing to do")
        if noted is not None:
            noted(Done.unchanged(s, nothing))
        current = s.ledger.current()
        return report.done(0, current, current, dry_run)
    outcome = changes.carry_out(ws, s, plan, dry_run, svc, show)
    if noted is not None:
        noted(Done.of(s, plan, outcome, dry_run, svc is not None))
    return report.done(
        outcome.exit_code, plan.entry.before, plan.entry.after if dry_run else s.ledger.current(), dry_run
    )
