"""`patchkeeper audit` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands.audit import audit as run_audit
from ..options import chosen, command, group_option, json_option, targets_option, workspace_of


@click.command()
@targets_option
@group_option
@click.option(
    "--probe",
    "probes",
    multiple=True,
    metavar="MODULE",
    help="import MODULE in the target's interpreter (a separate process); repeatable",
)
@click.option("--all", "every", is_flag=True, help="every target in the workspace, concurrently, one table")
@json_option
@click.option("-v", "--verbose", is_flag=True, help="also list the files the applied patch sets changed")
@click.option("--quiet", "-q", is_flag=True, help="no progress bar")
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="how long to wait for a change under way on the target to end (default 5)",
)
@click.option("--rehash", is_flag=True, help="ignore every cache and seal: read and hash every file again")
@click.pass_context
@command
def audit(
    ctx: click.Context,
    targets_: tuple[str, ...],
    group: str | None,
    probes: tuple[str, ...],
    every: bool,
    as_json: bool,
    verbose: bool,
    quiet: bool,
    wait: float | None,
    rehash: bool,
) -> int:
    """What differs in the target's site-packages, and why: patched, drift, environment, bytecode, probe."""
    picked = chosen(ctx, targets_, group, every)
    if picked is not None:
        return run_audit(picked, None, list(probes), True, as_json, verbose, quiet, wait, rehash)
    return run_audit(
        workspace_of(ctx),
        targets_[0] if targets_ else None,
        list(probes),
        False,
        as_json,
        verbose,
        quiet,
        wait,
        rehash,
    )
