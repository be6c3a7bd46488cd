"""`patchkeeper verify` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands import verify as verify_verb
from ..options import chosen, command, group_option, json_option, targets_option, workspace_of


@click.command("verify")
@targets_option
@group_option
@json_option
@click.option("--restart", "with_restart", is_flag=True, help="run the service's restart command first")
@click.option("--all", "every", is_flag=True, help="every target in the workspace, concurrently, one table")
@click.pass_context
@command
def verify_cmd(
    ctx: click.Context,
    targets_: tuple[str, ...],
    group: str | None,
    as_json: bool,
    with_restart: bool,
    every: bool,
) -> int:
    """Check the target's service: it answers, runs the unit's command and speculative algorithm, and
    generates enough, fast enough, not degenerate, the same greedy output as before.

    Exit 0 when it passes, 1 when a check fails (nothing is changed or rolled back): then what changed
    since the code state last passed, and the command to run next.
    """

    picked = chosen(ctx, targets_, group, every)
    if picked is not None:
        return verify_verb.verify_all(picked, as_json, with_restart)
    return verify_verb.verify(workspace_of(ctx), targets_[0] if targets_ else None, as_json, with_restart)
