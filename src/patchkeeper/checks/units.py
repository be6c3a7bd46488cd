"""systemd unit files: the command line the last ExecStart= of a unit runs, read as systemd reads it."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

_PREFIXES = "-@:+!|"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # inside a word only ${VAR} is expanded


@dataclass(frozen=True)
class Command:
    """What ExecStart= runs: the argv the process sees, or why it cannot be known from the unit alone."""

    argv: tuple[str, ...]
    problem: str | None = None  # e.g. a %-specifier or a variable from an EnvironmentFile=


def logical_lines(text: str) -> list[str]:
    """The unit's lines with systemd's continuations joined (a trailing backslash becomes a space;
    comment lines inside a continuation are skipped)."""
    out: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if pending is not None and line.startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            pending = (pending + " " if pending is not None else "") + line[:-1].rstrip()
            continue
        out.append(line if pending is None else pending + " " + line)
        pending = None
    if pending is not None:
        out.append(pending)
    return out


def _service_settings(text: str) -> list[tuple[str, str]]:
    section, out = "", []
    for line in logical_lines(text):
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif section == "Service" and "=" in line:
            key, _, value = line.partition("=")
            out.append((key.strip(), value.strip()))
    return out


def exec_start(text: str) -> Command | None:
    """The last ExecStart= of the [Service] section (None when there is none), split into argv."""
    settings = _service_settings(text)
    starts: list[str] = []
    for key, value in settings:
        if key == "ExecStart":
            starts = starts + [value] if value else []  # an empty ExecStart= resets the list
    if not starts:
        return None
    value = starts[-1]
    env: dict[str, str] = {}
    for key, assignments in settings:
        if key == "Environment":
            for word in shlex.split(assignments):
                name, sep, val = word.partition("=")
                if sep:
                    env[name] = val
    prefix = len(value) - len(value.lstrip(_PREFIXES))
    flags, value = value[:prefix], value[prefix:]
    try:
        words = shlex.split(value)
    except ValueError as exc:
        return Command((), f"its ExecStart= cannot be split into words ({exc})")
    if "@" in flags and words:
        words = words[1:]  # '@': the second word is argv[0]
    if ";" in words:
        words = words[:words.index(";")]
    argv, problems = [], []
    for word in words:
        if re.search(r"%[^%]", word.replace("%%", "")):
            problems.append(f"{word!r} holds a %-specifier")
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if whole:  # $VAR alone is split into words at whitespace
            if whole.group(1) not in env:
                problems.append(f"${whole.group(1)} is not set by an Environment= line of the unit")
            argv.extend(env.get(whole.group(1), "").split())
            continue

        def expand(m: re.Match) -> str:
            name = m.group(1)
            if name not in env:
                problems.append(f"${{{name}}} is not set by an Environment= line of the unit")
            return env.get(name, "")

        argv.append(_VAR.sub(expand, word).replace("$$", "$").replace("%%", "%"))
    return Command(tuple(argv), "; ".join(problems) or None)
