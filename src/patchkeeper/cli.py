"""The command line: the only module that knows click; maps errors to exit codes in one place."""

from __future__ import annotations

import sys
from functools import wraps

import click

from .errors import PatchkeeperError


def _workspace(ctx: click.Context):
    from . import workspace

    root = workspace.find(ctx.obj.get("workspace"))
    return workspace.load(root)


def command(fn):
    """Run a verb: build the workspace, call it, turn every PatchkeeperError into its exit code."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        from .agent import AgentError

        try:
            code = fn(*args, **kwargs)
        except PatchkeeperError as exc:
            click.echo(f"patchkeeper: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except AgentError as exc:
            click.echo(f"patchkeeper: error: {exc}", err=True)
            sys.exit(2)
        sys.exit(code)

    return wrapper


target_option = click.option("-t", "--target", help="target name from patchkeeper.toml (default: default_target)")
json_option = click.option("--json", "as_json", is_flag=True, help="print one JSON document")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--workspace", "-w", metavar="DIR", help="workspace directory (default: $PATCHKEEPER_WORKSPACE, "
              "else the current directory and its parents)")
@click.version_option(package_name="patchkeeper")
@click.pass_context
def main(ctx: click.Context, workspace: str | None) -> None:
    """Versioned patch sets over an installed Python package: apply atomically, roll back exactly."""
    ctx.obj = {"workspace": workspace}


@main.command("list")
@json_option
@click.pass_context
@command
def list_cmd(ctx, as_json):
    """Patch sets, versions, and which package version each fits."""
    from .commands.list import list_patchsets

    return list_patchsets(_workspace(ctx), as_json)


@main.command()
@click.argument("name")
@target_option
@click.option("--dry-run", "-n", is_flag=True, help="print the plan; change nothing")
@click.option("--force", is_flag=True, help="apply over hand edits (backed up first) or another package version")
@click.option("--no-verify", is_flag=True, help="do not restart and verify the target's [service] afterwards")
@click.pass_context
@command
def apply(ctx, name, target, dry_run, force, no_verify):
    """Apply patch set NAME (switching within its group) in one transaction.

    With a [service] table the service is then restarted and verified by a real generation;
    if that fails the previous state is put back (exit 3).
    """
    from .commands.apply import apply as run

    return run(_workspace(ctx), target, name, dry_run, force, verify=not no_verify)


@main.command()
@target_option
@click.option("--to", "to", required=True, metavar="STATE",
              help="baseline | previous | a state name | a state id | a transaction id")
@click.option("--dry-run", "-n", is_flag=True, help="print the plan; change nothing")
@click.option("--no-verify", is_flag=True, help="do not restart and verify the target's [service] afterwards")
@click.pass_context
@command
def rollback(ctx, target, to, dry_run, no_verify):
    """Give every managed file the exact bytes and mode of STATE."""
    from .commands.rollback import rollback as run

    return run(_workspace(ctx), target, to, dry_run, verify=not no_verify)


@main.command()
@target_option
@json_option
@click.pass_context
@command
def status(ctx, target, as_json):
    """The applied stack, and whether the files still match the recorded state."""
    from .commands.status import status as run

    return run(_workspace(ctx), target, as_json)


@main.command()
@target_option
@json_option
@click.pass_context
@command
def log(ctx, target, as_json):
    """Every transaction on the target, newest first."""
    from .commands.log import log as run

    return run(_workspace(ctx), target, as_json)


@main.command()
@target_option
@click.option("--name", required=True, help="the state's name, for rollback --to NAME")
@click.option("--manifest-only", is_flag=True, help="record digests only, not the bytes")
@click.pass_context
@command
def snapshot(ctx, target, name, manifest_only):
    """Record the target's files as a named state."""
    from .commands.snapshot import snapshot as run

    return run(_workspace(ctx), target, name, manifest_only)


@main.command()
@target_option
@click.pass_context
@command
def recover(ctx, target):
    """Finish or undo a transaction that was interrupted (any command does this first)."""
    from .commands.recover import recover as run

    return run(_workspace(ctx), target)


@main.command("verify")
@target_option
@json_option
@click.option("--restart", "with_restart", is_flag=True, help="run the service's restart command first")
@click.pass_context
@command
def verify_cmd(ctx, target, as_json, with_restart):
    """Check the target's service: it answers, and generates enough, fast enough, not degenerate.

    Exit 0 when it passes, 1 when a check fails (nothing is changed or rolled back).
    """
    from .commands.verify import verify as run

    return run(_workspace(ctx), target, as_json, with_restart)


if __name__ == "__main__":  # pragma: no cover
    main()
