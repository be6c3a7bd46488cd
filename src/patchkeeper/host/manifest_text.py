"""The manifest's text form, written and read here only: one sorted line per file,
`<mode octal> <size> <digest> <path>`, the path JSON-quoted only where it would be ambiguous,
so that git diffs of manifests read well. Standard library only: the agent reads manifests too."""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from typing import Any, Mapping, Optional, Sequence, Tuple

from .disk import INSTALL_RECORDS

_AMBIGUOUS = re.compile(r'^"|[\x00-\x1f\x7f\\]')
_CONTROL = re.compile(r'[\x00-\x1e\x7f\\]')  # over keys joined by \x1f: with a key that opens with a quote,
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
    lines = [f"{mode:o} {size} {digest} {k if plain else _quote(k)}\n" for k, (digest, size, mode) in rows.items()]
    return "".join(lines).encode("utf-8", "surrogateescape")


def parse(data: bytes) -> dict[str, tuple[str, int, int]]:
    """key -> (digest, size, mode) of every line of a manifest's text."""
    rows: dict[str, tuple[str, int, int]] = {}
    for line in data.decode("utf-8", "surrogateescape").split("\n"):
        if line:
            mode, size, digest, key = line.split(" ", 3)
            rows[json.loads(key) if key[0] == '"' else key] = (digest, int(size), int(mode, 8))
    return rows


# bytes that may make a text's lines other than bare and in the order of their keys (a quoted or escaped
# key, a key with control characters); and the install records' names (which Ledger.load_manifest leaves out)
_NOT_BARE = bytes(range(0x0a)) + bytes(range(0x0b, 0x20)) + b'\x7f\\"'
_RECORDS = tuple(".dist-info/" + name for name in INSTALL_RECORDS)
_UNSAFE_KEY = re.compile(r'[\x00-\x1f\x7f\\"]')
Row = Tuple[str, int, int]


def lines(text: bytes) -> Optional[list[bytes]]:
    """The lines of a manifest's text, for `lookup` and `splice`, when each is exactly as write_rows
    writes its row alone and they sort as their keys do: every key bare and ASCII (then bytes sort
    as the strings), no install record. Else None: only parse and write_rows will do. (A sglang
    manifest: about 1 ms; parsing it takes 15.)"""
    if (not text.endswith(b"\n") or not text.isascii() or len(text.translate(None, _NOT_BARE)) != len(text)
            or any(f"{name}\n".encode() in text for name in _RECORDS)):
        return None
    return text[:-1].split(b"\n")


def lookup(found: Sequence[bytes], keys: Sequence[str]) -> dict[str, Optional[Row]]:
    """The row of each key in a manifest's `lines` (None: absent), each found by bisection."""
    return {key: _row(found, _at(found, key), key) for key in keys}


def splice(found: Sequence[bytes], changes: Mapping[str, Optional[Row]]) -> Optional[bytes]:
    """The text write_rows would write for the manifest of `lines` with `changes` made (key -> its
    new row, None: removed), from those lines and the changed ones alone; None when a changed key
    would not be written bare (then write_rows must decide for every line)."""
    out = list(found)
    for key in sorted(changes, reverse=True):  # from the last: earlier positions stay where they are
        if not _bare(key):
            return None
        i = _at(out, key)
        row = changes[key]
        present = _row(out, i, key) is not None
        if row is None:
            if present:
                del out[i]
            continue
        digest, size, mode = row
        line = f"{mode:o} {size} {digest} {key}".encode("ascii")
        if present:
            out[i] = line
        else:
            out.insert(i, line)
    return b"\n".join(out) + b"\n" if out else b""


def _bare(key: str) -> bool:
    """Written bare by write_rows whatever the other keys are, and sorting as its bytes do."""
    return key.isascii() and not _UNSAFE_KEY.search(key) and not key.endswith(_RECORDS)


def _at(found: Sequence[bytes], key: str) -> int:
    """Where `key`'s line is, or would go, in sorted `lines`."""
    return bisect_left(found, key.encode(), key=lambda line: line.split(b" ", 3)[3])


def _row(found: Sequence[bytes], i: int, key: str) -> Optional[Row]:
    if i < len(found):
        mode, size, digest, at = found[i].split(b" ", 3)
        if at == key.encode():
            return digest.decode(), int(size), int(mode, 8)
    return None


def _quote(key: str) -> str:
    """Paths are written bare unless a quote, backslash or control character makes them ambiguous."""
    return json.dumps(key) if _AMBIGUOUS.search(key) else key
