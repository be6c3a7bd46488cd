"""`patchkeeper repair DIST`: an installed distribution's damaged files get their release bytes back."""

from __future__ import annotations

from ..change import adopt as adopting, changes, engine, plans, repair
from ..change.aftercheck import after_change
from ..change.document import Report
from ..change.mirror import mirror_step
from ..change.session import Session
from ..change.show_plan import step_printer
from ..checks.installation import refuse_writes
from ..errors import EXIT_DIFFERS, Refused
from ..host.disk import normalize_name
from ..records.ledger import State
from ..targets.shapes import ENV as ENV_PREFIX
from ..workspace import Workspace

_MARK = {"changed": "M", "added": "A", "removed": "D", "mode": "m"}


def repair_dist(
    ws: Workspace,
    target: str | None,
    dist: str,
    wheel: str | None,
    dry_run: bool,
    adopt: str | None = None,
    verify: bool = True,
    as_json: bool = False,
) -> int:
    """Exit 0 when every damaged file was restored (or none was damaged) and, with a [service], the
    service verifies after it; 1 when some are left or it fails verification."""
    command = f"repair {dist}" + (f" --wheel {wheel}" if wheel else "")
    with Report(as_json, command, target, step_printer) as report:
        return _repair(ws, target, dist, wheel, dry_run, adopt, verify, report, command)


def _repair(
    ws: Workspace,
    target: str | None,
    dist: str,
    wheel: str | None,
    dry_run: bool,
    adopt: str | None,
    verify: bool,
    report: Report,
    command: str,
) -> int:

    svc = changes.service_of(ws.target(target), verify)
    with Session(ws, target, command, hands_off=dry_run) as s:
        show = report.shower(s.target.name)
        info = s.target.info
        if normalize_name(dist) == normalize_name(info.package):
            raise Refused(
                f"{dist} is the package patchkeeper manages on {s.target.name}: its files are kept by "
                "its recorded states",
                "use `rollback --to baseline`; before the first baseline, "
                "`apply` or `snapshot` with --restore-pristine",
            )
        if adopt is not None and s.ledger.current() is not None and not adopting.new_release(s):
            raise adopting.too_late(s, adopt)  # as apply and snapshot: never ignored without a word
        if not dry_run:  # its entry would record the managed package's installation as the state's
            refuse_writes(s.installation(), s.target, s.command)
        damage = repair.find_damage(s.target, dist)
        if not damage.files:
            print(f"{s.target.name}: {damage.name} {damage.version} matches its RECORD; nothing to repair")
            return report.done(0, s.ledger.current(), s.ledger.current(), dry_run)
        found = repair.restore(s.target, damage, wheel, ws.wheels, True)
        if dry_run:
            current = s.ledger.current()
            if current is None:
                adopting.preview(s, adopt)
        else:
            baseline = adopting.ensure_baseline(s, adopt=adopt)
            if baseline is not None:
                print(
                    f"recorded baseline of {s.target.name}: {baseline.extra.get('files')} files of "
                    f"{s.target.info.package}, "
                    f"state {baseline.after.id}{adopting.describe(baseline)}"
                )
            current = s.ledger.current()
        if current is None:  # a dry run before any baseline: the entry is only printed
            current = State.make("-", (), "baseline")
        ops, contents, entry = repair.plan(s.target, s.ledger, current, s.command, damage, found)
        plan = plans.Plan(tuple(ops), contents, entry)
        if not dry_run:
            engine.execute(s, plan)
            mirror_step(ws, s, f"{s.target.name} was repaired (transaction {entry.id})", show)
        if report.as_json:
            show(plans.Changed(plan, dry_run))
        verb = "would be restored" if dry_run else "restored"
        print(f"{s.target.name}: repair {damage.name} {damage.version} from {found.wheel} ({found.source})")
        for op in ops:
            assert op.new is not None  # a repair writes every file it changes
            print(
                f"  {_MARK[op.kind]} {op.key[len(ENV_PREFIX) :]}  {op.new.size} bytes, checked against RECORD"
            )
        for rel, why in found.left.items():
            print(f"  ! {rel}  left as it is: {why}")
        tail = "" if dry_run else f"; state {current.id} -> {entry.after.id} (transaction {entry.id})"
        print(f"{len(ops)} file(s) {verb}{tail}" + (f"; {len(found.left)} left" if found.left else ""))
        code = EXIT_DIFFERS if found.left else 0
        if svc is not None and not dry_run:  # the service runs on what was repaired: restart it and verify
            code = max(code, after_change(ws, s, svc, entry, show))
        elif svc is not None:
            print(f"{s.target.name}: the service would be restarted and verified after the repair")
        return report.done(
            code,
            current if not dry_run else s.ledger.current(),
            entry.after if dry_run else s.ledger.current(),
            dry_run,
        )
