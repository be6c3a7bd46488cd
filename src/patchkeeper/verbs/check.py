"""`patchkeeper check` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands.check import check as run_check
from ..completion import complete_patchsets
from ..options import command, json_option, target_option, workspace_of


@click.command()
@click.argument("name", shell_complete=complete_patchsets)
@target_option
@click.option("--wheel", metavar="FILE.whl", help="check against a wheel's files instead of a target")
@json_option
@click.pass_context
@command
def check(ctx: click.Context, name: str, target: str | None, wheel: str | None, as_json: bool) -> int:
    """Would patch set NAME apply? Per file: clean, at an offset, or the failing hunk. Changes nothing."""
    return run_check(workspace_of(ctx), target, name, wheel, as_json)
