"""`patchkeeper clear-caches` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands.clear_caches import clear_caches as run_clear_caches
from ..options import command, group_option, json_option, targets_option, workspace_of


@click.command("clear-caches")
@targets_option
@group_option
@click.option("--all", "every", is_flag=True, help="every target in the workspace")
@json_option
@click.pass_context
@command
def clear_caches(
    ctx: click.Context, targets_: tuple[str, ...], group: str | None, every: bool, as_json: bool
) -> int:
    """Delete every cache kept for the target (or -t A -t B, -g, --all) and your user cache.

    Caches only save time (docs/files-and-caches.md): records are kept, and the next command that
    needs a cache writes it again. `audit --rehash` reads none of them without deleting them.
    """
    return run_clear_caches(workspace_of(ctx), targets_, group, every, as_json)
