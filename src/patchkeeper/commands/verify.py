"""`patchkeeper verify`, and verification after a change with an automatic rollback when it fails."""

from __future__ import annotations

import dataclasses
import sys

from .. import engine, service
from ..errors import EXIT_DIFFERS, EXIT_ROLLED_BACK, BadInput
from ..ledger import LedgerEntry
from ..service import ServiceConfig
from ..session import Session
from ..verify import Report, describe, last_pass, record, run_checks
from ..workspace import Workspace
from . import emit_json
from .show_plan import describe as describe_plan
from .snapshot import mirror

PREVIOUS_FAILS = "the previous code state fails as well: the fault is likely not in the patch set"


def verify(ws: Workspace, target: str | None, as_json: bool, with_restart: bool) -> int:
    """The checks alone (restarting first only with --restart), recorded in the ledger."""
    with Session(ws, target, "verify" + (" --restart" if with_restart else "")) as s:
        svc = service.load(s.config)
        if svc is None:
            raise BadInput(f"target {s.target.name} has no [targets.{s.target.name}.service] table",
                           "add one with restart and base_url (see 'Verifying a service by generation' in the README)")
        report = run_checks(s.target, svc, with_restart, progress=sys.stderr,
                            last_pass=last_pass(s.ledger, s.ledger.current()))
        entry = record(s, report, "verify", None)
        if entry is not None:
            mirror(ws, s, manifest=False)
        if as_json:
            emit_json({"target": s.target.name, "state": s.ledger.current().to_dict() if s.ledger.current() else None,
                       **report.to_dict()})
        else:
            describe(report, s.target.name, s.ledger.current())
        return 0 if report.ok else EXIT_DIFFERS


def after_change(ws: Workspace, s: Session, svc: ServiceConfig, change: LedgerEntry) -> int:
    """Restart and verify after `change` committed; an apply or switch that fails is rolled back."""
    name = s.target.name
    print(f"{name}: restarting and verifying the service (--no-verify skips this)")
    report = _verify(s, svc, change.kind, change.id)
    if report.ok:
        mirror(ws, s, manifest=False)  # the state is the one the change just mirrored
        return 0
    if change.kind not in ("apply", "switch") or change.before is None:
        mirror(ws, s, manifest=False)
        print(f"{name}: state {change.after.id} is in place, but the service fails verification ({report.reason})")
        print(f"  hint: run `patchkeeper audit -t {name}` to see what differs on the target")
        return EXIT_DIFFERS
    previous = change.before
    print(f"{name}: verification failed after {change.kind} ({report.reason}); "
          f"rolling back to the previous state {previous.id}: {previous.stack_text()}")
    plan = engine.plan_rollback(s, previous.id)
    if plan is not None:
        entry = dataclasses.replace(plan.entry, command=f"{s.command} (automatic rollback)",
                                    extra={"automatic": True, "undoes": change.id, "reason": report.reason})
        plan = dataclasses.replace(plan, entry=entry)
        engine.execute(s, plan)
        describe_plan(plan, name, dry_run=False)
    again = _verify(s, svc, "automatic rollback", plan.entry.id if plan else change.id)
    mirror(ws, s)
    if again.ok:
        print(f"{name}: FAILED and rolled back: {change.kind} to {change.after.stack_text()} failed verification "
              f"({report.reason}); state {previous.id} is back in place and verifies")
    else:
        print(f"{name}: FAILED and rolled back to state {previous.id}, but {PREVIOUS_FAILS} "
              f"({again.reason}: {again.problems[0] if again.problems else again.message})")
        print(f"  hint: run `patchkeeper audit -t {name}` to see what else differs on the target")
    return EXIT_ROLLED_BACK


def _verify(s: Session, svc: ServiceConfig, phase: str, of: str) -> Report:
    report = run_checks(s.target, svc, with_restart=True, progress=sys.stderr,
                        last_pass=last_pass(s.ledger, s.ledger.current()))
    record(s, report, phase, of)
    describe(report, s.target.name, s.ledger.current())
    return report
