"""The entry point: `audit`, `apply` and `rollback` in their plain forms run without loading click, and
audit's answer is given again without running while nothing it read has changed (replay.py);
everything else goes to cli.py.

click costs about as much as the whole of a warm audit's own work, so its commonest forms
(`patchkeeper [-w DIR] audit [-q] [-v] [--json] [-t NAME | --all]`, and `apply NAME` / `rollback --to STATE`
with -t, -n, --force, --no-verify as plain_change lists them) are recognised here, token by token.
Anything else (another verb, --help, --probe, an unknown or combined option, shell
completion) is left to click, which parses it as it always has; the verb itself and its exit codes
are the same code either way (commands/audit.py, verb.py).
"""

from __future__ import annotations

import os
import sys

_FLAGS = {"-q": "quiet", "--quiet": "quiet", "-v": "verbose", "--verbose": "verbose", "--json": "as_json",
          "--all": "every"}


def plain_audit(argv: list[str]) -> tuple[str | None, dict[str, object]] | None:
    """(workspace, audit's options) when `argv` is a plain audit this module runs itself, else None."""
    workspace: str | None = None
    i = 0
    if argv[:1] in (["-w"], ["--workspace"]) and len(argv) > 2 and not argv[1].startswith("-"):
        workspace, i = argv[1], 2
    if argv[i:i + 1] != ["audit"]:
        return None
    options: dict[str, object] = {"target": None, "quiet": False, "verbose": False, "as_json": False,
                                  "every": False}
    rest = argv[i + 1:]
    j = 0
    while j < len(rest):
        token = rest[j]
        if token in _FLAGS and not options[_FLAGS[token]]:
            options[_FLAGS[token]] = True
        elif token in ("-t", "--target") and options["target"] is None and j + 1 < len(rest) \
                and rest[j + 1] and not rest[j + 1].startswith("-"):
            options["target"] = rest[j + 1]
            j += 1
        else:
            return None  # click's to parse (and to explain)
        j += 1
    if options["every"] and options["target"] is not None:
        return None  # both: click's to explain
    return workspace, options


# the plain forms of the change verbs: flags, options with a value, the positional argument, what is required
_CHANGES: dict[str, tuple[dict[str, str], dict[str, str], str | None, tuple[str, ...]]] = {
    "apply": ({"-n": "dry_run", "--dry-run": "dry_run", "--force": "force", "--no-verify": "no_verify"},
              {"-t": "target", "--target": "target"}, "name", ("name",)),
    "rollback": ({"-n": "dry_run", "--dry-run": "dry_run", "--no-verify": "no_verify"},
                 {"-t": "target", "--target": "target", "--to": "to"}, None, ("to",)),
}


def plain_change(argv: list[str]) -> tuple[str, str | None, dict[str, object]] | None:
    """(verb, workspace, its options) when `argv` is `[-w DIR] apply NAME [-t T] [-n] [--force]
    [--no-verify]` or `[-w DIR] rollback --to STATE [-t T] [-n] [--no-verify]`, in any order, each
    option at most once; else None (click's to parse, and to explain)."""
    workspace: str | None = None
    i = 0
    if argv[:1] in (["-w"], ["--workspace"]) and len(argv) > 2 and not argv[1].startswith("-"):
        workspace, i = argv[1], 2
    verb = argv[i] if i < len(argv) else None
    if verb not in _CHANGES:
        return None
    flags, valued, positional, required = _CHANGES[verb]
    options: dict[str, object] = {**{f: False for f in flags.values()}, **{v: None for v in valued.values()}}
    if positional:
        options[positional] = None
    rest = argv[i + 1:]
    j = 0
    while j < len(rest):
        token = rest[j]
        if token in flags and not options[flags[token]]:
            options[flags[token]] = True
        elif token in valued and options[valued[token]] is None and j + 1 < len(rest) \
                and rest[j + 1] and not rest[j + 1].startswith("-"):
            options[valued[token]] = rest[j + 1]
            j += 1
        elif positional and options[positional] is None and token and not token.startswith("-"):
            options[positional] = token
        else:
            return None
        j += 1
    if any(options[r] is None for r in required):
        return None
    return verb, workspace, options


def main() -> None:
    argv = sys.argv[1:]
    completing = any(k.endswith("_COMPLETE") for k in os.environ)
    plain = None if completing else plain_audit(argv)
    if plain is None:
        from .classcache import install

        install()  # before any of our value classes is built
        change = None if completing else plain_change(argv)
        if change is None:
            from .cli import main as cli_main

            cli_main()
            return
        from .verb import run_verb

        verb, workspace_dir, options = change
        run_verb(_change, verb, workspace_dir, options)  # exits
    from . import replay

    sealed: tuple | None = None
    ran_before = False
    try:
        if not plain[1]["every"]:  # --all forks its local targets' audits: each keeps its own report
            sealed = replay.key(argv)
    except OSError:  # no working directory (removed under us): the audit says what it can
        pass
    else:
        if sealed is not None:
            ran_before = replay.answer(sealed)  # the kept answer, when nothing it read has changed: exits here
    from .classcache import install

    install()
    from .verb import run_verb

    run_verb(_audit, *plain, sealed, ran_before)


def _audit(workspace_dir: str | None, options: dict, sealed: tuple | None, record: bool) -> int:
    """Audit; with `record`, record the run and keep its answer for `sealed` (see replay.py), else
    only note that this command ran here (its next run is recorded)."""
    from contextlib import nullcontext

    from . import replay

    with replay.Recording() if sealed is not None and record else nullcontext() as rec:
        from . import workspace
        from .commands.audit import audit

        ws = workspace.load(workspace.find(workspace_dir))
        code = audit(ws, options["target"], [], bool(options["every"]), options["as_json"], options["verbose"],
                     options["quiet"])
    if sealed is not None:
        if rec is not None:
            rec.keep_output(sealed, code)  # or not, and why not: only time is lost
        else:
            replay.mark(sealed)
    return code


def _change(verb: str, workspace_dir: str | None, options: dict) -> int:
    """The same verb functions, with the same arguments, as cli.py's apply and rollback."""
    from . import workspace

    ws = workspace.load(workspace.find(workspace_dir))
    if verb == "apply":
        from .commands.apply import apply

        return apply(ws, options["target"], options["name"], options["dry_run"], options["force"],
                     verify=not options["no_verify"], adopt=None)
    from .commands.rollback import rollback

    return rollback(ws, options["target"], options["to"], options["dry_run"], verify=not options["no_verify"])


if __name__ == "__main__":  # pragma: no cover
    main()
