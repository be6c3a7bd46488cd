"""`patchkeeper recover` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands.recover import recover as run_recover
from ..options import command, json_option, target_option, workspace_of


@click.command()
@target_option
@json_option
@click.pass_context
@command
def recover(ctx: click.Context, target: str | None, as_json: bool) -> int:
    """Finish or undo a transaction that was interrupted (any command does this first)."""
    return run_recover(workspace_of(ctx), target, as_json)
