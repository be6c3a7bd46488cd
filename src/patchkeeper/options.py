"""What several verbs share on the command line (click's, as cli.py and verbs/ are): the workspace,
-t once or repeated, -g, --all, a rollout's options, --bump, and the wrapper that runs every verb,
where errors become exit codes in one place (run_verb)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from functools import wraps
from typing import Any, NoReturn, TypeVar

import click

from . import pipes, workspace
from .cli import json_error, say as _say
from .completion import complete_targets
from .errors import EXIT_INTERRUPTED, PatchkeeperError, os_hint
from .patchset import saving

F = TypeVar("F", bound=Callable[..., Any])


def run_verb(fn: Callable[..., int], *args: Any, **kwargs: Any) -> NoReturn:
    """Call a verb and exit with its code; an error becomes one line on stderr and its exit code
    (with --json, also a document on stdout)."""
    pipes.quiet_when_reader_leaves()
    as_json = bool(kwargs.get("as_json"))
    try:
        code = fn(*args, **kwargs)
    except PatchkeeperError as exc:
        _say(f"patchkeeper: error: {exc}")
        if as_json:
            json_error(exc.message, exc.hint, exc.exit_code)
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        if not pipes.stdout_gone():
            raise  # another pipe (a host's channel...): a real error, reported below
        sys.exit(141)  # as git does when its reader leaves in the middle of raw bytes: 128 + SIGPIPE
    except OSError as exc:  # the file system said no (permissions, a full disk): one line, not a traceback
        where = f": {exc.filename}" if exc.filename else ""
        hint = os_hint(
            exc.errno,
            "run the command again; an interrupted change is finished or undone by the next command",
        )
        _say(f"patchkeeper: error: {exc.strerror or exc}{where}\n  hint: {hint}")
        if as_json:
            json_error(f"{exc.strerror or exc}{where}", hint, 2)
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C: its own code, not 1 ("differences found")
        hint = (
            "a change that was under way is finished or undone by `patchkeeper recover` (or by the next command "
            "on the target)"
        )
        _say(f"\npatchkeeper: error: interrupted (Ctrl-C)\n  hint: {hint}")
        if as_json:
            json_error("interrupted (Ctrl-C)", hint, EXIT_INTERRUPTED)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code)


def command(fn: Callable[..., int]) -> Callable[..., None]:
    """Run a verb: build the workspace, call it, turn every PatchkeeperError into its exit code."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        run_verb(fn, *args, **kwargs)

    return wrapper


def _one(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> str | None:
    """-t of a verb that works on one target: given twice is an error, not the last one silently."""
    if len(value) > 1:
        raise click.UsageError(
            f"{ctx.info_name} works on one target: -t given {len(value)} times ({', '.join(value)})"
        )
    return value[0] if value else None


target_option = click.option(
    "-t",
    "--target",
    multiple=True,
    callback=_one,
    shell_complete=complete_targets,
    help="target name from patchkeeper.toml (default: default_target)",
)
targets_option = click.option(
    "-t",
    "--target",
    "targets_",
    multiple=True,
    shell_complete=complete_targets,
    help="a target (default: default_target); repeat it for several",
)
group_option = click.option("-g", "--group", help="the targets of a group ([groups], or an inventory's)")


def change_options(fn: F) -> F:
    """The options of a change: where (-t repeated, -g, --all), how many at a time, --dry-run, --no-verify."""
    for option in reversed(
        [
            targets_option,
            group_option,
            click.option(
                "--all", "every", is_flag=True, help="every target, as a rollout (--serial, --max-fail)"
            ),
            click.option(
                "--serial",
                type=click.IntRange(min=1),
                metavar="N",
                help="targets changed at a time (default: 1 when a target has a [service], else all)",
            ),
            click.option(
                "--max-fail",
                type=click.IntRange(min=0),
                default=0,
                show_default=True,
                help="failed targets tolerated before no new target is started",
            ),
            click.option("--dry-run", "-n", is_flag=True, help="print the plan; change nothing"),
            click.option(
                "--no-verify",
                is_flag=True,
                help="do not restart and verify the target's [service] afterwards",
            ),
        ]
    ):
        fn = option(fn)
    return fn


bump_option = click.option(
    "--bump",
    type=click.Choice(["major", "minor", "patch"]),
    help="raise the version of an existing patch set whose content changes",
)
json_option = click.option(
    "--json", "as_json", is_flag=True, help="print one JSON document (docs/json.md); progress on stderr"
)


def adopt_options(fn: F) -> F:
    """--restore-pristine / --accept-edits: what to do with hand edits found before the first baseline."""
    fn = click.option(
        "--accept-edits",
        is_flag=True,
        help="before the first baseline: record files that differ from RECORD as they are",
    )(fn)
    return click.option(
        "--restore-pristine",
        is_flag=True,
        help="before the first baseline: give files that differ from RECORD the release's bytes",
    )(fn)


def workspace_of(ctx: click.Context) -> workspace.Workspace:
    root = workspace.find(ctx.obj.get("workspace"))
    ws = workspace.load(root, ctx.obj.get("inventory"))
    done = saving.recover(ws.patchsets_dir)
    for line in done:
        _say(f"patchkeeper: note: {line}")
    return replace(ws, recovered=tuple(done)) if done else ws


def chosen(
    ctx: click.Context, targets: tuple[str, ...], group: str | None, every: bool
) -> workspace.Workspace | None:
    """The workspace narrowed to -t (repeated), -g or --all; None when one target (or the default) is meant."""
    if not every and group is None and len(targets) <= 1:
        return None
    if every and (targets or group):
        raise click.UsageError("--all takes every target: no -t or -g with it")
    return workspace_of(ctx).select(targets, group, every)
