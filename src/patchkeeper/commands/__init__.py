"""One module per verb; each exposes a plain function that returns an exit code. This package's
own module holds only what costs no import (a verb loads what it uses: cli.py)."""

from __future__ import annotations

from ..errors import BadInput
from ..printable import emit_json as emit_json  # the verbs print their --json documents with it


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
