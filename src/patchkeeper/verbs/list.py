"""`patchkeeper list` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands.list import list_patchsets
from ..options import command, json_option, workspace_of


@click.command("list")
@json_option
@click.pass_context
@command
def list_cmd(ctx: click.Context, as_json: bool) -> int:
    """Patch sets, versions, and which package version each fits."""
    return list_patchsets(workspace_of(ctx), as_json)
