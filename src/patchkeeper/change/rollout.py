"""A change on many targets (`apply`/`rollback` with -t A -t B, -g GROUP or --all): --serial N at a
time, no new target started once more than --max-fail have failed; one line per target.

Each target's change is the one `apply -t NAME` makes (its own session, transaction, verification
and automatic rollback), run on a thread of a concurrent.futures pool: the work is waiting on the
host and its service. What a change prints is kept per target (stdout and stderr are routed by
thread while the rollout runs) and shown under its line when it did not succeed. Local targets
change one at a time: they share this process's agent.
"""

from __future__ import annotations

import contextvars
import io
import json
import sys
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO, cast

from ..errors import EXIT_DIFFERS, EXIT_ROLLED_BACK, EXIT_UNFINISHED, PatchkeeperError, TargetError
from ..workspace import Workspace
from .aftercheck import RolledBack

if TYPE_CHECKING:
    from ..targets import Target
    from .changes import Outcome
    from .plans import Plan
    from .session import Session


PREVIOUS_FAILS = "the previous code state fails as well: the fault is likely not in the patch set"


@dataclass(frozen=True)
class Done:
    """What a change did on one target, as its command tells a rollout."""

    before: str | None  # state ids
    after: str | None
    changed: bool
    verified: bool  # a [service] was restarted and verified after it
    rolled_back: str | None = None  # the failed verification's reason, when it was rolled back
    previous_fails: str | None = None  # after a rollback, the restored state's failed verification's reason
    note: str = ""
    plan: Plan | None = field(
        default=None, compare=False, repr=False
    )  # the plan carried out (or not: a dry run)
    target: Target | None = field(default=None, compare=False, repr=False)  # open while its command runs

    @classmethod
    def unchanged(cls, s: Session, note: str) -> Done:
        current = s.ledger.current()
        return cls(current.id if current else None, current.id if current else None, False, False, note=note)

    @classmethod
    def of(cls, s: Session, plan: Plan, outcome: Outcome, dry_run: bool, service: bool) -> Done:
        before = plan.entry.before.id if plan.entry.before else None
        if dry_run:
            return cls(
                before,
                plan.entry.after.id,
                False,
                False,
                note=f"would change {len(plan.ops)} file(s)",
                plan=plan,
                target=s.target,
            )
        back = next((step for step in outcome.steps if isinstance(step, RolledBack)), None)
        current = s.ledger.current()
        again = back.again if back is not None and not back.again.ok else None
        return cls(
            before,
            current.id if current else None,
            True,
            service and outcome.exit_code == 0,
            back.report.reason if back is not None else None,
            (again.reason or again.message or "failed") if again is not None else None,
            f"{len(plan.ops)} file(s)",
            plan,
            s.target,
        )


Noted = Callable[[Done], None]
OnOneTarget = Callable[[Workspace, str, Noted], int]  # a verb on one target: its exit code


@dataclass(frozen=True)
class HostResult:
    """One target's line of the report."""

    name: str
    code: int | None  # None: not attempted
    done: Done | None
    error: str | None
    output: str  # what its change printed
    lost: bool = False  # the host failed under the change (unreachable, given up): not a refusal

    def line(self) -> str:
        d = self.done
        if self.code is None:
            return "not attempted"
        if self.error is not None:
            label = "UNFINISHED" if self.code == EXIT_UNFINISHED else "FAILED" if self.lost else "refused"
            return f"{label}: {self.error}"
        if d is None:
            return f"exit {self.code}"
        states = f"state {d.before or '-'} -> {d.after or '-'}"
        if self.code == EXIT_ROLLED_BACK:
            line = f"FAILED and rolled back (verification: {d.rolled_back or '?'}); back in state {d.after or '-'}"
            return line + (f", but {PREVIOUS_FAILS} ({d.previous_fails})" if d.previous_fails else "")
        if self.code == EXIT_DIFFERS:
            return f"changed, but its verification FAILED (kept); {states}"
        if not d.changed:
            return f"unchanged: {d.note}" if d.before == d.after else f"dry run: {d.note}; {states}"
        return f"{'changed and verified' if d.verified else 'changed'}: {d.note}; {states}"


def default_serial(ws: Workspace, verify: bool) -> int:
    """1 when a target has a [service] to verify (a failure then stops the rollout early), else all."""
    if verify and any(t.raw.get("service") is not None for t in ws.targets.values()):
        return 1
    return max(len(ws.targets), 1)


