"""`patchkeeper init` on the command line: its options and arguments, and the call of its command."""

from __future__ import annotations

from pathlib import Path

import click

from ..commands.init import init as run_init
from ..options import command, json_option


@click.command()
@click.option("--python", metavar="VENV/bin/python", help="the interpreter of the first target, `local`")
@click.option("--package", default="sglang", show_default=True, help="the distribution patch sets change")
@json_option
@click.pass_context
@command
def init(ctx: click.Context, python: str | None, package: str, as_json: bool) -> int:
    """Start a workspace here (or in -w DIR): patchkeeper.toml, the shipped patch sets, snapshots/."""
    return run_init(Path(ctx.obj.get("workspace") or ".").resolve(), python, package, as_json=as_json)
