"""`patchkeeper verify`: restart (with --restart) and verify the service, recorded in the ledger; on a
failure, what changed since the code state last passed, and what to run next."""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

from ..change import service
from ..change.diagnosis import diagnose, render
from ..change.document import SCHEMA, SCHEMA_VERSION, Report
from ..change.mirror import try_mirror
from ..change.rollout import PREVIOUS_FAILS  # noqa: F401  (the tests read it here)
from ..change.session import Session
from ..change.show_plan import render_not_mirrored, render_report, step_printer
from ..change.verify import record_verification, verify_target
from ..errors import EXIT_DIFFERS, BadInput
from ..records import history
from ..targets.fleet import Failed, each, failures, table
from ..workspace import Workspace
from . import emit_json


def verify(ws: Workspace, target: str | None, as_json: bool, with_restart: bool) -> int:
    """The checks alone (restarting first only with --restart), recorded in the ledger."""
    command = "verify" + (" --restart" if with_restart else "")
    with Report(as_json, command, target, step_printer) as report:
        with Session(ws, target, command) as s:
            s.warn_installation()
            report.shower(s.target.name)
            svc = service.load(s.config)
            if svc is None:
                raise BadInput(
                    f"target {s.target.name} has no [targets.{s.target.name}.service] table",
                    "add one with restart and base_url (see docs/verify-and-roll-back.md)",
                )
            result = verify_target(
                s.target, s.ledger, svc, with_restart, progress=sys.stderr, patchsets_dir=ws.patchsets_dir
            )
            entry = record_verification(s, result, "verify", None)
            if entry is not None:
                failed = try_mirror(ws, s, "the verification was recorded", manifest=False)
                if failed is not None:
                    render_not_mirrored(failed)
            current = s.ledger.current()
            diagnosis = None
            if not result.ok and current is not None:
                diagnosis = diagnose(s.target, s.ledger, current)
            if not as_json:
                render_report(result, s.target.name, current)
                if diagnosis is not None:
                    print("\n".join(render(diagnosis)))
            return report.done(
                0 if result.ok else EXIT_DIFFERS,
                current,
                current,
                verifications=[("verify", result)],
                diagnosis=diagnosis,
            )


def _verify_quiet(ws: Workspace, name: str, with_restart: bool) -> dict[str, Any] | None:
    """One target's checks without progress lines (they would interleave); None without [service].
    Its records are copied into snapshots/ and handed back (`history`) for the command's one commit."""
    if service.load(ws.target(name)) is None:
        return None
    with Session(ws, name, "verify --all" + (" --restart" if with_restart else ""), commit=False) as s:
        s.warn_installation()
        svc = service.load(s.config)
        if svc is None:  # its [service] table went away since the look above
            return None
        result = verify_target(
            s.target, s.ledger, svc, with_restart, progress=None, patchsets_dir=ws.patchsets_dir
        )
        if record_verification(s, result, "verify", None) is not None:
            failed = try_mirror(ws, s, "the verification was recorded", manifest=False)
            if failed is not None:
                render_not_mirrored(failed)
        return {"report": result.to_dict(), "history": s.record}


def verify_all(ws: Workspace, as_json: bool, with_restart: bool) -> int:
    """Every target with a [service] table, at once; one row each; one commit of their records."""

    results = each(ws, partial(_verify_quiet, with_restart=with_restart), "verify")
    reports = {n: r["report"] for n, r in results.items() if isinstance(r, dict)}
    errors = [n for n, r in results.items() if isinstance(r, Failed)]
    failed = [n for n, r in reports.items() if not r.get("ok")]
    records = [r["history"] for r in results.values() if isinstance(r, dict)]
    command = "verify --all" + (" --restart" if with_restart else "")
    history.commit_records(
        ws.root,
        records,
        f"verify --all: {len(reports)} target(s) verified, {len(failed)} failed, "
        f"{len(errors)} unreachable (patchkeeper {command})",
    )
    code = 2 if errors else EXIT_DIFFERS if failed else 0
    if as_json:
        emit_json(
            {
                "schema": SCHEMA,
                "schema_version": SCHEMA_VERSION,
                "command": command,
                "exit_code": code,
                "ok": code == 0,
                "targets": {
                    n: (r.to_dict() if isinstance(r, Failed) else None if r is None else reports[n])
                    for n, r in results.items()
                },
            }
        )
    else:
        rows = [
            [
                n,
                f"error: {r}"
                if isinstance(r, Failed)
                else "no [service] table"
                if r is None
                else "passed"
                if reports[n].get("ok")
                else f"FAILED ({reports[n].get('reason')}): {reports[n].get('message', '')}",
            ]
            for n, r in results.items()
        ]
        table(["target", "verification"], rows)
        print(f"{len(results)} target(s): {len(failed)} failed, {failures(results.values())}")
    return code
