"""The entry point: `audit` in its plain forms runs without loading click, and its answer is given
again without running while nothing it read has changed (replay.py); everything else goes to cli.py.

click costs about as much as the whole of a warm audit's own work, so its commonest forms
(`patchkeeper [-w DIR] audit [-q] [-v] [--json] [-t NAME]`) are recognised here, token by token.
Anything else (another verb, --help, --all, --probe, an unknown or combined option, shell
completion) is left to click, which parses it as it always has; the verb itself and its exit codes
are the same code either way (commands/audit.py, verb.py).
"""

from __future__ import annotations

import os
import sys

_FLAGS = {"-q": "quiet", "--quiet": "quiet", "-v": "verbose", "--verbose": "verbose", "--json": "as_json"}


def plain_audit(argv: list[str]) -> tuple[str | None, dict[str, object]] | None:
    """(workspace, audit's options) when `argv` is a plain audit this module runs itself, else None."""
    workspace: str | None = None
    i = 0
    if argv[:1] in (["-w"], ["--workspace"]) and len(argv) > 2 and not argv[1].startswith("-"):
        workspace, i = argv[1], 2
    if argv[i:i + 1] != ["audit"]:
        return None
    options: dict[str, object] = {"target": None, "quiet": False, "verbose": False, "as_json": False}
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
    return workspace, options


def main() -> None:
    argv = sys.argv[1:]
    plain = None if any(k.endswith("_COMPLETE") for k in os.environ) else plain_audit(argv)
    if plain is None:
        from .cli import main as cli_main

        cli_main()
        return
    from . import replay

    sealed: tuple | None = None
    ran_before = False
    try:
        sealed = replay.key(argv)
    except OSError:  # no working directory (removed under us): the audit says what it can
        pass
    else:
        ran_before = replay.answer(sealed)  # the kept answer, when nothing it read has changed: exits here
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
        code = audit(ws, options["target"], [], False, options["as_json"], options["verbose"], options["quiet"])
    if sealed is not None:
        if rec is not None:
            rec.keep_output(sealed, code)  # or not, and why not: only time is lost
        else:
            replay.mark(sealed)
    return code


if __name__ == "__main__":  # pragma: no cover
    main()
