"""`patchkeeper audit`: what differs in a site-packages and why, for one target or every target."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..change.session import Session
from ..checks import audit as audit_core
from ..printable import one_line
from ..records.ledger import PatchSetRef
from ..workspace import Workspace
from . import emit_json

_SHOWN = 50  # findings per class printed before "… and N more"


class FilesBar:
    """click's progress bar on stderr of the files the target's agent reads and hashes, moved by its
    count (each heartbeat's, or as the files are read by an agent in this process). When the agent
    enters a long phase of another kind (the bytecode compared with its sources), the bar is ended
    and another, named after it, counts that phase's files: the bar follows the work being done."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.phase = ""
        self.base = 0  # the count at which the current phase began

    def __call__(self, done: int, total: int, phase: str = "") -> None:
        if not self.enabled or not total:
            return
        if self.bar is None or phase != self.phase:
            self.close()
            self.phase, self.base = phase, done if phase else 0
            self.bar = click.progressbar(
                length=1,
                label=f"audit: {phase or 'files read'}",
                file=sys.stderr,
                show_pos=True,
                show_eta=False,
            )
            self.bar.__enter__()
        self.bar.length = max(1, total - self.base)  # it grows as the agent finds more files to read
        self.bar.finished = False
        self.bar.update(done - self.base - self.bar.pos)

    def close(self) -> None:
        if self.bar is not None and self.bar.entered:
            self.bar.__exit__(None, None, None)
        self.bar = None


def audit_one(
    ws: Workspace,
    name: str | None,
    probes: list[str],
    bar: FilesBar | None,
    wait: float | None = None,
    rehash: bool = False,
) -> audit_core.AuditReport:
    with Session(ws, name, "audit", write=False, wait=wait, rehash=rehash) as s:
        if rehash:  # every pyc compared: the release's own sources need no compile on the host
            from ..checks import release_code  # lazy: only --rehash reads a wheel (zipfile, wheels.py)

            release_code.place(s.target, ws.wheels, audit_core.compared_pairs(s.target))
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
    from ..change import stacks  # lazy own: a target with no patch set applied needs no patch set reader

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
        from .audit_all import audit_all  # lazy own: only --all loads the fleet runner (multiprocessing)

        return audit_all(ws, probes, as_json, wait, rehash)
    bar = FilesBar(not quiet and not as_json and sys.stderr.isatty())
    try:
        report = audit_one(ws, target, probes, bar, wait, rehash)
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
