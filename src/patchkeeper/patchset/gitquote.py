"""git's path quoting (quote_c_style) and its line split, apart from the patch values and their
application (patching.py), for the modules that write or read diffs' text only (diffwrite, githeader)."""

from __future__ import annotations

import re

from ..errors import BadInput

_OCTAL = re.compile(r"[0-3][0-7]{2}")  # ASCII digits only: str.isdigit takes "٠" too
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def split_lines(text: str) -> list[str]:
    """Split on newline only, keeping endings (str.splitlines also splits on \\f and \\r)."""
    lines = text.split("\n")
    out = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def quote(name: str, always: bool = False) -> str:
    """A path as git writes it (quote_c_style): in double quotes with C escapes and octal bytes when
    it holds a quote, a backslash, a control or a non-ASCII character (or `always`), else bare."""
    raw = name.encode("utf-8", "surrogateescape")
    if not always and not any(b < 0x20 or b >= 0x7F or b in (0x22, 0x5C) for b in raw):
        return name
    escapes = {v: k for k, v in _C_ESCAPES.items()}
    out = []
    for b in raw:
        if b in escapes:
            out.append("\\" + escapes[b])
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\{b:03o}")
        else:
            out.append(chr(b))
    return '"' + "".join(out) + '"'


def unquote(name: str) -> str:
    """A path as git writes it: bare, or in double quotes with C escapes (\\", \\\\, \\t, \\n, octal
    bytes) when it holds a quote, a backslash, a control or non-ASCII character. As git's
    unquote_c_style: an escape is one of the C letters or three octal digits 000-377; any other
    (\\089, \\400, a Unicode digit, a backslash at the end) is refused (BadInput)."""
    if not (len(name) >= 2 and name[0] == name[-1] == '"'):
        return name
    out = bytearray()
    body, i = name[1:-1], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode("utf-8", "surrogateescape")
            i += 1
        elif body[i + 1 : i + 2] in _C_ESCAPES:
            out.append(_C_ESCAPES[body[i + 1]])
            i += 2
        elif _OCTAL.fullmatch(body[i + 1 : i + 4]):
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            raise BadInput(
                f"bad escape {body[i : i + 4]!r} in the quoted path {name[:80]!r}",
                "git escapes a byte as \\ and three octal digits (000-377): write the diff again with git diff",
            )
    return out.decode("utf-8", "surrogateescape")
