"""`patchkeeper log` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands.log import log as run_log, log_all as run_log_all
from ..options import chosen, command, group_option, json_option, targets_option, workspace_of


@click.command()
@targets_option
@group_option
@json_option
@click.option("--all", "every", is_flag=True, help="every target in the workspace, merged, newest first")
@click.pass_context
@command
def log(ctx: click.Context, targets_: tuple[str, ...], group: str | None, as_json: bool, every: bool) -> int:
    """Every transaction on the target, newest first, with its origin (the CLI or an Ansible task)."""
    picked = chosen(ctx, targets_, group, every)
    if picked is not None:
        return run_log_all(picked, as_json)
    return run_log(workspace_of(ctx), targets_[0] if targets_ else None, as_json)
