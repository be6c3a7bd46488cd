"""The manifest's text form, written and read here only: one sorted line per file,
`<mode octal> <size> <digest> <path>`, the path JSON-quoted only where it would be ambiguous,
so that git diffs of manifests read well. Standard library only: the agent reads manifests too."""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

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
    """key -> (digest, size, mode) of every line of a manifest's text."""
    rows: dict[str, tuple[str, int, int]] = {}
    for line in data.decode("utf-8", "surrogateescape").split("\n"):
        if line:
            mode, size, digest, key = line.split(" ", 3)
            rows[json.loads(key) if key[0] == '"' else key] = (digest, int(size), int(mode, 8))
    return rows


def _quote(key: str) -> str:
    """Paths are written bare unless a quote, backslash or control character makes them ambiguous."""
    return json.dumps(key) if _AMBIGUOUS.search(key) else key
