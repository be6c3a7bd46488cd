"""`patchkeeper port` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands.port import port as run_port
from ..completion import complete_patchsets
from ..options import bump_option, command, json_option, target_option, workspace_of


@click.command()
@click.argument("name", shell_complete=complete_patchsets)
@click.option("--to", metavar="VERSION", help="the release of the package to carry the patch set to")
@click.option(
    "--wheel", "given", multiple=True, metavar="FILE.whl", help="the old or the new release's wheel"
)
@target_option
@bump_option
@click.option(
    "--continue", "resume", is_flag=True, help="finish a port that stopped, from its scratch directory"
)
@click.option("--dry-run", "-n", is_flag=True, help="print the report; write nothing")
@json_option
@click.pass_context
@command
def port(
    ctx: click.Context,
    name: str,
    to: str | None,
    given: tuple[str, ...],
    target: str | None,
    bump: str | None,
    resume: bool,
    dry_run: bool,
    as_json: bool,
) -> int:
    """Carry patch set NAME to release VERSION of its package: a three-way merge per file and hunk;
    written as its next version when nothing conflicts (exit 0), else left to resolve (exit 1)."""

    return run_port(workspace_of(ctx), name, to, tuple(given), target, as_json, dry_run, bump, resume)
