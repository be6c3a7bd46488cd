"""`patchkeeper record` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

from typing import cast

import click

from ..commands import record as record_verb
from ..completion import complete_states
from ..options import bump_option, command, json_option, target_option, workspace_of


@click.command()
@click.argument("name")
@target_option
@click.option(
    "--from",
    "since",
    metavar="STATE",
    shell_complete=complete_states,
    help="record the target's edits since this state",
)
@click.option(
    "--from-adoption",
    "adoption",
    is_flag=True,
    help="record the hand edits found when the target was adopted (its first baseline), against the release",
)
@click.option("--git", "checkout", metavar="DIR", help="record from a git checkout of the package's source")
@click.option("--range", "span", metavar="A..B", help="with --git: the refs to diff")
@click.option(
    "--subdir", default="", metavar="DIR", help="with --git: the directory holding the package (python)"
)
@bump_option
@click.option("-m", "--description", help="the patch set's description")
@click.option("--package", help="with --git: the package it is for (default: the default target's)")
@click.option("--package-version", metavar="SPEC", help="with --git: PEP 440 specifier of fitting versions")
@json_option
@click.pass_context
@command
def record(
    ctx: click.Context,
    name: str,
    target: str | None,
    since: str | None,
    adoption: bool,
    checkout: str | None,
    span: str | None,
    subdir: str,
    bump: str | None,
    description: str | None,
    package: str | None,
    package_version: str | None,
    as_json: bool,
) -> int:
    """Write patch set NAME from a target's edits since a state, the hand edits found when it was
    adopted, or a git range."""

    if sum(map(bool, (since, adoption, checkout))) != 1:
        raise click.UsageError(
            "give either -t T --from STATE, -t T --from-adoption, or --git DIR --range A..B"
        )
    if adoption:
        return record_verb.record_adoption(
            workspace_of(ctx), target, name, bump, description, as_json=as_json
        )
    if checkout:
        if not span:
            raise click.UsageError("--git needs --range A..B")
        return record_verb.record_git(
            workspace_of(ctx),
            name,
            checkout,
            span,
            subdir,
            bump,
            description,
            package,
            package_version,
            as_json=as_json,
        )
    # exactly one of the three is given: here, --from STATE
    return record_verb.record_target(
        workspace_of(ctx), target, name, cast(str, since), bump, description, as_json=as_json
    )
