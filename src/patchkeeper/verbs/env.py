"""`patchkeeper env` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands.env import env as run_env
from ..options import command, json_option, target_option, workspace_of


@click.command("env")
@target_option
@json_option
@click.pass_context
@command
def env_cmd(ctx: click.Context, target: str | None, as_json: bool) -> int:
    """The target's environment: interpreter, system, GPU stack, distributions, native libraries."""
    return run_env(workspace_of(ctx), target, as_json)
