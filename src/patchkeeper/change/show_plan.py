"""Print a change the same way for every verb that makes one: the plan, then each later step."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from ..checks.units import describe
from ..errors import os_hint
from ..printable import one_line
from ..records.ledger import State
from ..records.manifest import ROLE_PREFIX
from .aftercheck import KeptFailing, RolledBack, RollingBack, SincePassed, Verified, Verifying
from .changes import Step
from .diagnosis import render
from .mirror import NotMirrored
from .plans import Changed, Plan
from .rollout import PREVIOUS_FAILS

if TYPE_CHECKING:
    from .aftercheck import SincePassed
    from .verify import Verification

_MARK = {"changed": "M", "added": "A", "removed": "D", "mode": "m"}


def render_plan(plan: Plan, target: str, dry_run: bool, exec_start: Any = None) -> None:
    e = plan.entry
    verb = "would change" if dry_run else "changed"
    for note in plan.notes:
        print(note)
    if plan.drift:
        print(
            f"files changed by hand since state {e.before.id if e.before else '?'} "
            f"(backed up{' first' if dry_run else ''}): " + one_line(", ".join(plan.drift))
        )
        for key, digest in e.backups.items():
            print(f"  backup of {one_line(key)}: {digest}")
        if e.backups:
            print(f"  (get one back: patchkeeper show-backup DIGEST -t {target} > FILE)")
    print(
        f"{target}: {e.kind} {e.before.stack_text() if e.before else '(nothing)'} -> {e.after.stack_text()}"
    )
    shown: set[str] = set()
    for op in plan.ops:
        size = f"{op.new.size} bytes" if op.new else ""
        mode = f" mode {op.new.mode:o}" if op.new and op.old and op.old.mode != op.new.mode else ""
        where = f"{'  ' if size else ''}({one_line(op.path)})" if op.key.startswith(ROLE_PREFIX) else ""
        print(f"  {_MARK[op.kind]} {one_line(op.key)}  {size}{mode}{where}")
        if dry_run and op.key.startswith(ROLE_PREFIX) and op.new and op.new.digest in plan.contents:
            for line in plan.contents[op.new.digest].decode("utf-8", "replace").splitlines():
                print(f"      | {line}")  # the role file as it would be written, templates rendered
            shown.add(op.path)
    if exec_start is not None:
        for line in describe(exec_start, frozenset(shown)):
            print(("the unit's " if line.startswith("ExecStart") else "") + line)
    print(
        f"{len(plan.ops)} file(s) {verb}; state {e.before.id if e.before else '-'} -> {e.after.id}"
        + ("" if dry_run else f" (transaction {e.id})")
    )


def render_report(report: Verification, target: str, state: State | None, out: TextIO | None = None) -> None:
    """One verification: each check, the output sample, the verdict and, on failure, the logs (to
    `out`, else sys.stdout as it is when called: a rollout routes it per target)."""
    out = out or sys.stdout
    where = f"state {state.id}: {state.stack_text()}" if state else "no recorded state"
    print(f"verify {target}, {where}:", file=out)
    for c in report.checks:
        status = "skip" if c.skipped else "warn" if c.warned else "ok  " if c.ok else "FAIL"
        print(f"  {c.name:9} {status}  {c.seconds:6.2f}s  {c.detail}", file=out)
        if (not c.ok or c.warned or c.skipped) and c.output.strip():
            _block(c.output, out)
    for i, w in enumerate(report.extra.get("warmups", ()), 1):
        print(
            f"  warm-up {i}: {w['seconds']:.2f}s" + (f" ({w['error']})" if w.get("error") else ""), file=out
        )
    if report.sample:
        print(f"  output: {report.sample!r}", file=out)
    if report.ok:
        skipped = [c.name for c in report.checks if c.skipped]
        print(
            f"verification passed: {report.tokens} tokens in {report.seconds:.2f}s "
            f"({report.tokens_per_s or 0:.1f} tokens/s)"
            + (f"; not checked: {', '.join(skipped)}" if skipped else ""),
            file=out,
        )
        return
    print(f"verification FAILED ({report.reason}): {'; '.join(report.problems)}", file=out)
    if report.errors:
        print("  first errors in the logs:", file=out)
        for line in report.errors:
            print(f"    ! {line}", file=out)
    if report.logs is not None:
        print("  logs (the end):" if report.logs.strip() else "  logs: (no output)", file=out)
        _block(report.logs, out)


def _block(text: str, out: TextIO, lines: int = 40) -> None:
    rows = text.rstrip().splitlines()
    for row in rows[-lines:]:
        print(f"    | {row}", file=out)


def render_not_mirrored(step: NotMirrored) -> None:
    print(
        f"patchkeeper: warning: {step.done}, but its records could not be copied into {step.where}: "
        f"{one_line(step.reason)}\n  hint: "
        + (
            step.hint
            or os_hint(step.errno, f"run `patchkeeper recover -t {step.target}`: it copies them again")
        ),
        file=sys.stderr,
    )


def step_printer(target: str) -> Callable[[Step], None]:
    """A `show` callback for changes.carry_out that prints each step as it happens."""

    def show(step: Step) -> None:
        if isinstance(step, Changed):
            render_plan(step.plan, target, step.dry_run, step.exec_start)
            return
        if isinstance(step, NotMirrored):
            render_not_mirrored(step)
            return

        if isinstance(step, Verifying):
            print(f"{target}: restarting and verifying the service (--no-verify skips this)")
        elif isinstance(step, Verified):
            render_report(step.report, target, step.state)
        elif isinstance(step, KeptFailing):
            print(
                f"{target}: state {step.change.after.id} is in place, but the service fails verification "
                f"({step.report.reason})"
            )
            print(f"  hint: run `patchkeeper audit -t {target}` to see what differs on the target")
        elif isinstance(step, RollingBack):
            print(
                f"{target}: verification failed after {step.change.kind} ({step.report.reason}); "
                f"rolling back to the previous state {step.previous.id}: {step.previous.stack_text()}"
            )
        elif isinstance(step, RolledBack):
            again, previous = step.again, step.previous
            if again.ok:
                print(
                    f"{target}: FAILED and rolled back: {step.change.kind} to {step.change.after.stack_text()} "
                    f"failed verification ({step.report.reason}); state {previous.id} is back in place and "
                    "verifies"
                )
            else:
                print(
                    f"{target}: FAILED and rolled back to state {previous.id}, but {PREVIOUS_FAILS} "
                    f"({again.reason}: {again.problems[0] if again.problems else again.message})"
                )
                print(f"  hint: run `patchkeeper audit -t {target}` to see what else differs on the target")
        elif isinstance(step, SincePassed):
            render_since_passed(step, target)

    return show


def render_since_passed(step: SincePassed, target: str) -> None:
    """What changed since the state last passed: code, environment, GPU facts, and what to run next."""

    print("\n".join(render(step.diagnosis)))
