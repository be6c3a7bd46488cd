"""The change pipeline: execute a plan, mirror it to snapshots/ (mirror.py), then verify (aftercheck.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from .. import faults
from ..checks import units
from ..host.contract import ROLE_PREFIX
from ..workspace import TargetConfig, Workspace
from . import engine, service
from .aftercheck import after_change
from .mirror import NotMirrored, mirror_step
from .plans import Changed, Plan
from .session import Session

if TYPE_CHECKING:  # the service check loads only after a change on a target with a [service]
    from . import aftercheck
    from .service import ServiceConfig


# ---- the steps, in the order they happen; a command renders each one as it comes -----------------
Step = Union[
    Changed, NotMirrored, "aftercheck.Step"
]  # and the steps of verifying after a change: aftercheck.py


@dataclass(frozen=True)
class Outcome:
    """What the pipeline did, step by step, and the exit code it means."""

    steps: tuple[Step, ...]
    exit_code: int


def service_of(config: TargetConfig, verify: bool) -> ServiceConfig | None:
    """The service to verify after a change: None with --no-verify or without a [service] table."""
    if not verify or config.raw.get("service") is None:
        return None
    return service.load(config)


def carry_out(
    ws: Workspace,
    s: Session,
    plan: Plan,
    dry_run: bool,
    svc: ServiceConfig | None,
    show: Callable[[Step], None] = lambda step: None,
) -> Outcome:
    """Execute the plan (unless a dry run), mirror the records, verify the service (when one is
    configured); an apply or switch that fails verification is rolled back. `show` sees each step."""
    steps: list[Step] = []

    def step(item: Step) -> None:
        steps.append(item)
        show(item)

    if not dry_run:
        engine.execute(s, plan)
        mirror_step(ws, s, f"{s.target.name} was changed (transaction {plan.entry.id})", step)
    step(Changed(plan, dry_run, exec_start_after(s, plan, dry_run)))
    if not dry_run:
        faults.point("reported")  # the change is made, copied into the workspace and said
    code = 0
    if svc is not None and not dry_run:
        code = after_change(ws, s, svc, plan.entry, step)
    return Outcome(tuple(steps), code)


def exec_start_after(s: Session, plan: Plan, dry_run: bool) -> Any:
    """The unit's effective ExecStart once `plan` is carried out (read from the files after it, or on a
    dry run with the planned bytes in their place), where the plan touches a role file; else None."""

    roles = [op for op in plan.ops if op.key.startswith(ROLE_PREFIX)]
    if not roles or "unit" not in s.target.config.files:
        return None
    override: dict[str, bytes | None] = {}
    if dry_run:
        for op in roles:
            if op.new is None:
                override[op.path] = None
            elif op.new.digest in plan.contents:
                override[op.path] = plan.contents[op.new.digest]
            else:  # a rollback's bytes are in the store
                override[op.path] = s.target.agent.store_get(s.target.info.store, op.new.digest)
    return units.on_target(s.target, override)
