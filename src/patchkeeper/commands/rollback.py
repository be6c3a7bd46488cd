"""`patchkeeper rollback --to STATE`: give every managed file that state's exact bytes and mode."""

from __future__ import annotations

from ..change import changes, engine
from ..change.document import Report
from ..change.rollout import Noted
from ..change.session import Session
from ..change.show_plan import step_printer
from ..workspace import Workspace
from .finish import finish


def rollback(
    ws: Workspace,
    target: str | None,
    to: str,
    dry_run: bool,
    verify: bool = True,
    as_json: bool = False,
    noted: Noted | None = None,
) -> int:
    """`noted` (a rollout's) is told what happened on the target, as a value; `as_json`: one document."""
    with Report(as_json, f"rollback --to {to}", target, step_printer) as report:
        svc = changes.service_of(ws.target(target), verify)
        with Session(ws, target, f"rollback --to {to}", hands_off=dry_run) as s:
            show = report.shower(s.target.name)
            plan = engine.plan_rollback(s, to)
            return finish(ws, s, plan, f"already in state {to}", dry_run, svc, show, report, noted)
