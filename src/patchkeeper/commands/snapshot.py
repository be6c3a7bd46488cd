"""`patchkeeper snapshot --name NAME`: record a named state of a target."""

from __future__ import annotations

from typing import cast

from ..change import adopt as adopting, engine
from ..change.mirror import try_mirror
from ..change.session import Session
from ..change.show_plan import render_not_mirrored
from ..checks.installation import refuse_writes
from ..checks.scan import scan_all
from ..errors import BadInput
from ..records.ledger import RecordExtra
from ..workspace import Workspace
from . import json_answer

RESERVED = {
    "baseline": "the state recorded before the first change",
    "previous": "the state before the current one",
}  # names `rollback --to` gives a meaning of its own


def snapshot(
    ws: Workspace,
    target: str | None,
    name: str,
    manifest_only: bool,
    adopt: str | None = None,
    dry_run: bool = False,
    as_json: bool = False,
) -> int:
    """Record the target's files as state `name` (a baseline first, when there is none); with --json,
    the document: {"target", "name", "dry_run", "files", "bytes_kept", "baseline", "state", "mirrored"}."""
    if name in RESERVED or not name.strip():
        raise BadInput(
            f"{name!r} cannot name a state: rollback --to {name} means "
            + (RESERVED[name] if name in RESERVED else "nothing"),
            "pick another name",
        )
    with json_answer(as_json) as doc, Session(ws, target, f"snapshot --name {name}") as s:
        refuse_writes(s.installation(), s.target, f"snapshot --name {name}")
        if adopt is not None and s.ledger.current() is not None and not adopting.new_release(s):
            raise adopting.too_late(s, adopt)
        kept = "digests only" if manifest_only else "bytes kept"
        if dry_run:  # refused as the real run would be; else what it would record
            if s.ledger.current() is None or adopting.new_release(s):
                adopting.preview(s, adopt)
            files = len(scan_all(s.target))
            doc.update(
                target=s.target.name, name=name, dry_run=True, files=files, bytes_kept=not manifest_only
            )
            doc.update(baseline=None, state=None, mirrored=None)
            print(
                f"{s.target.name}: would record state {name!r} ({files} files of "
                f"{s.target.info.package}, {kept}); nothing changed (dry run)"
            )
            return 0
        baseline = adopting.ensure_baseline(s, bytes_kept=not manifest_only, adopt=adopt)
        if baseline is not None:
            files = cast(RecordExtra, baseline.extra)["files"]
            print(
                f"recorded baseline of {s.target.name}: {files} files of {s.target.info.package}, state {baseline.after.id}{adopting.describe(baseline)}"
            )
        entry = engine.record_state(s, "snapshot", name, bytes_kept=not manifest_only)
        failed = try_mirror(ws, s, f"state {entry.after.id} was recorded on {s.target.name}")
        if failed is not None:
            render_not_mirrored(failed)
        doc.update(target=s.target.name, name=name, dry_run=False, bytes_kept=not manifest_only)
        doc.update(files=cast(RecordExtra, entry.extra)["files"], state=entry.after.to_dict())
        doc.update(baseline=baseline.after.to_dict() if baseline else None, mirrored=failed is None)
        print(
            f"{s.target.name}: recorded state {entry.after.id} as {name!r} "
            f"({cast(RecordExtra, entry.extra)['files']} files of {s.target.info.package}, {kept})"
        )
        return 0
