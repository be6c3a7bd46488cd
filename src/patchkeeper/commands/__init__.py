"""One module per verb; each exposes a plain function that returns an exit code. This package's
own module holds only what costs no import (a verb loads what it uses: cli.py)."""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import wraps
from typing import Any, TypeVar, cast

from ..errors import BadInput
from ..printable import emit_json as emit_json  # the verbs print their --json documents with it

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
    if len(names) == 2 and names[0] == names[1]:
        raise BadInput(
            f"{verb} compares two targets with each other, not {names[0]!r} with itself",
            f"patchkeeper {verb} {names[0]} compares it with its recorded state",
        )
    if len(names) == 2 and against:
        raise BadInput(
            "--against compares one target with its own recorded state",
            f"drop --against to compare the two targets: patchkeeper {verb} {names[0]} {names[1]}",
        )
