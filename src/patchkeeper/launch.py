"""The entry point: `audit`, `apply` and `rollback` in their plain forms run without loading click, and
audit's answer is given again without running while nothing it read has changed (replay.py);
everything else goes to cli.py.

click costs about as much as the whole of a warm audit's own work, so its commonest forms
(`patchkeeper [-w DIR] audit [-q] [-v] [--json] [-t NAME | --all]`, and `apply NAME` / `rollback --to STATE`
with -t, -n, --force, --no-verify: _PLAIN lists them) are recognised here, token by token.
Anything else (another verb, --help, --probe, an unknown or combined option, shell
completion) is left to click, which parses it as it always has; the verb itself and its exit codes
are the same code either way (commands/audit.py, verb.py).
"""

from __future__ import annotations

import os
import sys

# the plain forms this module parses itself: flags, options with a value, the positional argument,
# what is required
_PLAIN: dict[str, tuple[dict[str, str], dict[str, str], str | None, tuple[str, ...]]] = {
    "audit": ({"-q": "quiet", "--quiet": "quiet", "-v": "verbose", "--verbose": "verbose", "--json": "as_json",
               "--all": "every"}, {"-t": "target", "--target": "target"}, None, ()),
    "apply": ({"-n": "dry_run", "--dry-run": "dry_run", "--force": "force", "--no-verify": "no_verify"},
              {"-t": "target", "--target": "target"}, "name", ("name",)),
    "rollback": ({"-n": "dry_run", "--dry-run": "dry_run", "--no-verify": "no_verify"},
                 {"-t": "target", "--target": "target", "--to": "to"}, None, ("to",)),
}


def plain(argv: list[str]) -> tuple[str, str | None, dict[str, object]] | None:
    """(verb, workspace, its options) when `argv` is `[-w DIR] VERB ...` in one of _PLAIN's forms: the
    options in any order, each at most once; else None (click's to parse, and to explain)."""
    workspace: str | None = None
    i = 0
    if argv[:1] in (["-w"], ["--workspace"]) and len(argv) > 2 and not argv[1].startswith("-"):
        workspace, i = argv[1], 2
    verb = argv[i] if i < len(argv) else None
    if verb not in _PLAIN:
        return None
    flags, valued, positional, required = _PLAIN[verb]
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
    if any(options[r] is None for r in required) or (options.get("every") and options.get("target") is not None):
        return None  # a required one missing, or audit's -t with --all: click's to explain
    return verb, workspace, options


def main() -> None:
    import gc

    # No collection while a command runs: its objects (stat caches, manifests: hundreds of thousands of
    # tuples, none in a cycle) would only be gone over again and again, about 35 ms of a rollback of
    # sglang; the exit gives the memory back whole. A check that waits on a service turns them back on
    # (verify.run_checks), and a holder is a process of its own.
    gc.disable()
    argv = sys.argv[1:]
    found = None if any(k.endswith("_COMPLETE") for k in os.environ) else plain(argv)
    sealed: tuple | None = None
    ran_before = False
    if found is not None and found[0] == "audit" and not found[2]["every"]:  # --all forks its local
        from . import replay  # targets' audits: each keeps its own report

        try:
            sealed = replay.key(argv)
        except OSError:  # no working directory (removed under us): the audit says what it can
            pass
        else:
            ran_before = replay.answer(sealed)  # the kept answer, when nothing it read has changed: exits here
    from .classcache import install, on_first_use

    on_first_use("urllib.parse", ("quote_from_bytes",))  # pathlib's, only for Path.as_uri (its import, with its
    on_first_use("ipaddress")  # named tuples, is about 4 ms of every command); ipaddress, urllib.parse's: a URL's host
    install()  # before any of our value classes is built
    try:
        if found is None:
            from .cli import main as cli_main

            cli_main()  # (click ends with SystemExit, as run_verb does)
            return
        from .verb import run_verb

        verb, workspace_dir, options = found
        if verb == "audit":
            run_verb(_audit, workspace_dir, options, sealed, ran_before)
        run_verb(_change, verb, workspace_dir, options)  # exits
    except SystemExit as end:  # the command is done and its output out: no teardown after it
        if end.code is None or isinstance(end.code, int):  # (a message to print: sys.exit's way)
            from .verb import leave

            leave(end.code or 0)
        raise


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
