"""Recorded text made safe to print: a terminal never sees a control character from recorded data.

A ledger entry's `who` and `command`, a state's name, a file's key and a host's error message come
from files and hosts that anyone able to write them controls: a newline there would forge a line of
`log`, an escape sequence would drive the terminal. What is printed of them goes through `one_line`
(every control character escaped, as repr does) or, for a message of several lines, `lines`. A byte of
a file name that is not UTF-8 (held as a surrogate escape, as os.fsdecode gives it) is printed as that
byte's escape too: two names differing in such a byte print apart, not both as a replacement mark.
"""

from __future__ import annotations

import json
import re
from typing import Any

CONTROL = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u2028\u2029]"
)  # what a terminal obeys: escaped here, refused in names.py
_ESCAPED = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\udc80-\udcff]")  # CONTROL, and bytes not UTF-8
_ESCAPED_BUT_NEWLINE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\udc80-\udcff]")


def _escape(match: re.Match[str]) -> str:
    c = match.group(0)
    if "\udc80" <= c <= "\udcff":  # a byte that is not UTF-8, as surrogateescape holds it: that byte
        return f"\\x{ord(c) - 0xDC00:02x}"
    return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(c) or (
        f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
    )


def one_line(text: object) -> str:
    """`text` with every control character (newline and tab too) and every byte that is not UTF-8
    written as its escape."""
    s = str(text)
    return _ESCAPED.sub(_escape, s) if _ESCAPED.search(s) else s


def lines(text: object) -> str:
    """`text` with every control character but the newline, and every byte that is not UTF-8, written
    as its escape."""
    s = str(text)
    return _ESCAPED_BUT_NEWLINE.sub(_escape, s) if _ESCAPED_BUT_NEWLINE.search(s) else s


def emit_json(doc: Any) -> None:
    """Print one JSON document (`--json`), keys sorted, on stdout."""
    print(json.dumps(doc, indent=2, sort_keys=True))
