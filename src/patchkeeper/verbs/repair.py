"""`patchkeeper repair` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..change.adopt import check_mode
from ..commands.repair import repair_dist
from ..options import adopt_options, command, json_option, target_option, workspace_of


@click.command()
@click.argument("dist")
@target_option
@click.option(
    "--wheel",
    metavar="FILE.whl",
    help="the release wheel (default: the workspace's wheels directory, "
    "else pip download for the target's interpreter)",
)
@click.option("--dry-run", "-n", is_flag=True, help="print what would be restored; change nothing")
@click.option("--no-verify", is_flag=True, help="do not restart and verify the target's [service] afterwards")
@adopt_options
@json_option
@click.pass_context
@command
def repair(
    ctx: click.Context,
    dist: str,
    target: str | None,
    wheel: str | None,
    dry_run: bool,
    no_verify: bool,
    restore_pristine: bool,
    accept_edits: bool,
    as_json: bool,
) -> int:
    """Give the files of installed distribution DIST that differ from its RECORD their release bytes back.

    One transaction (backups in the store, a ledger entry of kind repair): `rollback --to previous`
    undoes it. With a [service] table the service is then restarted and verified (--no-verify skips).
    Exit 0 when all were restored (and it verifies), 1 when some are left (named) or it fails
    verification, 2 when no wheel matches.
    """

    return repair_dist(
        workspace_of(ctx),
        target,
        dist,
        wheel,
        dry_run,
        adopt=check_mode(restore_pristine, accept_edits),
        verify=not no_verify,
        as_json=as_json,
    )
