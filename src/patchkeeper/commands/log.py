"""`patchkeeper log`: every transaction on a target, newest first."""

from __future__ import annotations

import time

from ..change.session import Session
from ..printable import one_line
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
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.time))
            sets = one_line(", ".join(f"{p['name']}@{p['version']}+{p['digest'].partition(':')[2][:12]}"
                                      for p in e.patchsets))
            if e.kind == "verify":
                print(_verify_line(e, when))
                continue
            before = e.before.id if e.before else "-"
            print(f"{e.id}  {when}  {one_line(e.who)}  {e.kind:8} {before} -> {e.after.id}"
                  f"{' (' + one_line(e.after.name) + ')' if e.after.name else ''}  `{one_line(e.command)}`"
                  f"{'  ' + sets if sets else ''}  {len(e.changed)} file(s)")
            adopted = {"accept-edits": "hand edits found before the first baseline, recorded as they are "
                                       "(--accept-edits)",
                       "restore-pristine": "hand edits found before the first baseline, backed up, then given "
                                           "the release's bytes (--restore-pristine)"}.get(str(e.extra.get("adopted")))
            if e.hand_edits:
                backups = e.backed_up
                print(f"    {adopted or 'backed up hand edits first'}: " + one_line(", ".join(
                    f"{k} ({backups[k][:len('blake3:') + 16]}…)" if k in backups else k for k in e.hand_edits)))
        return 0


def _verify_line(e, when: str) -> str:
    report = e.extra.get("verify", {})
    report = report if isinstance(report, dict) else {}
    result = "passed" if report.get("ok") else f"FAILED ({one_line(report.get('reason'))})"
    try:
        figures = f"  {int(report['tokens'])} tokens, {float(report['tokens_per_s'] or 0):.1f} tokens/s" \
            if report.get("tokens") else ""
        if report.get("seconds") is not None:
            figures += f"  smoke {float(report['seconds']):.2f}s"
    except (KeyError, TypeError, ValueError):
        figures = ""
    return (f"{e.id}  {when}  {one_line(e.who)}  verify   {e.after.id} {result}{figures}  `{one_line(e.command)}` "
            f"({one_line(e.extra.get('phase'))})")
