"""One module per verb; each exposes a plain function that returns an exit code."""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import wraps
from typing import Any, TypeVar, cast

from ..change import changes
from ..change.document import Report
from ..change.plans import Plan
from ..change.rollout import Done, Noted
from ..change.service import ServiceConfig
from ..change.session import Session
from ..errors import BadInput
from ..printable import emit_json as emit_json  # the verbs print their --json documents with it
from ..workspace import Workspace

_ANSWER: ContextVar[dict[str, Any] | None] = ContextVar("answer", default=None)


@contextmanager
def json_answer(as_json: bool) -> Iterator[dict[str, Any]]:
    """A verb that reports in lines, with --json: its lines go to stderr while it runs, and the document
    it fills in (or answer() does) is printed on stdout when it returns (when it raises, run_verb prints
    the error's document instead)."""
    doc: dict[str, Any] = {}
    if not as_json:
        yield doc
        return
    out, sys.stdout = sys.stdout, sys.stderr
    token = _ANSWER.set(doc)
    try:
        yield doc
    finally:
        sys.stdout = out
        _ANSWER.reset(token)
    emit_json(doc)


def answer(**keys: Any) -> None:
    """Add keys to the --json document of the verb under way (nothing without --json)."""
    doc = _ANSWER.get()
    if doc is not None:
        doc.update(keys)


F = TypeVar("F", bound=Callable[..., int])


def answers_json(fn: F) -> F:
    """`fn(..., as_json=True)` (a keyword argument `fn` declares) runs within json_answer: what it says
    goes to stderr, what it answer()s is the document on stdout."""

    @wraps(fn)
    def run(*args: Any, **kwargs: Any) -> int:
        with json_answer(bool(kwargs.get("as_json"))):
            return fn(*args, **kwargs)

    return cast(F, run)


def text_or_base64(key: str, data: bytes) -> dict[str, str]:
    """Bytes in a JSON document: {key: text} when they are UTF-8, else {key_base64: ...}."""
    try:
        return {key: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{key}_base64": base64.b64encode(data).decode("ascii")}


def check_sides(verb: str, names: tuple[str, ...], against: str | None) -> None:
    """`verb` (diff, diff --env) compares one target, with its recorded state (--against), or two
    targets with each other: refuse anything else the same way for both."""
    if len(names) > 2:
        raise BadInput(
            f"{verb} compares one target or two, not {len(names)}",
            f"patchkeeper {verb} HOST [--against STATE], or patchkeeper {verb} HOST1 HOST2",
        )
    if len(names) == 2 and against:
        raise BadInput(
            "--against compares one target with its own recorded state",
            f"drop --against to compare the two targets: patchkeeper {verb} {names[0]} {names[1]}",
        )


def finish(
    ws: Workspace,
    s: Session,
    plan: Plan | None,
    nothing: str,
    dry_run: bool,
    svc: ServiceConfig | None,
    show: Callable[[changes.Step], None],
    report: Report,
    noted: Noted | None,
) -> int:
    """The end of a change verb (apply, rollback): say `nothing` (to do) when there is no plan, else carry
    it out (execute, mirror, verify); tell a rollout (`noted`) and the report, and return the exit code."""
    if plan is None:
        print(f"{s.target.name}: {nothing}; nothing to do")
        if noted is not None:
            noted(Done.unchanged(s, nothing))
        current = s.ledger.current()
        return report.done(0, current, current, dry_run)
    outcome = changes.carry_out(ws, s, plan, dry_run, svc, show)
    if noted is not None:
        noted(Done.of(s, plan, outcome, dry_run, svc is not None))
    return report.done(
        outcome.exit_code, plan.entry.before, plan.entry.after if dry_run else s.ledger.current(), dry_run
    )
