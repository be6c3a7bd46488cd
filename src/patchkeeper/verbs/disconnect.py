"""`patchkeeper disconnect` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands.disconnect import disconnect as run_disconnect
from ..options import command, json_option, target_option, workspace_of


@click.command()
@target_option
@click.option("--all", "every", is_flag=True, help="every held connection of this user")
@json_option
@click.pass_context
@command
def disconnect(ctx: click.Context, target: str | None, every: bool, as_json: bool) -> int:
    """End the held SSH connection of a target (or --all), before its `persist` seconds run out."""
    return run_disconnect(None if every else workspace_of(ctx), target, every, as_json)
