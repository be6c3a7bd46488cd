"""What several verbs share on the command line (click's, as cli.py is): the workspace, -t once or
repeated, -g, --all, a rollout's options, a change on one target or a rollout over many, and the
wrapper that runs every verb, where errors become exit codes in one place (run_verb)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import wraps
from typing import Any, NoReturn, TypeVar

import click

from . import pipes, workspace
from .change.rollout import Noted, rollout
from .completion import complete_targets
from .errors import EXIT_INTERRUPTED, PatchkeeperError, error_document, os_hint
from .patchset import saving
from .printable import lines

F = TypeVar("F", bound=Callable[..., Any])
# a change on one target: (workspace, target name, the rollout's Noted or None, --json) -> exit code
OnOne = Callable[[workspace.Workspace, str | None, Noted | None, bool], int]


def coloured(stream: Any) -> bool:
    """Colour on a terminal only, and never with NO_COLOR set (https://no-color.org) or TERM=dumb."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return bool(tty) and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _say(text: str) -> None:
    text = lines(text)
    if coloured(sys.stderr):  # the error's word in red, its hint's in bold
        text = text.replace("error:", click.style("error:", fg="red", bold=True), 1)
        text = text.replace("hint:", click.style("hint:", bold=True), 1)
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def json_error(message: str, hint: str, code: int) -> None:
    """The document of a --json command that ends in an error (docs/json.md, "Errors"), unless the
    command already wrote its own (a change's document carries its error): one document either way."""
    if not getattr(sys.stdout, "wrote", False):
        sys.stdout.write(json.dumps(error_document(message, hint, code), indent=2, sort_keys=True) + "\n")
        sys.stdout.flush()


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


_GROUP_VALUED = ("-w", "--workspace", "-i", "--inventory")  # the group's options that take a value
_TARGET = ("-t", "--target")


def _option_at(argv: list[str], i: int, names: tuple[str, ...]) -> int:
    """How many words the option at argv[i] takes up when it is one of `names` (`-w DIR`, `-wDIR`,
    `--workspace=DIR`, `--workspace DIR`), else 0."""
    word = argv[i]
    if word.startswith("--"):
        name, eq, _ = word.partition("=")
        return (1 if eq else 2) if name in names else 0
    if word[:2] in names:
        return 1 if len(word) > 2 else 2
    return 0


def verb_order(argv: list[str]) -> list[str]:
    """The words with -t moved after the verb and -w/-i before it, as `git -C` and most CLIs take
    them on either side: `patchkeeper -t gpu1 status` is `patchkeeper status -t gpu1`."""
    before: list[str] = []
    targets: list[str] = []
    i = 0
    while i < len(argv):
        took = _option_at(argv, i, _GROUP_VALUED + _TARGET)
        if took:
            (targets if argv[i][:2] == "-t" or argv[i].startswith("--target") else before).extend(
                argv[i : i + took]
            )
            i += took
        elif argv[i].startswith("-"):
            before.append(argv[i])
            i += 1
        else:
            break
    if i >= len(argv):
        return argv  # no verb: click says what is missing
    verb, after, rest = argv[i], [], argv[i + 1 :]
    j = 0
    while j < len(rest):
        if rest[j] == "--":
            after += rest[j:]
            break
        took = _option_at(rest, j, _GROUP_VALUED)
        if took:
            before.extend(rest[j : j + took])
            j += took
        else:
            after.append(rest[j])
            j += 1
    return before + [verb] + targets + after


def summary(command: click.Command) -> str:
    """A verb's line in --help: its short_help, else its help's first sentence, whole (click's default
    cuts it with "..." at the terminal's width; the list wraps it instead)."""
    if command.short_help:
        return command.short_help
    text = " ".join((command.help or "").split("\n\n")[0].split())  # the first paragraph, one line
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


class Verbs(click.Group):
    """The verbs' group: -t and -w on either side of the verb (verb_order); with --json anywhere on
    the line, a usage error (an unknown option, a missing argument, -t given twice...) is a JSON
    document on stdout too, besides click's lines on stderr."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            verb = self.get_command(ctx, name)
            if verb is not None and not verb.hidden:
                rows.append((name, summary(verb)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = verb_order(list(sys.argv[1:] if args is None else args))
        if not standalone_mode or "--json" not in argv:
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            exc.show()
            hint = (
                f"see `{exc.ctx.command_path} --help`"
                if isinstance(exc, click.UsageError) and exc.ctx
                else ""
            )
            json_error(exc.format_message(), hint, exc.exit_code)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            json_error("aborted", "", 1)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)  # --help, --version: their text, exit 0


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


def change(
    ctx: click.Context,
    one: OnOne,
    what: str,
    targets: tuple[str, ...],
    group: str | None,
    every: bool,
    serial: int | None,
    max_fail: int,
    dry_run: bool,
    verify: bool,
    as_json: bool = False,
) -> int:
    """A change on one target (`one(ws, name, noted, as_json)`), or a rollout over those chosen: each
    target's change then reports in words (kept per target), and --json is the rollout's document."""
    picked = chosen(ctx, targets, group, every)
    if picked is None:
        return one(workspace_of(ctx), targets[0] if targets else None, None, as_json)

    return rollout(
        picked,
        lambda ws, name, noted: one(ws, name, noted, False),
        what,
        serial,
        max_fail,
        verify,
        dry_run,
        as_json,
    )
