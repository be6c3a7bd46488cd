"""After a change on a target with a [service]: restart and verify it, and roll an apply or switch
that fails back automatically; each step is a value the command renders as it comes."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

from ..errors import EXIT_DIFFERS, EXIT_ROLLED_BACK
from ..records.ledger import LedgerEntry, RollbackExtra, State
from ..workspace import Workspace
from . import engine, plans
from .diagnosis import diagnose
from .mirror import mirror_step
from .service import ServiceConfig
from .session import Session
from .verify import Verification, record_verification, verify_target


@dataclass(frozen=True)
class Verifying:
    """The service is being restarted and verified after `change`."""

    change: LedgerEntry


@dataclass(frozen=True)
class Verified:
    """One verification, recorded in the ledger while `state` was current."""

    report: Verification
    state: State | None


@dataclass(frozen=True)
class KeptFailing:
    """The change stays (it cannot be rolled back automatically) although verification failed."""

    change: LedgerEntry
    report: Verification


@dataclass(frozen=True)
class RollingBack:
    """Verification failed after `change`: the target goes back to `previous`."""

    change: LedgerEntry
    report: Verification
    previous: State


@dataclass(frozen=True)
class RolledBack:
    """The automatic rollback is done; `again` is the verification of the state restored."""

    change: LedgerEntry
    report: Verification
    previous: State
    again: Verification


@dataclass(frozen=True)
class SincePassed:
    """A state fails verification: what changed since it last passed (diagnosis.Diagnosis: its files,
    the environment, the command to run next). After an automatic rollback its code is back in
    place, so the environment is what is left to blame."""

    diagnosis: Any  # diagnosis.Diagnosis


Step = Union[Verifying, Verified, KeptFailing, RollingBack, RolledBack, SincePassed]  # noqa: UP007


def after_change(
    ws: Workspace, s: Session, svc: ServiceConfig, change: LedgerEntry, step: Callable[[Any], None]
) -> int:
    """Restart and verify after `change` committed; an apply or switch that fails is rolled back."""
    step(Verifying(change))
    report = _verify(s, svc, change.kind, change.id, step)
    if report.ok:
        mirror_step(ws, s, "the verification was recorded", step, manifest=False)  # the state was mirrored
        return 0
    if change.kind not in ("apply", "switch") or change.before is None:  # a rollback, a repair: they stay
        mirror_step(ws, s, "the verification was recorded", step, manifest=False)
        step(KeptFailing(change, report))
        current = s.ledger.current()
        if current is not None:
            step(SincePassed(diagnose(s.target, s.ledger, current)))
        return EXIT_DIFFERS
    previous = change.before
    step(RollingBack(change, report, previous))
    plan = engine.plan_rollback(s, previous.id)
    if plan is not None:
        entry = dataclasses.replace(
            plan.entry,
            command=f"{s.command} (automatic rollback)",
            extra=RollbackExtra(automatic=True, undoes=change.id, reason=report.reason),
        )
        plan = dataclasses.replace(plan, entry=entry)
        engine.execute(s, plan)
        step(plans.Changed(plan, False))
    again = _verify(s, svc, "automatic rollback", plan.entry.id if plan else change.id, step)
    mirror_step(ws, s, f"{s.target.name} was rolled back", step)
    step(RolledBack(change, report, previous, again))
    if not again.ok:
        step(SincePassed(diagnose(s.target, s.ledger, previous, restored=True)))
    return EXIT_ROLLED_BACK


def _verify(s: Session, svc: ServiceConfig, phase: str, of: str, step: Callable[[Any], None]) -> Verification:
    report = verify_target(
        s.target,
        s.ledger,
        svc,
        with_restart=True,
        progress=sys.stderr,
        patchsets_dir=s.workspace.patchsets_dir,
    )
    record_verification(s, report, phase, of)
    step(Verified(report, s.ledger.current()))
    return report
