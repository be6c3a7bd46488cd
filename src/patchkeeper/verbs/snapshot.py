"""`patchkeeper snapshot` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..change.adopt import check_mode
from ..commands.snapshot import snapshot as run_snapshot
from ..options import adopt_options, command, json_option, target_option, workspace_of


@click.command()
@target_option
@click.option("--name", required=True, help="the state's name, for rollback --to NAME")
@click.option("--manifest-only", is_flag=True, help="record digests only, not the bytes")
@click.option("--dry-run", "-n", is_flag=True, help="say what would be recorded; change nothing")
@adopt_options
@json_option
@click.pass_context
@command
def snapshot(
    ctx: click.Context,
    target: str | None,
    name: str,
    manifest_only: bool,
    dry_run: bool,
    restore_pristine: bool,
    accept_edits: bool,
    as_json: bool,
) -> int:
    """Record the target's files as a named state."""
    return run_snapshot(
        workspace_of(ctx),
        target,
        name,
        manifest_only,
        adopt=check_mode(restore_pristine, accept_edits),
        dry_run=dry_run,
        as_json=as_json,
    )
