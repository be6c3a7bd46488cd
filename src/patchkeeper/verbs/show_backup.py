"""`patchkeeper show-backup` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands.show_backup import show_backup as run_show_backup
from ..options import command, json_option, target_option, workspace_of


@click.command("show-backup")
@click.argument("digest")
@target_option
@json_option
@click.pass_context
@command
def show_backup(ctx: click.Context, digest: str, target: str | None, as_json: bool) -> int:
    """Print the bytes of a backed-up file (a hand edit a change replaced), verified: DIGEST as
    rollback and log show it, or 8+ of its hex digits. `patchkeeper show-backup D > FILE`."""

    return run_show_backup(workspace_of(ctx), target, digest, as_json)
