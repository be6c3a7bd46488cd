"""The manifest's text form, written and read here only: one sorted line per file,
`<mode octal> <size> <digest> <path>`, the path JSON-quoted only where it would be ambiguous,
so that git diffs of manifests read well. A manifest is read from a state dir's store, which may be
damaged or a hostile host's: a line that is not one, a key that is not a file key (filekeys.py: a
path inside site-packages, or `@ROLE`), a mode that is not a recorded file's (permission bits only:
rollback sets it on the file it restores) or a size that is not a file's, is refused as it is
parsed, before any of it is used. Standard library only: the agent reads manifests too."""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Optional

from .filekeys import keys_problem

MODE_BITS = 0o777  # a recorded mode: permission bits only (no setuid, setgid or sticky bit, no file type)
MAX_SIZE = 2**63 - 1  # a file's size is an off_t
_MODES = frozenset(f"{m:o}" for m in range(MODE_BITS + 1))  # as write_rows writes them: octal, no leading 0
_MODE_RULE = "permission bits 0 to 777, no setuid, setgid or sticky bit, no file type"
_SIZE_RULE = "a decimal count of bytes below 2**63"

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
    when a line is not `MODE SIZE DIGEST KEY`, its mode or size is not as write_rows writes a recorded
    one (mode_problem, size_problem), or a key is not a file key (keys_problem)."""
    rows: dict[str, tuple[str, int, int]] = {}
    line = ""
    try:
        for line in data.decode("utf-8", "surrogateescape").split("\n"):
            if line:
                mode, size, digest, key = line.split(" ", 3)
                if mode not in _MODES:
                    raise _Refused(
                        "the line %s: mode %s is not a recorded file's (%s)"
                        % (_shown(line), _shown(mode), _MODE_RULE)
                    )
                if not (
                    size.isascii()
                    and size.isdigit()
                    and (size[0] != "0" or size == "0")
                    and len(size) <= 19
                    and int(size) <= MAX_SIZE
                ):
                    raise _Refused(
                        "the line %s: size %s is not a file's (%s)" % (_shown(line), _shown(size), _SIZE_RULE)
                    )
                rows[json.loads(key) if key[:1] == '"' else key] = (digest, int(size), int(mode, 8))
    except _Refused:
        raise
    except (ValueError, IndexError):
        raise ValueError("the line %s is not MODE SIZE DIGEST PATH" % _shown(line)) from None
    problem = keys_problem(rows)
    if problem:
        raise ValueError(problem)
    return rows


def mode_problem(mode: object) -> Optional[str]:
    """Why `mode` is not a recorded file's mode, or None: an int of permission bits only (MODE_BITS).
    What the recorder keeps of a file in site-packages (0o644, 0o755; 0o664 where a group shares it);
    a file with a setuid, setgid or sticky bit is not recorded (values_problem), so no state asks
    rollback to set one."""
    if type(mode) is not int or not 0 <= mode <= MODE_BITS:
        shown = "%o" % mode if type(mode) is int and mode >= 0 else repr(mode)
        return "mode %s is not a recorded file's (%s)" % (shown[:40], _MODE_RULE)
    return None


def size_problem(size: object) -> Optional[str]:
    """Why `size` is not a file's size, or None: an int from 0 to MAX_SIZE."""
    if type(size) is not int or not 0 <= size <= MAX_SIZE:
        return "size %s is not a file's (%s)" % (repr(size)[:40], _SIZE_RULE)
    return None


def values_problem(rows: Mapping[str, Any]) -> Optional[str]:
    """The first row (key -> (digest, size, mode)) whose mode or size is not a recorded file's, named,
    or None. One pass over the few distinct modes and the extreme sizes in the common case."""
    values = list(rows.values())
    try:
        modes, sizes = {r[2] for r in values}, [r[1] for r in values]
        plain = all(type(m) is int for m in modes) and all(type(n) is int for n in sizes)
        if plain and (
            not values
            or max(modes) <= MODE_BITS
            and min(modes) >= 0
            and 0 <= min(sizes)
            and max(sizes) <= MAX_SIZE
        ):
            return None
    except (TypeError, IndexError):
        pass
    for key, row in rows.items():
        try:
            problem = mode_problem(row[2]) or size_problem(row[1])
        except (TypeError, IndexError, KeyError):
            problem = "the row %s is not (digest, size, mode)" % _shown(repr(row))
        if problem:
            return "file %s: %s" % (_shown(key), problem)
    return None


class _Refused(ValueError):
    """A row of the right shape whose mode or size is refused (its own message, not the shape's)."""


def _quote(key: str) -> str:
    """Paths are written bare unless a quote, backslash or control character makes them ambiguous."""
    return json.dumps(key) if _AMBIGUOUS.search(key) else key


def _shown(line: str) -> str:
    text = repr(line)
    return text if len(text) <= 80 else text[:77] + "..."
