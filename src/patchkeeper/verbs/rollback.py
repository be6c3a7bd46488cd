"""`patchkeeper rollback` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..change.rollout import Noted
from ..commands.rollback import rollback as run_rollback
from ..completion import complete_states
from ..options import change_options, command, json_option
from ..workspace import Workspace
from .rollouts import change


@click.command()
@change_options
@click.option(
    "--to",
    "to",
    required=True,
    metavar="STATE",
    shell_complete=complete_states,
    help="baseline | previous | a state name | a state id | a transaction id",
)
@json_option
@click.pass_context
@command
def rollback(
    ctx: click.Context,
    targets_: tuple[str, ...],
    group: str | None,
    every: bool,
    serial: int | None,
    max_fail: int,
    dry_run: bool,
    no_verify: bool,
    to: str,
    as_json: bool,
) -> int:
    """Give every managed file the exact bytes and mode of STATE (on several targets: as apply does)."""

    def one(ws: Workspace, target: str | None, noted: Noted | None, json_doc: bool) -> int:
        return run_rollback(ws, target, to, dry_run, verify=not no_verify, as_json=json_doc, noted=noted)

    return change(
        ctx,
        one,
        f"rollback --to {to}",
        targets_,
        group,
        every,
        serial,
        max_fail,
        dry_run,
        not no_verify,
        as_json,
    )
