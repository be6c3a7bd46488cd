"""`patchkeeper apply` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..change.adopt import check_mode
from ..change.rollout import Noted
from ..commands.apply import apply as run_apply
from ..completion import complete_patchsets
from ..options import adopt_options, change_options, command, json_option
from ..workspace import Workspace
from .rollouts import change


@click.command()
@click.argument("name", shell_complete=complete_patchsets)
@change_options
@click.option(
    "--force", is_flag=True, help="apply over hand edits (backed up first) or another package version"
)
@adopt_options
@json_option
@click.pass_context
@command
def apply(
    ctx: click.Context,
    name: str,
    targets_: tuple[str, ...],
    group: str | None,
    every: bool,
    serial: int | None,
    max_fail: int,
    dry_run: bool,
    no_verify: bool,
    force: bool,
    restore_pristine: bool,
    accept_edits: bool,
    as_json: bool,
) -> int:
    """Apply patch set NAME (switching within its group) in one transaction.

    With a [service] table the service is then restarted and verified by a real generation;
    if that fails the previous state is put back (exit 3). On several targets (-t A -t B, -g, --all)
    they are changed --serial at a time, one line each; exit code: the worst of theirs.
    """

    adopt = check_mode(restore_pristine, accept_edits)

    def one(ws: Workspace, target: str | None, noted: Noted | None, json_doc: bool) -> int:
        return run_apply(
            ws, target, name, dry_run, force, verify=not no_verify, adopt=adopt, as_json=json_doc, noted=noted
        )

    return change(
        ctx, one, f"apply {name}", targets_, group, every, serial, max_fail, dry_run, not no_verify, as_json
    )
