"""The command line (click, here, in options.py and in verbs/): the group and its table of verbs,
each verb's module imported only when that verb runs, so a command pays for its own imports only."""

from __future__ import annotations

import difflib
import importlib
import json
import os
import sys
from typing import Any

import click
from click.shell_completion import CompletionItem

from .errors import error_document
from .printable import lines, one_line


def coloured(stream: Any) -> bool:
    """Colour on a terminal only, and never with NO_COLOR set (https://no-color.org) or TERM=dumb."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return bool(tty) and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def say(text: str) -> None:
    """An error, note or hint on stderr, control characters escaped (printable.lines)."""
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


# click 8.2+ raises it for a bare `patchkeeper` (its help, exit 2); click 8.1 printed the help and exited 0
_HELP_FOR_NO_ARGS: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())
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


class UnknownVerb(click.UsageError):
    """A verb that is not one (click's message), with the verbs whose names are close to it."""

    def __init__(self, name: str, ctx: click.Context) -> None:
        super().__init__(f"No such command {name!r}.", ctx)
        self.close = difflib.get_close_matches(name, sorted(VERBS), n=3, cutoff=0.6)


def usage_hint(exc: click.ClickException) -> str:
    """What to do after a usage error: the closest verbs to an unknown one, else the command's usage
    line and its --help (each a command as the user ran it, `patchkeeper` or `python -m patchkeeper`)."""
    ctx: click.Context | None = getattr(exc, "ctx", None)
    if ctx is None:
        return "see `patchkeeper --help`"
    top = ctx.find_root().command_path
    if isinstance(exc, UnknownVerb):
        listed = f"`{top} --help` lists every verb"
        if not exc.close:
            return listed
        return f"did you mean {' or '.join(f'`{top} {verb}`' for verb in exc.close)}? {listed}"
    usage = " ".join([ctx.command_path, *ctx.command.collect_usage_pieces(ctx)])
    return f"the usage is `{usage}`; `{ctx.command_path} --help` says what each option does"


class Verbs(click.Group):
    """The verbs' group: -t and -w on either side of the verb (verb_order); a usage error (an
    unknown option or verb, a missing argument, -t given twice...) is one line and a hint as every
    error is (usage_hint), and with --json anywhere on the line a JSON document on stdout too. Each
    verb of VERBS is loaded when it runs (click's lazily loading group: list_commands and
    get_command); the --help listing and the completion of verb names come from VERBS alone."""

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = verb_order(list(sys.argv[1:] if args is None else args))
        if not standalone_mode:
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        as_json = "--json" in argv
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except _HELP_FOR_NO_ARGS as exc:  # a bare `patchkeeper`: the help is the hint
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:  # a usage error, as every error: one line and a hint
            message, hint = exc.format_message(), usage_hint(exc)
            say(f"patchkeeper: error: {one_line(message)}\n  hint: {hint}")  # a word may hold a newline
            if as_json:
                json_error(message, hint, exc.exit_code)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            if as_json:
                json_error("aborted", "", 1)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)  # --help, --version: their text, exit 0

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if name not in VERBS and not name.startswith("-") and not ctx.resilient_parsing:
            raise UnknownVerb(name, ctx)
        return super().resolve_command(ctx, args)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:  # `-w` without its value: click's parser names no context
            exc.ctx = exc.ctx or ctx
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # `record --git` without its value: the verb's, for its usage line
            verb = ctx.invoked_subcommand
            if exc.ctx is None and verb and (command := self.get_command(ctx, verb)):
                exc.ctx = click.Context(command, info_name=verb, parent=ctx)
            raise

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(VERBS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in VERBS:
            return None
        module, _, name = VERBS[cmd_name][0].partition(":")
        command = getattr(importlib.import_module(f"{__package__}.verbs.{module}"), name)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):  # each line whole, wrapped (click's default cuts it with "...")
            formatter.write_dl([(name, VERBS[name][1]) for name in sorted(VERBS)])

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        named = [
            CompletionItem(name, help=_summary(name)) for name in sorted(VERBS) if name.startswith(incomplete)
        ]
        return named + click.Command.shell_complete(self, ctx, incomplete)


