"""`patchkeeper apply NAME`: apply a patch set, or switch to it within its group, atomically."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from ..change import adopt as adopting, changes, engine, plans, stacks
from ..change.document import Report
from ..change.rollout import Noted
from ..change.session import Session
from ..change.show_plan import step_printer
from ..checks.installation import refuse_writes
from ..printable import one_line
from ..records import history
from ..records.ledger import ApplyExtra, RecordExtra
from ..workspace import Workspace
from .finish import finish


def apply(
    ws: Workspace,
    target: str | None,
    name: str,
    dry_run: bool,
    force: bool,
    verify: bool = True,
    adopt: str | None = None,
    as_json: bool = False,
    noted: Noted | None = None,
) -> int:
    """`noted` (a rollout's) is told what happened on the target, as a value; `as_json`: one document."""
    with Report(as_json, f"apply {name}", target, step_printer) as report:
        return _apply(ws, target, name, dry_run, force, verify, adopt, report, noted)


def _apply(
    ws: Workspace,
    target: str | None,
    name: str,
    dry_run: bool,
    force: bool,
    verify: bool,
    adopt: str | None,
    report: Report,
    noted: Noted | None,
) -> int:
    svc = changes.service_of(ws.target(target), verify)
    with Session(ws, target, f"apply {name}", hands_off=dry_run) as s:
        show = report.shower(s.target.name)

        refuse_writes(s.installation(), s.target, f"apply {name}", reinstall_ok=True)  # a cut RECORD: refused
        first = s.ledger.current() is None or adopting.new_release(
            s
        )  # a baseline (of this release) comes first
        if adopt is not None and not first:
            raise adopting.too_late(s, adopt)
        incoming = stacks.resolve(s.patchsets, name, s.config)  # every template renders, before a baseline
        stacks.check_fits(s.target, incoming, force)  # bad input is refused before a baseline is recorded
        current = s.ledger.current()
        change = stacks.stack_change(s.patchsets, current.stack if current else (), incoming)
        if change is not None:  # two patch sets writing one drop-in: refused before a baseline too
            stacks.refuse_shared_role_files(s.patchsets, s.config, change.kept, change.adding)
        restored: plans.Restored = {}  # a dry run plans on the bytes --restore-pristine would put back
        if dry_run and first:
            restored = adopting.preview(s, adopt)
        elif not dry_run:
            baseline = adopting.ensure_baseline(s, adopt=adopt)
            if baseline is not None:
                print(
                    f"recorded baseline of {s.target.name}: {cast(RecordExtra, baseline.extra)['files']} files of "
                    f"{s.target.info.package}, "
                    f"state {baseline.after.id}{adopting.describe(baseline)}"
                )
        plan = engine.plan_apply(s, name, force, incoming=incoming, restored=restored)
        if plan is not None and not dry_run:
            plan = with_workspace_ref(ws, plan)
        code = finish(ws, s, plan, f"{name} is already applied", dry_run, svc, show, report, noted)
        if plan is not None and not dry_run:
            _say_left(s)
        return code


def _say_left(s: Session) -> None:
    """Files changed by hand outside the patch sets stay as they are: say so, once the change is made."""
    current = s.ledger.current()
    left = plans.drift(s.target, current.manifest) if current is not None else {}
    if left:
        names = ", ".join(f"{one_line(k)} ({kind})" for k, kind in list(left.items())[:8])
        more = f" and {len(left) - 8} more" if len(left) > 8 else ""
        where = f" -t {s.target.name}" if s.target.name != s.workspace.default_target else ""
        print(
            f"note: {len(left)} file(s) changed by hand outside the applied patch sets stay as they are, "
            f"not part of state {current.id if current else '-'}: {names}{more} "
            f"(`patchkeeper diff{where}` shows them)"
        )


def with_workspace_ref(ws: Workspace, plan: plans.Plan) -> plans.Plan:
    """Note in the ledger entry the workspace commit that held the patch sets being applied."""

    ref = history.workspace_ref(
        ws.root, {p["name"]: ws.patchsets_dir / p["name"] for p in plan.entry.patchsets}
    )
    if ref is None:
        return plan
    extra = cast(ApplyExtra, dict(plan.entry.extra))  # an apply's or a switch's extra
    extra["workspace"] = ref
    return replace(plan, entry=replace(plan.entry, extra=extra))
