"""A change on one target or a rollout over many (apply, rollback), as the command line asks for it."""

from __future__ import annotations

from collections.abc import Callable

import click

from ..change.rollout import Noted, rollout
from ..options import chosen, workspace_of
from ..workspace import Workspace

# a change on one target: (workspace, target name, the rollout's Noted or None, --json) -> exit code
OnOne = Callable[[Workspace, str | None, Noted | None, bool], int]


def change(
    ctx: click.Context,
    one: OnOne,
    what: str,
    targets: tuple[str, ...],
    group: str | None,
    every: bool,
    serial: int | None,
    max_fail: int,
    dry_run: bool,
    verify: bool,
    as_json: bool = False,
) -> int:
    """A change on one target (`one(ws, name, noted, as_json)`), or a rollout over those chosen: each
    target's change then reports in words (kept per target), and --json is the rollout's document."""
    picked = chosen(ctx, targets, group, every)
    if picked is None:
        return one(workspace_of(ctx), targets[0] if targets else None, None, as_json)

    return rollout(
        picked,
        lambda ws, name, noted: one(ws, name, noted, False),
        what,
        serial,
        max_fail,
        verify,
        dry_run,
        as_json,
    )
