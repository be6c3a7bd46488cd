"""The one JSON document (`--json`) of a change or a verification: apply, rollback, repair, verify.
Its shape is docs/json.md's; SCHEMA_VERSION goes up when a key changes meaning or goes away."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..checks import units
from ..errors import PatchkeeperError
from ..printable import emit_json
from .aftercheck import KeptFailing, RollingBack, SincePassed, Verified, Verifying
from .mirror import NotMirrored
from .plans import Changed

if TYPE_CHECKING:
    from ..records.ledger import LedgerEntry, State
    from ..records.manifest import Entry
    from .changes import Step
    from .verify import Verification

SCHEMA = "patchkeeper/change"
SCHEMA_VERSION = 1


class Steps:
    """A step callback that keeps every step of a change, for the document made at its end."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def __call__(self, step: Step) -> None:
        self.steps.append(step)


def _entry(e: Entry | None) -> dict[str, Any] | None:
    return None if e is None else {"digest": e.digest, "size": e.size, "mode": f"{e.mode:o}"}


def change_of(plan: Any, dry_run: bool, exec_start: Any = None) -> dict[str, Any]:
    """One change (a transaction, or on a dry run the plan): its entry and every file with its kind
    and digests."""

    e: LedgerEntry = plan.entry
    files = []
    for op in plan.ops:
        files.append(
            {"key": op.key, "path": op.path, "change": op.kind, "old": _entry(op.old), "new": _entry(op.new)}
        )
    extra = dict(e.extra)
    return {
        "transaction": None if dry_run else e.id,
        "kind": e.kind,
        "automatic": bool(extra.get("automatic")),
        "before": e.before.to_dict() if e.before else None,
        "after": e.after.to_dict(),
        "patchsets": [dict(p) for p in e.patchsets],
        "files": files,
        "hand_edits": list(plan.drift),
        "backups": e.backups,
        "notes": list(plan.notes),
        "exec_start": units.as_dict(exec_start),
    }


def document(
    command: str,
    target: str,
    before: State | None,
    after: State | None,
    steps: list[Step],
    exit_code: int,
    dry_run: bool = False,
    verifications: list[tuple[str, Verification]] | None = None,
    diagnosis: Any = None,
) -> dict[str, Any]:
    """The whole document: the states before and after, each change, each verification (its phase and
    every check), a diagnosis where one was made, warnings, the exit code."""

    changes: list[dict[str, Any]] = []
    checks = [{"phase": phase, **report.to_dict()} for phase, report in verifications or []]
    warnings: list[str] = []
    phase = "verify"
    rolled_back = False
    for step in steps:
        if isinstance(step, Changed):
            changes.append(change_of(step.plan, step.dry_run, step.exec_start))
        elif isinstance(step, Verifying):
            phase = step.change.kind
        elif isinstance(step, RollingBack):
            phase, rolled_back = "automatic rollback", True
        elif isinstance(step, Verified):
            checks.append(
                {"phase": phase, "state": step.state.id if step.state else None, **step.report.to_dict()}
            )
        elif isinstance(step, SincePassed):
            diagnosis = step.diagnosis
        elif isinstance(step, NotMirrored):
            warnings.append(
                f"{step.done}, but its records could not be copied into {step.where}: {step.reason}"
            )
        elif isinstance(step, KeptFailing):
            warnings.append(
                f"state {step.change.after.id} is in place, but the service fails verification "
                f"({step.report.reason})"
            )
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "target": target,
        "dry_run": dry_run,
        "exit_code": exit_code,
        "ok": exit_code == 0,
        "before": before.to_dict() if before else None,
        "after": after.to_dict() if after else None,
        "changes": changes,
        "verifications": checks,
        "rolled_back": rolled_back,
        "diagnosis": diagnosis.to_dict() if diagnosis is not None else None,
        "warnings": warnings,
        "error": None,
    }


class Report:
    """How a change command reports: each step on stdout as it comes, or with --json every step kept
    and one document at the end (whatever else the command prints goes to stderr meanwhile; an error
    is a document too, and still its line on stderr)."""

    def __init__(
        self, as_json: bool, command: str, target: str | None, printer: Callable[[str], Any]
    ) -> None:
        self.as_json = as_json
        self.command = command
        self.target = target
        self._printer = printer
        self._show: Callable[[Step], None] | None = None
        self.kept = Steps()
        self._stdout: Any = None

    def shower(self, target: str) -> Callable[[Step], None]:
        """The step callback for `target` (known once its session is open)."""
        self.target = target
        if self.as_json:
            return self.kept
        self._show = self._show or self._printer(target)
        return self._show

    def __enter__(self) -> Report:
        if self.as_json:
            self._stdout = sys.stdout
            sys.stdout = sys.stderr
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if not self.as_json:
            return
        sys.stdout = self._stdout
        if isinstance(exc, PatchkeeperError):
            emit_json(
                {
                    "schema": SCHEMA,
                    "schema_version": SCHEMA_VERSION,
                    "command": self.command,
                    "target": self.target,
                    "exit_code": exc.exit_code,
                    "ok": False,
                    "error": {"message": exc.message, "hint": exc.hint},
                }
            )

    def done(
        self,
        code: int,
        before: State | None,
        after: State | None,
        dry_run: bool = False,
        verifications: list[tuple[str, Verification]] | None = None,
        diagnosis: Any = None,
    ) -> int:
        """The exit code; with --json, the document first (on the real stdout)."""
        if self.as_json:
            doc = document(
                self.command,
                self.target or "",
                before,
                after,
                self.kept.steps,
                code,
                dry_run,
                verifications,
                diagnosis,
            )

            print(json.dumps(doc, indent=2, sort_keys=True), file=self._stdout, flush=True)
        return code
