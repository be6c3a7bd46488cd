"""Template variables' types, as a patch set's [vars] declares them: path, int in a range, word, free text."""

from __future__ import annotations

import re
from dataclasses import dataclass

KINDS = ("path", "int", "word", "text")
MAX_VALUE = 4096  # one value: a path, a port, a model name
_INT = re.compile(r"[+-]?[0-9]+\Z")


@dataclass(frozen=True)
class VarType:
    """What a variable may hold; every kind is one line of printable text (no newline, no control character)."""

    kind: str = "text"
    low: int | None = None  # int: the smallest value allowed
    high: int | None = None  # int: the largest

    def problem(self, value: str) -> str | None:
        """Why `value` does not fit (None when it does)."""
        if len(value) > MAX_VALUE:
            return f"is {len(value)} characters long (at most {MAX_VALUE})"
        if not value.isprintable():
            bad = next(c for c in value if not c.isprintable())
            return f"holds {bad!r}: a newline or control character would add lines to the file it is written into"
        if (len(value) - len(value.rstrip("\\"))) % 2 == 1:
            return (
                "ends in a backslash: written at the end of a line of a unit file, systemd would join the "
                "next line to it (a continuation)"
            )
        if self.kind == "path":
            return None if value.startswith("/") else "is not an absolute path (it must start with /)"
        if self.kind == "word":
            if not value or any(c.isspace() or c in "\"'\\" for c in value):
                return "is not one word (no spaces, quotes or backslashes; not empty)"
            return None
        if self.kind == "int":
            if not _INT.match(value):
                return "is not a whole number"
            number = int(value)
            if (self.low is not None and number < self.low) or (self.high is not None and number > self.high):
                return f"is outside {self.describe()}"
        return None

    def describe(self) -> str:
        if self.kind != "int" or (self.low is None and self.high is None):
            return self.kind
        return f"int {'' if self.low is None else self.low}..{'' if self.high is None else self.high}"


def declared(key: str, entry: object, where: str) -> tuple[VarType, object | None, list[str]]:
    """One [vars] entry: `name = default` (text, or int for a number) or
    `name = { type = "int", min = 1, max = 65535, default = 30000 }`; its type, default (None: none)
    and problems."""
    if isinstance(entry, bool) or not isinstance(entry, (str, int, dict)):
        return VarType(), None, [f"{where} {key} must be a string, a whole number or a table with type = ..."]
    if not isinstance(entry, dict):
        kind = VarType("int") if isinstance(entry, int) else VarType()
        return kind, entry, _default_problems(key, kind, entry, where)
    problems = [
        f"{where} {key} has unknown key {k!r} (known: type, min, max, default)"
        for k in entry
        if k not in ("type", "min", "max", "default")
    ]
    kind = entry.get("type", "text")
    if kind not in KINDS:
        return VarType(), None, problems + [f"{where} {key}: type {kind!r} is not one of {', '.join(KINDS)}"]
    low, high = entry.get("min"), entry.get("max")
    for bound, value in (("min", low), ("max", high)):
        if value is not None and (kind != "int" or isinstance(value, bool) or not isinstance(value, int)):
            problems.append(f"{where} {key}: {bound} is for type int and must be a whole number")
    vartype = VarType(kind, low if isinstance(low, int) else None, high if isinstance(high, int) else None)
    default = entry.get("default")
    if default is not None:
        problems += _default_problems(key, vartype, default, where)
    return vartype, default, problems


def _default_problems(key: str, vartype: VarType, default: object, where: str) -> list[str]:
    if isinstance(default, bool) or not isinstance(default, (str, int)):
        return [f"{where} {key}: the default must be a string or a whole number"]
    why = vartype.problem(str(default))
    return [f"{where} {key}: the default {str(default)[:60]!r} {why}"] if why else []
