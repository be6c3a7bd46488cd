"""`patchkeeper apply NAME`: apply a patch set, or switch to it within its group, atomically."""

from __future__ import annotations

from typing import cast

from ..change import adopt as adopting
from ..change import changes, engine
from ..change.session import Session
from ..records.ledger import ApplyExtra, RecordExtra
from ..workspace import Workspace
from .show_plan import step_printer


def apply(ws: Workspace, target: str | None, name: str, dry_run: bool, force: bool, verify: bool = True,
          adopt: str | None = None) -> int:
    svc = changes.service_of(ws.target(target), verify)
    with Session(ws, target, f"apply {name}") as s:
        from ..records.installation import refuse_writes

        refuse_writes(s.installation(), s.target, f"apply {name}", reinstall_ok=True)  # a cut RECORD: refused
        first = s.ledger.current() is None or adopting.new_release(s)  # a baseline (of this release) comes first
        if not dry_run and not first:  # (a first baseline takes one of its own first)
            engine.begin_fingerprint(s)  # beside the reading of the patch sets too
        incoming = engine.resolve(ws.patchsets_dir, name, s.config)  # every template renders, before a baseline
        engine.check_fits(s.target, incoming, force)  # bad input is refused before a baseline is recorded
        if dry_run and first:

            adopting.preview(s, adopt)
        elif not dry_run:
            baseline = adopting.ensure_baseline(s, adopt=adopt)
            if baseline is not None:

                print(f"recorded baseline of {s.target.name}: {cast(RecordExtra, baseline.extra)['files']} files, "
                      f"state {baseline.after.id}{adopting.describe(baseline)}")
            engine.begin_fingerprint(s)
        plan = engine.plan_apply(s, name, force, incoming=incoming)
        if plan is None:
            print(f"{s.target.name}: {name} is already applied; nothing to do")
            return 0
        if not dry_run:
            plan = with_workspace_ref(ws, plan)
        return changes.carry_out(ws, s, plan, dry_run, svc, step_printer(s.target.name)).exit_code


def with_workspace_ref(ws: Workspace, plan: engine.Plan) -> engine.Plan:
    """Note in the ledger entry the workspace commit that held the patch sets being applied."""
    from dataclasses import replace

    from ..records import history

    ref = history.workspace_ref(ws.root, {p["name"]: ws.patchsets_dir / p["name"] for p in plan.entry.patchsets})
    if ref is None:
        return plan
    extra = cast(ApplyExtra, dict(plan.entry.extra))  # an apply's or a switch's extra
    extra["workspace"] = ref
    return replace(plan, entry=replace(plan.entry, extra=extra))
