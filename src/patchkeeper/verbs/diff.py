"""`patchkeeper diff` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands.diff import diff as run_diff, diff_all
from ..commands.env import diff_env
from ..completion import complete_states, complete_targets
from ..options import command, group_option, json_option, targets_option, workspace_of


@click.command()
@click.argument("targets", nargs=-1, metavar="[TARGET [TARGET2]]", shell_complete=complete_targets)
@targets_option
@group_option
@click.option(
    "--against",
    metavar="STATE",
    shell_complete=complete_states,
    help="compare one target with this recorded state (default: its current one)",
)
@click.option("--patch", "-p", is_flag=True, help="add unified diffs of the differing text files")
@click.option(
    "--env",
    "environment",
    is_flag=True,
    help="compare environments (interpreter, system, distributions, native libraries, GPU) instead of "
    "files; a side may be TARGET:STATE",
)
@click.option(
    "--since-pass",
    is_flag=True,
    help="with --env: compare with the last passing verification of the target's current code state",
)
@json_option
@click.option("--all", "every", is_flag=True, help="every target in the workspace, concurrently, one table")
@click.pass_context
@command
def diff(
    ctx: click.Context,
    targets: tuple[str, ...],
    targets_: tuple[str, ...],
    group: str | None,
    against: str | None,
    patch: bool,
    environment: bool,
    since_pass: bool,
    as_json: bool,
    every: bool,
) -> int:
    """What differs on TARGET (or -t TARGET) from its recorded state, and which patch set owns it; or
    TARGET against TARGET2, side by side (-g GROUP, --all: each target against its own record).
    Exit 0 when nothing differs, 1 when something does."""
    targets = tuple(targets_) + tuple(targets)
    if every or group:
        if targets or against or patch or environment:
            raise click.UsageError(
                "--all and -g compare each target with its own recorded state: "
                "no TARGET, --against, --patch or --env"
            )

        return diff_all(workspace_of(ctx).select((), group, every), as_json)
    if since_pass and (not environment or against or len(targets) > 1):
        raise click.UsageError(
            "--since-pass goes with --env and one target: patchkeeper diff --env -t T --since-pass"
        )
    if environment:
        if patch:
            raise click.UsageError("--patch shows file contents; it does not go with --env")
        return diff_env(workspace_of(ctx), targets, against, as_json, since_pass)

    return run_diff(workspace_of(ctx), targets, against, patch, as_json)
