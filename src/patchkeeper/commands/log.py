"""`patchkeeper log`: every transaction on a target, newest first, with where each came from (the
CLI, or an Ansible play's task); `log --all` / `-g GROUP`: those of every target, merged, newest first."""

from __future__ import annotations

import time

from ..change.session import Session
from ..printable import one_line
from ..records.ledger import LedgerEntry, describe_origin
from ..targets.fleet import Failed, each, failures
from ..workspace import Workspace
from . import emit_json


def log(ws: Workspace, target: str | None, as_json: bool) -> int:
    with Session(ws, target, "log", write=False) as s:
        s.warn_installation()
        entries = list(reversed(s.ledger.entries()))
        if as_json:
            emit_json([e.to_dict() for e in entries])
            return 0
        if not entries:
            print(f"{s.target.name}: no transactions yet")
        for e in entries:
            print(_line(e))
            adopted = {
                "accept-edits": "hand edits found before the first baseline, recorded as they are "
                "(--accept-edits)",
                "restore-pristine": "hand edits found before the first baseline, backed up, then given "
                "the release's bytes (--restore-pristine)",
            }.get(str(e.extra.get("adopted")))
            if e.hand_edits:
                backups = e.backed_up
                print(
                    f"    {adopted or 'backed up hand edits first'}: "
                    + one_line(
                        ", ".join(
                            f"{k} ({backups[k][: len('blake3:') + 16]}…)" if k in backups else k
                            for k in e.hand_edits
                        )
                    )
                )
        return 0


def _line(e: LedgerEntry, target: str | None = None) -> str:
    """One transaction: its id, time, target (in a fleet's log), who and from where, what it did."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.time))
    head = (
        f"{e.id}  {when}  "
        + (f"{one_line(target)}  " if target else "")
        + f"{one_line(e.who)} via {describe_origin(e.origin)}"
    )
    if e.kind == "verify":
        return _verify_line(e, head)
    sets = one_line(
        ", ".join(f"{p['name']}@{p['version']}+{p['digest'].partition(':')[2][:12]}" for p in e.patchsets)
    )
    before = e.before.id if e.before else "-"
    return (
        f"{head}  {e.kind:8} {before} -> {e.after.id}"
        f"{' (' + one_line(e.after.name) + ')' if e.after.name else ''}  `{one_line(e.command)}`"
        f"{'  ' + sets if sets else ''}  {len(e.changed)} file(s)"
    )


def _entries(ws: Workspace, name: str) -> list[LedgerEntry]:
    with Session(ws, name, "log", write=False) as s:
        return list(s.ledger.entries())


def log_all(ws: Workspace, as_json: bool) -> int:
    """Every transaction of every chosen target, newest first, one line each with its target; a
    target that cannot be read is its own line (JSON: {"entries": [...], "errors": {name: ...}})."""
    results = each(ws, _entries, "log")
    errors = {n: r for n, r in results.items() if isinstance(r, Failed)}
    merged = sorted(
        ((e, n) for n, r in results.items() if not isinstance(r, Failed) for e in r),
        key=lambda pair: (pair[0].time, pair[0].seq, pair[1]),
        reverse=True,
    )
    if as_json:
        emit_json(
            {
                "entries": [dict(e.to_dict(), target=n) for e, n in merged],
                "errors": {n: r.to_dict() for n, r in errors.items()},
            }
        )
        return 2 if errors else 0
    for e, n in merged:
        print(_line(e, n))
    for n, r in errors.items():
        print(f"{n}: error: {r}")
    print(f"{len(results)} target(s): {len(merged)} transaction(s), {failures(errors.values())}")
    return 2 if errors else 0


def _verify_line(e: LedgerEntry, head: str) -> str:
    report = e.extra.get("verify", {})
    report = report if isinstance(report, dict) else {}
    result = "passed" if report.get("ok") else f"FAILED ({one_line(report.get('reason'))})"
    try:
        figures = (
            f"  {int(report['tokens'])} tokens, {float(report['tokens_per_s'] or 0):.1f} tokens/s"
            if report.get("tokens")
            else ""
        )
        if report.get("seconds") is not None:
            figures += f"  smoke {float(report['seconds']):.2f}s"
    except (KeyError, TypeError, ValueError):
        figures = ""
    return (
        f"{head}  verify   {e.after.id} {result}{figures}  `{one_line(e.command)}` "
        f"({one_line(e.extra.get('phase'))})"
    )
