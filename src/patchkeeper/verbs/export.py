"""`patchkeeper export` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands.export import export as run_export
from ..completion import complete_patchsets
from ..options import command, json_option, workspace_of


@click.command()
@click.argument("name", shell_complete=complete_patchsets)
@json_option
@click.pass_context
@command
def export(ctx: click.Context, name: str, as_json: bool) -> int:
    """Print patch set NAME as one patch that git apply and patch -p1 accept in site-packages."""
    return run_export(workspace_of(ctx), name, as_json)
