"""`patchkeeper status` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands import status as status_verb
from ..options import chosen, command, group_option, json_option, targets_option, workspace_of


@click.command()
@targets_option
@group_option
@json_option
@click.option("--all", "every", is_flag=True, help="every target in the workspace, concurrently, one table")
@click.pass_context
@command
def status(
    ctx: click.Context, targets_: tuple[str, ...], group: str | None, as_json: bool, every: bool
) -> int:
    """The applied stack, and whether the files still match the recorded state (without -t, of the
    default target; with no default_target and several targets, of them all, as --all)."""
    picked = chosen(ctx, targets_, group, every)
    if picked is not None:
        return status_verb.status_all(picked, as_json)
    ws = workspace_of(ctx)
    if not targets_ and ws.default_target is None and len(ws.targets) > 1:
        return status_verb.status_all(ws, as_json)
    return status_verb.status(ws, targets_[0] if targets_ else None, as_json)
