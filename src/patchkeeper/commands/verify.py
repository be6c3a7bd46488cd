"""`patchkeeper verify`: restart (with --restart) and verify the service, recorded in the ledger."""

from __future__ import annotations

import sys

from ..change.mirror import try_mirror
from ..change.session import Session
from ..change.verify import last_pass, record_verification, run_checks
from ..checks import service
from ..errors import EXIT_DIFFERS, BadInput
from ..workspace import Workspace
from . import emit_json
from .show_plan import PREVIOUS_FAILS, render_not_mirrored, render_report  # noqa: F401  (PREVIOUS_FAILS: the tests read it here)


def verify(ws: Workspace, target: str | None, as_json: bool, with_restart: bool) -> int:
    """The checks alone (restarting first only with --restart), recorded in the ledger."""
    with Session(ws, target, "verify" + (" --restart" if with_restart else "")) as s:
        s.warn_installation()
        svc = service.load(s.config)
        if svc is None:
            raise BadInput(f"target {s.target.name} has no [targets.{s.target.name}.service] table",
                           "add one with restart and base_url (see docs/verify-and-roll-back.md)")
        report = run_checks(s.target, svc, with_restart, progress=sys.stderr,
                            last_pass=last_pass(s.ledger, s.ledger.current()))
        entry = record_verification(s, report, "verify", None)
        if entry is not None:
            failed = try_mirror(ws, s, "the verification was recorded", manifest=False)
            if failed is not None:
                render_not_mirrored(failed)
        if as_json:
            current = s.ledger.current()
            emit_json({"target": s.target.name, "state": current.to_dict() if current else None, **report.to_dict()})
        else:
            render_report(report, s.target.name, s.ledger.current())
        return 0 if report.ok else EXIT_DIFFERS


def _verify_quiet(ws: Workspace, name: str, with_restart: bool) -> dict | None:
    """One target's checks without progress lines (they would interleave); None without [service]."""
    if service.load(ws.target(name)) is None:
        return None
    with Session(ws, name, "verify --all" + (" --restart" if with_restart else "")) as s:
        s.warn_installation()
        svc = service.load(s.config)
        if svc is None:  # its [service] table went away since the look above
            return None
        report = run_checks(s.target, svc, with_restart, progress=None)
        if record_verification(s, report, "verify", None) is not None:
            failed = try_mirror(ws, s, "the verification was recorded", manifest=False)
            if failed is not None:
                render_not_mirrored(failed)
        return report.to_dict()


def verify_all(ws: Workspace, as_json: bool, with_restart: bool) -> int:
    """Every target with a [service] table, at once; one row each."""
    from functools import partial

    from .fleet import each, table

    results = each(ws, partial(_verify_quiet, with_restart=with_restart), "verify")
    errors = [n for n, r in results.items() if isinstance(r, str)]
    failed = [n for n, r in results.items() if isinstance(r, dict) and not r.get("ok")]
    if as_json:
        emit_json({n: ({"error": r} if isinstance(r, str) else r) for n, r in results.items()})
    else:
        rows = [[n, f"error: {r}" if isinstance(r, str) else "no [service] table" if r is None else
                 "passed" if r.get("ok") else f"FAILED ({r.get('reason')}): {r.get('message', '')}"]
                for n, r in results.items()]
        table(["target", "verification"], rows)
        print(f"{len(results)} target(s): {len(failed)} failed, {len(errors)} unreachable")
    return 2 if errors else EXIT_DIFFERS if failed else 0
