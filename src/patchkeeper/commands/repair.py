"""`patchkeeper repair DIST`: an installed distribution's damaged files get their release bytes back."""

from __future__ import annotations

from ..change import adopt as adopting
from ..change import engine, repair
from ..change.session import Session
from ..errors import Refused
from ..workspace import Workspace

_MARK = {"changed": "M", "added": "A", "removed": "D", "mode": "m"}


def repair_dist(ws: Workspace, target: str | None, dist: str, wheel: str | None, dry_run: bool,
                adopt: str | None = None) -> int:
    """Exit 0 when every damaged file was restored (or none was damaged), 1 when some are left."""
    from ..host.disk import normalize_name

    with Session(ws, target, f"repair {dist}" + (f" --wheel {wheel}" if wheel else "")) as s:
        info = s.target.info
        if normalize_name(dist) == normalize_name(info.package):
            raise Refused(f"{dist} is the package patchkeeper manages on {s.target.name}: its files are kept by "
                          "its recorded states", "use `rollback --to baseline`; before the first baseline, "
                          "`apply` or `snapshot` with --restore-pristine")
        if not dry_run:  # its entry would record the managed package's installation as the state's
            from ..records.installation import refuse_writes

            refuse_writes(s.installation(), s.target, s.command)
        damage = repair.find_damage(s.target, dist)
        if not damage.files:
            print(f"{s.target.name}: {damage.name} {damage.version} matches its RECORD; nothing to repair")
            return 0
        found = repair.restore(s.target, damage, wheel, ws.wheels)
        if dry_run:
            current = s.ledger.current()
            if current is None:

                adopting.preview(s, adopt)
        else:
            baseline = adopting.ensure_baseline(s, adopt=adopt)
            if baseline is not None:

                print(f"recorded baseline of {s.target.name}: {baseline.extra.get('files')} files, "
                      f"state {baseline.after.id}{adopting.describe(baseline)}")
            current = s.ledger.current()
        if current is None:  # a dry run before any baseline: the entry is only printed
            from ..records.ledger import State

            current = State.make("-", (), "baseline")
        ops, contents, entry = repair.plan(s.target, s.ledger, current, s.command, damage, found)
        if not dry_run:
            engine.execute(s, engine.Plan(tuple(ops), contents, entry))
            from ..change.mirror import mirror

            mirror(ws, s)
        verb = "would be restored" if dry_run else "restored"
        print(f"{s.target.name}: repair {damage.name} {damage.version} from {found.wheel} ({found.source})")
        for op in ops:
            assert op.new is not None  # a repair writes every file it changes
            kind = "added" if op.old is None else "mode" if op.old.digest == op.new.digest else "changed"
            print(f"  {_MARK[kind]} {op.key[len(repair.ENV_PREFIX):]}  {op.new.size} bytes, checked against RECORD")
        for rel, why in found.left.items():
            print(f"  ! {rel}  left as it is: {why}")
        tail = "" if dry_run else f"; state {current.id} -> {entry.after.id} (transaction {entry.id})"
        print(f"{len(ops)} file(s) {verb}{tail}" + (f"; {len(found.left)} left" if found.left else ""))
        return 1 if found.left else 0
