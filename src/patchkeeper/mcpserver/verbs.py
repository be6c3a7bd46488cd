"""Run a verb of the CLI in this process, as `patchkeeper -w ROOT VERB ... --json` would run: its
one JSON document, its exit code, and each line it writes on stderr (progress, warnings) handed on
as it comes. One verb at a time: stdout and stderr are the process's own."""

from __future__ import annotations

import io
import json
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any

import click

from ..errors import PatchkeeperError, error_document
from ..records.ledger import ORIGIN

_ONE_AT_A_TIME = threading.Lock()  # sys.stdout, sys.stderr and the ORIGIN of a call are the process's


@dataclass(frozen=True)
class Outcome:
    """What a verb gave: its exit code and its JSON document (an error document when it ended in one)."""

    code: int
    doc: Any
    change: bool = (
        False  # a change carried out: any exit but 0 is a failure (rolled back, fails verification)
    )

    @property
    def text(self) -> str:
        return json.dumps(self.doc, indent=2, sort_keys=True)

    @property
    def failed(self) -> bool:
        """An error or a refusal (exit 2 and up), not a finding (exit 1: differences, a failed check);
        for a change carried out, any exit but 0."""
        if self.change and self.code != 0:
            return True
        return self.code >= 2 or (isinstance(self.doc, dict) and bool(self.doc.get("error")))


class _Captured(io.StringIO):
    """stdout of the verb: its document. `wrote` as pipes.ReaderGone has it (options.json_error reads it)."""

    @property
    def wrote(self) -> bool:
        return bool(self.getvalue())


class _Lines(io.TextIOBase):
    """stderr of the verb: each line to `on_line`, and to the server's own stderr (the client's log)."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self._on_line = on_line
        self._part = ""
        self.lines: list[str] = []

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if sys.__stderr__:
            sys.__stderr__.write(text)
        self._part += text.replace("\r", "\n")
        *done, self._part = self._part.split("\n")
        for line in done:
            if line.strip():
                self.lines.append(line)
                self._on_line(line)
        return len(text)

    def flush(self) -> None:
        if sys.__stderr__:
            sys.__stderr__.flush()

    def isatty(self) -> bool:
        return False


def error_doc(message: str, hint: str, code: int = 2) -> Any:
    """The CLI's error document (docs/json.md, "An error"): the one shape every verb's --json has."""
    return error_document(message, hint, code)


@contextmanager
def origin(client: str | None) -> Iterator[None]:
    """The ledger entries written meanwhile say they came from this server and its client."""
    token = ORIGIN.set({"via": "mcp", **({"client": client[:100]} if client else {})})
    try:
        yield
    finally:
        ORIGIN.reset(token)


def run(
    group: click.Group,
    base: list[str],
    words: list[str],
    on_line: Callable[[str], None] = lambda line: None,
    client: str | None = None,
) -> Outcome:
    """`patchkeeper BASE WORDS` in this process: BASE the server's own --workspace and --inventory,
    WORDS a verb holding --json."""
    out, err = _Captured(), _Lines(on_line)
    with _ONE_AT_A_TIME, redirect_stdout(out), redirect_stderr(err), origin(client):
        try:
            group.main(args=[*base, *words], prog_name="patchkeeper", standalone_mode=False)
            code = 0
        except SystemExit as exc:  # options.run_verb ends every verb with its exit code
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        except click.ClickException as exc:  # a usage error: the words are built from checked values
            return Outcome(exc.exit_code, error_doc(exc.format_message(), "see the tool's input schema"))
        except PatchkeeperError as exc:
            return Outcome(exc.exit_code, error_doc(exc.message, exc.hint, exc.exit_code))
    text = out.getvalue()
    try:
        doc = json.loads(text)
    except ValueError:
        last = err.lines[-1] if err.lines else "no output"
        return Outcome(
            max(code, 2),
            error_doc(
                f"`{' '.join(words[:2])}` gave no JSON document (exit {code}): {last}",
                "report it: every verb the server runs prints one document",
            ),
        )
    return Outcome(code, doc)
