"""The manifest's text form, written and read here only: one sorted line per file,
`<mode octal> <size> <digest> <path>`, the path JSON-quoted only where it would be ambiguous,
so that git diffs of manifests read well. A manifest is read from a state dir's store, which may be
damaged or a hostile host's: a line that is not one, or a key that is not a file key (filekeys.py: a
path inside site-packages, or `@ROLE`), is refused as it is parsed, before any of it is used.
Standard library only: the agent reads manifests too."""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from .filekeys import keys_problem

_AMBIGUOUS = re.compile(r'^"|[\x00-\x1f\x7f\\]')
_CONTROL = re.compile(r"[\x00-\x1e\x7f\\]")  # over keys joined by \x1f: with a key that opens with a quote,
# what makes some key ambiguous (_AMBIGUOUS); a single class scans a sglang manifest's keys in 4 ms, where
# one pattern with the quote's alternation took 20


def write(entries: Mapping[str, Any]) -> bytes:
    """The text of a manifest whose `entries` (key -> a value with digest, size and mode) are in
    sorted key order."""
    return write_rows({k: (e.digest, e.size, e.mode) for k, e in entries.items()})


def write_rows(rows: Mapping[str, Any]) -> bytes:
    """As `write`, from rows (key -> (digest, size, mode)) in sorted key order."""
    joined = "\x1f".join(rows)  # one scan for the common case
    plain = not (joined.startswith('"') or '\x1f"' in joined or _CONTROL.search(joined))
    lines = [
        f"{mode:o} {size} {digest} {k if plain else _quote(k)}\n" for k, (digest, size, mode) in rows.items()
    ]
    return "".join(lines).encode("utf-8", "surrogateescape")


def parse(data: bytes) -> dict[str, tuple[str, int, int]]:
    """key -> (digest, size, mode) of every line of a manifest's text; ValueError saying what is wrong
    when a line is not `MODE SIZE DIGEST KEY` or a key is not a file key (keys_problem)."""
    rows: dict[str, tuple[str, int, int]] = {}
    line = ""
    try:
        for line in data.decode("utf-8", "surrogateescape").split("\n"):
            if line:
                mode, size, digest, key = line.split(" ", 3)
                rows[json.loads(key) if key[:1] == '"' else key] = (digest, int(size), int(mode, 8))
    except (ValueError, IndexError):
        raise ValueError("the line %s is not MODE SIZE DIGEST PATH" % _shown(line)) from None
    problem = keys_problem(rows)
    if problem:
        raise ValueError(problem)
    return rows


def _quote(key: str) -> str:
    """Paths are written bare unless a quote, backslash or control character makes them ambiguous."""
    return json.dumps(key) if _AMBIGUOUS.search(key) else key


def _shown(line: str) -> str:
    text = repr(line)
    return text if len(text) <= 80 else text[:77] + "..."
