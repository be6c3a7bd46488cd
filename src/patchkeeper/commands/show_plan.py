"""Carry out a plan and print it the same way for every verb that changes a target."""

from __future__ import annotations

from .. import engine
from ..engine import Plan
from ..manifest import ROLE_PREFIX
from ..session import Session
from ..workspace import Workspace

_MARK = {"changed": "M", "added": "A", "removed": "D", "mode": "m"}


def describe(plan: Plan, target: str, dry_run: bool) -> None:
    e = plan.entry
    verb = "would change" if dry_run else "changed"
    for note in plan.notes:
        print(note)
    if plan.drift:
        print(f"files changed by hand since state {e.before.id if e.before else '?'} "
              f"(backed up{' first' if dry_run else ''}): " + ", ".join(plan.drift))
    print(f"{target}: {e.kind} {e.before.stack_text() if e.before else '(nothing)'} -> {e.after.stack_text()}")
    for op in plan.ops:
        kind = "added" if op.old is None else "removed" if op.new is None else \
            "mode" if op.old.digest == op.new.digest else "changed"
        size = f"{op.new.size} bytes" if op.new else ""
        mode = f" mode {op.new.mode:o}" if op.new and op.old and op.old.mode != op.new.mode else ""
        print(f"  {_MARK[kind]} {op.key}  {size}{mode}")
        if dry_run and op.key.startswith(ROLE_PREFIX) and op.new and op.new.digest in plan.contents:
            for line in plan.contents[op.new.digest].decode("utf-8", "replace").splitlines():
                print(f"      | {line}")  # the role file as it would be written, templates rendered
    print(f"{len(plan.ops)} file(s) {verb}; state {e.before.id if e.before else '-'} -> {e.after.id}"
          + ("" if dry_run else f" (transaction {e.id})"))


def carry_out(ws: Workspace, s: Session, plan: Plan, dry_run: bool, svc) -> int:
    """Execute the plan (unless a dry run), mirror the records, print it, verify the service."""
    from .snapshot import mirror

    if not dry_run:
        engine.execute(s, plan)
        mirror(ws, s)
    describe(plan, s.target.name, dry_run)
    if svc is not None and not dry_run:
        from .verify import after_change

        return after_change(ws, s, svc, plan.entry)
    return 0
