"""`patchkeeper show` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands.show import show as run_show
from ..completion import complete_patchsets
from ..options import command, json_option, workspace_of


@click.command()
@click.argument("name", shell_complete=complete_patchsets)
@json_option
@click.pass_context
@command
def show(ctx: click.Context, name: str, as_json: bool) -> int:
    """Patch set NAME: metadata, files, diffstat, and the targets it is applied on."""
    return run_show(workspace_of(ctx), name, as_json)
