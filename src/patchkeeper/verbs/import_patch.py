"""`patchkeeper import` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

import click

from ..commands.import_patch import import_patch
from ..options import command, json_option, workspace_of


@click.command("import")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--version", "version", help="the version to give it (default 1.0.0, or the export's)")
@click.option("--subdir", default="", metavar="DIR", help="strip DIR/ from the patch's paths (python)")
@click.option("--package", help="the package it is for (default: the default target's)")
@click.option("-m", "--description", help="the patch set's description")
@json_option
@click.pass_context
@command
def import_cmd(
    ctx: click.Context,
    name: str,
    file: str,
    version: str | None,
    subdir: str,
    package: str | None,
    description: str | None,
    as_json: bool,
) -> int:
    """Make patch set NAME from a patch file, or restore one from `patchkeeper export`."""
    return import_patch(workspace_of(ctx), name, file, version, subdir, package, description, as_json=as_json)
