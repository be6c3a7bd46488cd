"""`patchkeeper audit`: what differs in a site-packages and why, for one target or every target."""

from __future__ import annotations

import sys
from functools import partial

import click

from ..change import stacks
from ..change.session import Session
from ..checks import audit as audit_core
from ..printable import one_line
from ..records.ledger import PatchSetRef
from ..targets.fleet import Failed, each, failures, table
from ..workspace import Workspace
from . import emit_json

_SHOWN = 50  # findings per class printed before "… and N more"


class FilesBar:
    """click's progress bar on stderr of the files the target's agent reads and hashes, moved by its
    count (each heartbeat's, or as the files are read by an agent in this process)."""

    def __init__(self, enabled: bool) -> None:
        self.bar = (
            click.progressbar(
                length=1, label="audit: files read", file=sys.stderr, show_pos=True, show_eta=False
            )
            if enabled
            else None
        )

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None or not total:
            return
        if not self.bar.entered:
            self.bar.__enter__()
        self.bar.length = total  # it grows as the agent finds more files to read
        self.bar.finished = False
        self.bar.update(done - self.bar.pos)

    def close(self) -> None:
        if self.bar is not None and self.bar.entered:
            self.bar.__exit__(None, None, None)


def _audit_one(
    ws: Workspace,
    name: str | None,
    probes: list[str],
    bar: FilesBar | None,
    wait: float | None = None,
    rehash: bool = False,
) -> audit_core.AuditReport:
    with Session(ws, name, "audit", write=False, wait=wait, rehash=rehash) as s:
        current = s.ledger.current()
        owners = _owners(ws, current.stack) if current else None
        if bar is None:
            return audit_core.audit_target(s.target, s.ledger, probes, owners=owners, rehash=rehash)
        s.target.agent.watch(bar)
        try:
            return audit_core.audit_target(s.target, s.ledger, probes, owners=owners, rehash=rehash)
        finally:
            s.target.agent.watch(None)


def _owners(ws: Workspace, stack: tuple[PatchSetRef, ...]) -> dict[str, str]:
    """stacks.owners_of, loading the engine (patch sets, patching) only when a patch set is applied."""
    if not stack:
        return {}

    return stacks.owners_of(ws, stack)


def audit(
    ws: Workspace,
    target: str | None,
    probes: list[str],
    every: bool,
    as_json: bool,
    verbose: bool,
    quiet: bool,
    wait: float | None = None,
    rehash: bool = False,
) -> int:
    probes = audit_core.check_probes(probes)
    if every:
        return _run_all(ws, probes, as_json, wait, rehash)
    bar = FilesBar(not quiet and not as_json and sys.stderr.isatty())
    try:
        report = _audit_one(ws, target, probes, bar, wait, rehash)
    finally:
        bar.close()
    if as_json:
        emit_json(report.to_dict())
    else:
        print_report(report, verbose)
    return report.exit_code


def print_report(report: audit_core.AuditReport, verbose: bool) -> None:
    print(
        f"target {report.target}: {report.package} on {report.host}, {report.files} files checked "
        f"(every distribution in site-packages, not only {report.package})"
    )
    for cls in audit_core.CLASSES:
        found = [f for f in report.findings if f.cls == cls]
        if not found or (cls == "patched" and not verbose):
            continue
        print(f"{cls} ({len(found)}):")
        for f in found[:_SHOWN]:
            where = f"{f.dist}: " if f.dist and cls == "environment" else ""
            print(one_line(f"  {f.kind:13} {where}{f.path}  {f.detail}"))
        if len(found) > _SHOWN:
            print(f"  … and {len(found) - _SHOWN} more (--json lists all)")
    for note in report.notes:
        print(f"note: {one_line(note)}")
    counts = ", ".join(f"{report.count(c)} {c}" for c in audit_core.CLASSES)
    print(f"{counts}")
    print(report.summary())


def _audit_quiet(
    ws: Workspace, name: str, probes: list[str], wait: float | None = None, rehash: bool = False
) -> audit_core.AuditReport:
    """One target's report for `--all`."""
    return _audit_one(ws, name, probes, None, wait, rehash)


def _run_all(
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
