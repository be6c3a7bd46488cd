"""The change pipeline: execute a plan, mirror it to snapshots/, verify, roll back automatically."""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Union

from . import engine
from .engine import Plan
from .errors import EXIT_DIFFERS, EXIT_ROLLED_BACK
from .ledger import LedgerEntry, RollbackExtra, State
from .service import ServiceConfig
from .session import Session
from .verify import Verification, last_pass, record_verification, run_checks
from .workspace import Workspace


# ---- the steps, in the order they happen; a command renders each one as it comes -----------------
@dataclass(frozen=True)
class Changed:
    """A plan carried out (or, on a dry run, the plan that would be)."""

    plan: Plan
    dry_run: bool


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


Step = Union[Changed, Verifying, Verified, KeptFailing, RollingBack, RolledBack]


@dataclass(frozen=True)
class Outcome:
    """What the pipeline did, step by step, and the exit code it means."""

    steps: tuple[Step, ...]
    exit_code: int


def carry_out(ws: Workspace, s: Session, plan: Plan, dry_run: bool, svc: ServiceConfig | None,
              show: Callable[[Step], None] = lambda step: None) -> Outcome:
    """Execute the plan (unless a dry run), mirror the records, verify the service (when one is
    configured); an apply or switch that fails verification is rolled back. `show` sees each step."""
    steps: list[Step] = []

    def step(item: Step) -> None:
        steps.append(item)
        show(item)

    if not dry_run:
        engine.execute(s, plan)
        mirror(ws, s)
    step(Changed(plan, dry_run))
    code = 0
    if svc is not None and not dry_run:
        code = _after_change(ws, s, svc, plan.entry, step)
    return Outcome(tuple(steps), code)


def _after_change(ws: Workspace, s: Session, svc: ServiceConfig, change: LedgerEntry,
                  step: Callable[[Step], None]) -> int:
    """Restart and verify after `change` committed; an apply or switch that fails is rolled back."""
    step(Verifying(change))
    report = _verify(s, svc, change.kind, change.id, step)
    if report.ok:
        mirror(ws, s, manifest=False)  # the state is the one the change just mirrored
        return 0
    if change.kind not in ("apply", "switch") or change.before is None:
        mirror(ws, s, manifest=False)
        step(KeptFailing(change, report))
        return EXIT_DIFFERS
    previous = change.before
    step(RollingBack(change, report, previous))
    plan = engine.plan_rollback(s, previous.id)
    if plan is not None:
        entry = dataclasses.replace(plan.entry, command=f"{s.command} (automatic rollback)",
                                    extra=RollbackExtra(automatic=True, undoes=change.id, reason=report.reason))
        plan = dataclasses.replace(plan, entry=entry)
        engine.execute(s, plan)
        step(Changed(plan, False))
    again = _verify(s, svc, "automatic rollback", plan.entry.id if plan else change.id, step)
    mirror(ws, s)
    step(RolledBack(change, report, previous, again))
    return EXIT_ROLLED_BACK


def _verify(s: Session, svc: ServiceConfig, phase: str, of: str, step: Callable[[Step], None]) -> Verification:
    report = run_checks(s.target, svc, with_restart=True, progress=sys.stderr,
                        last_pass=last_pass(s.ledger, s.ledger.current()))
    record_verification(s, report, phase, of)
    step(Verified(report, s.ledger.current()))
    return report


# ---- the workspace's copy of a target's records ---------------------------------------------------
def mirror(ws: Workspace, s: Session, manifest: bool = True) -> list[Path]:
    """Copy the target's ledger entries and the manifest of every state they name into
    snapshots/<target>/ (manifests/<state id>.txt, each written once), and the current state as
    manifest.txt and state.json, whose git history reads as the target's."""
    out = ws.snapshots_dir / s.target.name
    (out / "ledger").mkdir(parents=True, exist_ok=True)
    (out / "manifests").mkdir(exist_ok=True)
    written, fresh = [], []
    texts: dict[str, bytes] = {}
    for entry in s.ledger.entries():
        path = out / "ledger" / entry.file_name()
        if not path.exists():
            path.write_text(json.dumps(entry.to_dict(), indent=1) + "\n")
            written.append(path)
            fresh.append(entry)
        kept = out / "manifests" / f"{entry.after.id}.txt"
        if manifest and not kept.exists():
            texts.setdefault(entry.after.manifest, s.target.agent.store_get(s.target.info.store, entry.after.manifest))
            kept.write_bytes(texts[entry.after.manifest])
            written.append(kept)
    current = s.ledger.current()
    if current is not None and manifest:
        path = out / "manifest.txt"
        path.write_bytes(texts.get(current.manifest) or (out / "manifests" / f"{current.id}.txt").read_bytes())
        (out / "state.json").write_text(json.dumps({"target": s.target.name, **current.to_dict()}, indent=1) + "\n")
        written += [path, out / "state.json"]
    if fresh:
        from . import history

        history.commit_paths(ws.root, written, history_message(s.target.name, fresh))
    return written


def history_message(target: str, entries: list[LedgerEntry]) -> str:
    """Commit message of a target's history: the command, the patch sets (name@version), the target."""
    last = entries[-1]
    sets = ", ".join(f"{p['name']}@{p['version']}" for p in last.patchsets)
    what = sets or (f"state {last.after.name!r}" if last.after.name else last.after.stack_text())
    lines = [f"{target}: {last.kind} {what} (patchkeeper {last.command})", ""]
    for e in entries:
        lines.append(f"{e.kind} {e.before.id if e.before else '-'} -> {e.after.id}: {e.after.stack_text()}; "
                     f"{len(e.changed)} file(s) changed; transaction {e.id}")
    return "\n".join(lines) + "\n"