# Every verb: its command in patchkeeper.verbs ("module:function"), and the line `patchkeeper --help`
# shows for it (the first sentence of the command's docstring: tests/test_cli_imports.py holds it so).
VERBS: dict[str, tuple[str, str]] = {
    "apply": ("apply:apply", "Apply patch set NAME (switching within its group) in one transaction."),
    "audit": (
        "audit:audit",
        "What differs in the target's site-packages, and why: patched, drift, environment, bytecode, probe.",
    ),
    "check": (
        "check:check",
        "Would patch set NAME apply? Per file: clean, at an offset, or the failing hunk.",
    ),
    "clear-caches": (
        "clear_caches:clear_caches",
        "Delete every cache kept for the target (or -t A -t B, -g, --all) and your user cache.",
    ),
    "diff": (
        "diff:diff",
        "What differs on TARGET (or -t TARGET) from its recorded state, and which patch set owns it; or TARGET against TARGET2, side by side (-g GROUP, --all: each target against its own record).",
    ),
    "disconnect": (
        "disconnect:disconnect",
        "End the held SSH connection of a target (or --all), before its `persist` seconds run out.",
    ),
    "env": (
        "env:env_cmd",
        "The target's environment: interpreter, system, GPU stack, distributions, native libraries.",
    ),
    "export": (
        "export:export",
        "Print patch set NAME as one patch that git apply and patch -p1 accept in site-packages.",
    ),
    "import": (
        "import_patch:import_cmd",
        "Make patch set NAME from a patch file, or restore one from `patchkeeper export`.",
    ),
    "init": (
        "init:init",
        "Start a workspace here (or in -w DIR): patchkeeper.toml, the shipped patch sets, snapshots/.",
    ),
    "list": ("list:list_cmd", "Patch sets, versions, and which package version each fits."),
    "log": (
        "log:log",
        "Every transaction on the target, newest first, with its origin (the CLI or an Ansible task).",
    ),
    "mcp": (
        "mcp:mcp_cmd",
        "Serve this workspace to an AI agent: an MCP server over stdin and stdout (docs/agents.md).",
    ),
    "port": (
        "port:port",
        "Carry patch set NAME to release VERSION of its package: a three-way merge per file and hunk; written as its next version when nothing conflicts (exit 0), else left to resolve (exit 1).",
    ),
    "record": (
        "record:record",
        "Write patch set NAME from a target's edits since a state, the hand edits found when it was adopted, or a git range.",
    ),
    "recover": (
        "recover:recover",
        "Finish or undo a transaction that was interrupted (any command does this first).",
    ),
    "repair": (
        "repair:repair",
        "Give the files of installed distribution DIST that differ from its RECORD their release bytes back.",
    ),
    "rollback": (
        "rollback:rollback",
        "Give every managed file the exact bytes and mode of STATE (on several targets: as apply does).",
    ),
    "show": ("show:show", "Patch set NAME: metadata, files, diffstat, and the targets it is applied on."),
    "show-backup": (
        "show_backup:show_backup",
        "Print the bytes of a backed-up file (a hand edit a change replaced), verified: DIGEST as rollback and log show it, or 8+ of its hex digits.",
    ),
    "snapshot": ("snapshot:snapshot", "Record the target's files as a named state."),
    "status": (
        "status:status",
        "The applied stack, and whether the files still match the recorded state (without -t, of the default target; with no default_target and several targets, of them all, as --all).",
    ),
    "verify": (
        "verify:verify_cmd",
        "Check the target's service: it answers, runs the unit's command and speculative algorithm, and generates enough, fast enough, not degenerate, the same greedy output as before.",
    ),
}


def commands() -> dict[str, click.Command]:
    """Every verb's command, each module loaded (for what looks at them all: tests, documentation)."""
    ctx = click.Context(main)
    return {name: cmd for name in sorted(VERBS) if (cmd := main.get_command(ctx, name)) is not None}


def summary(command: click.Command) -> str:
    """A verb's line in --help: its short_help, else its help's first sentence, whole (click's default
    cuts it with "..." at the terminal's width; the listing wraps it instead). VERBS holds it, so that
    --help loads no verb (tests/test_cli_imports.py checks the two agree)."""
    if command.short_help:
        return command.short_help
    text = " ".join((command.help or "").split("\n\n")[0].split())  # the first paragraph, one line
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _summary(verb: str, limit: int = 45) -> str:
    """A verb's line in the listing, shortened to `limit` as click shortens a command's own help."""
    return click.Command(verb, help=VERBS[verb][1]).get_short_help_str(limit)


@click.group(cls=Verbs, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--workspace",
    "-w",
    metavar="DIR",
    help="workspace directory (default: $PATCHKEEPER_WORKSPACE, else the current directory and its parents)",
)
@click.option(
    "--inventory",
    "-i",
    metavar="FILE",
    help="take targets and groups from this Ansible inventory (default: inventory = ... in patchkeeper.toml)",
)
@click.version_option(package_name="patchkeeper")
@click.pass_context
def main(ctx: click.Context, workspace: str | None, inventory: str | None) -> None:
    """Versioned patch sets over an installed Python package: apply atomically, roll back exactly."""
    ctx.obj = {"workspace": workspace, "inventory": os.path.abspath(inventory) if inventory else None}


if __name__ == "__main__":  # pragma: no cover
    main()