def rollout(
    ws: Workspace,
    change: OnOneTarget,
    what: str,
    serial: int | None,
    max_fail: int,
    verify: bool,
    dry_run: bool = False,
    as_json: bool = False,
) -> int:
    """`change` on every target of `ws`, `serial` at a time; the worst exit code of them. A dry run
    changes nothing: every target at once (unless --serial), none stops the others. `as_json`: the
    lines go to stderr, and one document with a result per target to stdout (docs/json.md)."""

    names = sorted(ws.targets)
    if dry_run:
        what, max_fail, verify = f"{what} (dry run)", len(names), False
    at_once = serial if serial is not None else default_serial(ws, verify)
    results: dict[str, HostResult] = {}
    local = threading.Lock()
    document_out = sys.stdout
    router = _Router(sys.stderr if as_json else sys.stdout, sys.stderr)
    stops = "" if dry_run else f", stopping after {max_fail + 1} failure(s)"
    print(f"{what} on {len(names)} target(s), {at_once} at a time{stops}", file=router.real_out, flush=True)

    def one(name: str) -> HostResult:
        noted: list[Done] = []
        buffer = router.capture()
        lost = False
        try:
            with local if not ws.targets[name].ssh else _nothing():
                code, error = change(ws, name, noted.append), None
        except TargetError as exc:  # one line: what happened, then what to do
            code, error, lost = (
                exc.exit_code,
                f"{exc.message}; next: {exc.hint}" if exc.hint else exc.message,
                True,
            )
        except PatchkeeperError as exc:
            code, error = exc.exit_code, str(exc).splitlines()[0]
        except OSError as exc:
            code, error = 2, f"{exc.strerror or exc}{': ' + str(exc.filename) if exc.filename else ''}"
        finally:
            router.release()
        return HostResult(name, code, noted[-1] if noted else None, error, buffer.getvalue(), lost)

    failures = 0
    pending = list(names)
    running: dict[Future[Any], str] = {}
    pool = ThreadPoolExecutor(max(1, min(at_once, len(names))))
    sys.stdout, sys.stderr = router.out, router.err
    try:
        while pending or running:
            while pending and len(running) < at_once and failures <= max_fail:
                name = pending.pop(0)
                # in the command's context: each target's ledger entry keeps its ORIGIN (mcp, ansible)
                running[pool.submit(contextvars.copy_context().run, one, name)] = name
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                name = running.pop(future)
                try:
                    result = future.result()
                except Exception as exc:  # a bug: still that target's line
                    result = HostResult(name, 2, None, f"internal error: {type(exc).__name__}: {exc}", "")
                results[name] = result
                failures += result.code != 0
                _report(result, router.real_out)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        sys.stdout, sys.stderr = router.real_out, router.real_err
    for name in pending:
        results[name] = HostResult(name, None, None, None, "")
        _report(results[name], router.real_out)
    counts = {
        "ok": sum(r.code == 0 for r in results.values()),
        "failed": sum(r.code not in (0, None) for r in results.values()),
        "not attempted": len(pending),
    }
    print(
        f"{len(names)} target(s): " + ", ".join(f"{v} {k}" for k, v in counts.items()), file=router.real_out
    )
    code = max((r.code or 0 for r in results.values()), default=0)
    if as_json:
        doc = {
            "schema": "patchkeeper/rollout",
            "schema_version": 1,
            "command": what,
            "dry_run": dry_run,
            "exit_code": code,
            "ok": code == 0,
            "serial": at_once,
            "max_fail": max_fail,
            "counts": {k.replace(" ", "_"): v for k, v in counts.items()},
            "targets": {name: _result_doc(results[name]) for name in names},
        }
        document_out.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        document_out.flush()
    return code


def _result_doc(r: HostResult) -> dict[str, Any]:
    """One target's result in a rollout's document."""
    d = r.done
    return {
        "exit_code": r.code,
        "attempted": r.code is not None,
        "result": r.line(),
        "error": r.error,
        "before": d.before if d else None,
        "after": d.after if d else None,
        "changed": d.changed if d else False,
        "verified": d.verified if d else False,
        "rolled_back": d.rolled_back if d else None,
        "output": r.output,
    }


def _report(result: HostResult, out: TextIO) -> None:
    out.write(f"{result.name}  {result.line()}\n")
    if result.code not in (0, None) and result.output.strip():
        for line in result.output.rstrip().splitlines():
            out.write(f"    | {line}\n")
    out.flush()


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class _Stream(io.TextIOBase):
    """sys.stdout or sys.stderr while a rollout runs: a thread that captures writes to its buffer."""

    def __init__(self, router: _Router, real: TextIO) -> None:
        self._router, self._real = router, real

    def write(self, text: str) -> int:
        buffer = getattr(self._router.local, "buffer", None)
        return (buffer or self._real).write(text)

    def flush(self) -> None:
        if getattr(self._router.local, "buffer", None) is None:
            self._real.flush()

    def isatty(self) -> bool:
        return getattr(self._router.local, "buffer", None) is None and self._real.isatty()


class _Router:
    """Routes stdout and stderr by thread: a target's change writes into its own buffer."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.real_out, self.real_err = out, err
        self.local = threading.local()
        self.out, self.err = _Stream(self, out), _Stream(self, err)

    def capture(self) -> io.StringIO:
        self.local.buffer = io.StringIO()
        return cast(io.StringIO, self.local.buffer)

    def release(self) -> None:
        self.local.buffer = None
