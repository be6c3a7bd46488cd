"""`patchkeeper audit --all`: every target of the workspace concurrently, one table (or one JSON document)."""

from __future__ import annotations

from functools import partial

from ..checks import audit as audit_core
from ..targets.fleet import Failed, each, failures, table
from ..workspace import Workspace
from . import emit_json
from .audit import audit_one


def _audit_quiet(
    ws: Workspace, name: str, probes: list[str], wait: float | None = None, rehash: bool = False
) -> audit_core.AuditReport:
    """One target's report for `--all`."""
    return audit_one(ws, name, probes, None, wait, rehash)


def audit_all(
    ws: Workspace, probes: list[str], as_json: bool, wait: float | None = None, rehash: bool = False
) -> int:
    """Every target concurrently (targets/fleet.py): hosts on threads, local targets in processes."""

    names = sorted(ws.targets)
    results = each(
        ws,
        partial(_audit_quiet, probes=probes, wait=wait, rehash=rehash),
        "audit",
        None if not as_json else False,
    )
    errors = {n: r for n, r in results.items() if isinstance(r, Failed)}
    reports = {n: r for n, r in results.items() if not isinstance(r, Failed)}
    if as_json:
        emit_json({n: r.to_dict() for n, r in results.items()})
    else:
        head = ["target", "state", *audit_core.CLASSES, "summary"]
        rows = []
        for n in names:
            r = results[n]
            if isinstance(r, Failed):
                rows.append([n, "-", *("-" for _ in audit_core.CLASSES), f"error: {r}"])
            else:
                rows.append(
                    [
                        n,
                        r.state.id if r.state else "-",
                        *(str(r.count(c)) for c in audit_core.CLASSES),
                        r.summary(),
                    ]
                )
        table(head, rows)
        bad = [n for n, r in reports.items() if r.trouble]
        print(
            f"{len(names)} target(s): {len(names) - len(bad) - len(errors)} clean, {len(bad)} with findings, "
            f"{failures(errors.values())}"
        )
    if errors:
        return 2
    return 1 if any(r.trouble for r in reports.values()) else 0
