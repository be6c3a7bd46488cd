"""One module per verb; each exposes a plain function that returns an exit code."""

from __future__ import annotations

from collections.abc import Callable

from ..change import changes
from ..change.document import Report
from ..change.plans import Plan
from ..change.rollout import Done, Noted
from ..change.service import ServiceConfig
from ..change.session import Session
from ..errors import BadInput
from ..printable import emit_json as emit_json  # the verbs print their --json documents with it
from ..workspace import Workspace


def check_sides(verb: str, names: tuple[str, ...], against: str | None) -> None:
    """`verb` (diff, diff --env) compares one target, with its recorded state (--against), or two
    targets with each other: refuse anything else the same way for both."""
    if len(names) > 2:
        raise BadInput(
            f"{verb} compares one target or two, not {len(names)}",
            f"patchkeeper {verb} HOST [--against STATE], or patchkeeper {verb} HOST1 HOST2",
        )
    if len(names) == 2 and against:
        raise BadInput(
            "--against compares one target with its own recorded state",
            f"drop --against to compare the two targets: patchkeeper {verb} {names[0]} {names[1]}",
        )


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
