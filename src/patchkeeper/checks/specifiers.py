"""systemd 252's %-specifiers in unit files (systemd.unit(5) "Specifiers", src/core/unit-printf.c): the ones a
unit's name resolves, the ones only the running system knows, and the ones systemd does not know (an error).
The table was taken from a live systemd 252 manager, one unit per letter (tests/test_units_live.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# resolved by the running system: architecture, boot and machine id, host name, user, directories, cgroups...
RUNNING_SYSTEM = frozenset("abcdghlmoqrstuvwyABCEGHLMRSTUVWY")
# resolved from the unit's name alone
FROM_NAME = frozenset("iIjJnNpPf%")
_SPECIFIER = re.compile(r"%(.?)", re.S)
_HEX_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


@dataclass(frozen=True)
class Resolved:
    """A string with its specifiers resolved; `unknown`: specifiers only the running system knows (the text
    keeps them as written); `bad`: specifiers systemd does not know, which it refuses."""

    text: str
    unknown: tuple[str, ...] = ()
    bad: tuple[str, ...] = ()


def _unescape(text: str) -> str:
    """unit_name_unescape: `-` is a `/`, \\xNN the character it names."""
    return _HEX_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text.replace("-", "/"))


def name_values(unit: str) -> dict[str, str]:
    """The specifiers a unit's name gives (its id: `prefix@instance.type`)."""
    stem = unit.rpartition(".")[0]
    prefix, at, instance = stem.partition("@")
    last = prefix.rpartition("-")[2] if "-" in prefix else prefix
    values = {
        "n": unit,
        "N": stem,
        "p": prefix,
        "P": _unescape(prefix),
        "i": instance,
        "I": _unescape(instance),
    }
    values.update({"j": last, "J": _unescape(last), "%": "%"})
    source = instance if at else prefix
    if "-" not in source and "\\" not in source:
        values["f"] = "/" + source
    return values


def resolve(text: str, unit: str) -> Resolved:
    """`text` with the specifiers resolved that the unit's name resolves (none when `unit` is empty)."""
    known = name_values(unit) if unit else {"%": "%"}
    unknown: list[str] = []
    bad: list[str] = []

    def one(m: re.Match[str]) -> str:
        c = m.group(1)
        if c in known:
            return known[c]
        if c in RUNNING_SYSTEM or c in FROM_NAME or not c:
            unknown.append(f"%{c}")
        else:
            bad.append(f"%{c}")
        return m.group(0)

    return Resolved(_SPECIFIER.sub(one, text), tuple(unknown), tuple(bad))
