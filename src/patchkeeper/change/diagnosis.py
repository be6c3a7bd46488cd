"""A failed verification's diagnosis: what changed since the code state last passed (its files, the
environment), and the command to run next (audit, repair DIST, rollback)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from ..checks import env_gpu, environment
from ..records.ledger import Ledger, LedgerEntry, State
from ..targets import Target
from . import plans


@dataclass(frozen=True)
class Diagnosis:
    """What differs from the last time `state` passed verification, and what to run next."""

    target: str
    state: State
    last: LedgerEntry | None  # its newest passing verification that kept a fingerprint; None: never passed
    code: dict[str, str]  # the files of the state that differ now: key -> changed | added | removed | mode
    environment: tuple[Any, ...] = ()  # environment.Difference, from that pass to now
    gpu: dict[str, Any] = dataclasses.field(default_factory=dict)  # the GPU facts now
    passed_before: State | None = None  # when `state` never passed: the newest state that did
    restored: bool = False  # the state's files were just put back (an automatic rollback)
    next: tuple[str, ...] = ()  # commands to run next, most likely first
    code_error: str | None = None  # why the files could not be compared

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "state": self.state.to_dict(),
            "last_pass": self.last.id if self.last else None,
            "last_pass_time": self.last.time if self.last else None,
            "code": dict(self.code),
            "code_error": self.code_error,
            "environment": [c.to_dict() for c in self.environment],
            "gpu": self.gpu,
            "passed_before": self.passed_before.to_dict() if self.passed_before else None,
            "restored": self.restored,
            "next": list(self.next),
        }


def diagnose(target: Target, ledger: Ledger, state: State, restored: bool = False) -> Diagnosis:
    """Compare the target now with the newest passing verification of `state`: its files against the
    state's manifest (none may differ after a rollback), its environment against that pass's
    fingerprint; and say what to run next."""

    name = target.name
    code: dict[str, str] = {}
    code_error = None
    try:
        code = plans.drift(target, state.manifest)
    except Exception as exc:  # noqa: BLE001 - a diagnosis says what it could not find out, and goes on
        code_error = str(exc).splitlines()[0]
    last, changes, gpu = environment.since_last_pass(target, ledger, state)
    passed_before = None if last is not None else _newest_passing_state(ledger, state)
    steps: list[str] = []
    if code:
        steps.append(f"patchkeeper diff -t {name}   # the files that differ from state {state.id}")
        steps.append(f"patchkeeper rollback --to {state.id} -t {name}   # gives them the state's bytes back")
    for c in changes:
        if c.area == "distribution" and c.kind == "files":
            steps.append(f"patchkeeper repair {c.subject} -t {name}   # its files differ from its RECORD")
        elif c.area == "distribution" and c.kind in ("version", "removed"):
            was = c.detail.split(" ")[0]
            steps.append(
                f"pip install {c.subject}=={was}   # in the target's environment: {c.subject} {c.detail}"
            )
    if any(c.area == "native" for c in changes):
        steps.append(
            f"patchkeeper audit -t {name}   # shared libraries resolve otherwise than at the last pass"
        )
    if last is None and passed_before is not None:
        steps.append(
            f"patchkeeper rollback --to {passed_before.id} -t {name}   # the newest state that passed"
        )
    if not steps:
        steps.append(f"patchkeeper audit -t {name}   # then the service's logs: nothing recorded differs")
    return Diagnosis(
        name,
        state,
        last,
        code,
        tuple(changes),
        gpu,
        passed_before,
        restored,
        tuple(dict.fromkeys(steps)),
        code_error,
    )


def _newest_passing_state(ledger: Ledger, other_than: State) -> State | None:
    entries = ledger.entries()
    for i in reversed(range(len(entries))):
        slot = entries.slots[i]
        if slot.kind != "verify" or slot.after == other_than.id:
            continue
        report: Any = dict(entries[i].extra).get("verify") or {}
        if report.get("ok"):
            return entries[i].after
    return None


def render(d: Diagnosis) -> list[str]:
    """The diagnosis as a user reads it."""

    out: list[str] = []
    if d.last is None:
        out.append(
            f"{d.target}: state {d.state.id} has no passing verification with its environment recorded"
            + (
                f"; the newest state that passed is {d.passed_before.id} ({d.passed_before.stack_text()})"
                if d.passed_before
                else "; nothing to compare with"
            )
        )
    else:
        v: Any = dict(d.last.extra).get("verify") or {}
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d.last.time))
        figures = (
            f"{v['tokens']} tokens in {v.get('seconds') or 0:.2f}s"
            if v.get("tokens") is not None
            else "passed"
        )
        out.append(
            f"{d.target}: since state {d.state.id} last passed verification ({when}, {figures}; "
            f"ledger entry {d.last.id}):"
        )
    if d.code_error:
        out.append(f"  code         not compared: {d.code_error}")
    elif not d.code:
        out.append(
            f"  code         none: state {d.state.id} is in place again"
            if d.restored
            else f"  code         none: the files are state {d.state.id}'s"
        )
    else:
        shown = ", ".join(f"{k} ({kind})" for k, kind in list(d.code.items())[:8])
        out.append(
            f"  code         {len(d.code)} file(s) differ from state {d.state.id}: {shown}"
            + (f" … and {len(d.code) - 8} more" if len(d.code) > 8 else "")
        )
    if d.last is not None:
        for c in d.environment:
            out.append(f"  {c.area:12} {c.kind:10} {c.subject}  {c.detail}")
        if not d.environment:
            out.append(
                "  environment  no differences (interpreter, system, distributions, native libraries, "
                "GPU stack)"
            )
        out.append(f"  GPU now      {env_gpu.gpu_text(d.gpu)}")
        for line in env_gpu.gpu_health(d.gpu):
            out.append(f"    {line}")
        for line in (d.gpu.get("xid") or [])[-5:]:
            out.append(f"    | {line}")
    out.append("  next: " + d.next[0])
    out += [f"        {n}" for n in d.next[1:]]
    return out
