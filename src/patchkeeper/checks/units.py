"""systemd units: the command line a unit's effective ExecStart= runs (the unit file, then its drop-ins in
name order, as systemd reads them), the speculative algorithm it asks sglang for, and `systemctl show`."""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..patchset import unitsyntax
from ..targets.base import Target
from . import unitfiles

WIDTH = 100  # the lines of a wrapped command

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # inside a word only ${VAR} is expanded
ALGORITHM_FLAG = "--speculative-algorithm"
_SHORTEST_ALGORITHM_PREFIX = len(
    "--speculative-al"
)  # argparse takes an unambiguous prefix: --speculative-algo


@dataclass(frozen=True)
class Command:
    """What ExecStart= runs: the argv the process sees, or why it cannot be known from the unit alone."""

    argv: tuple[str, ...]
    problem: str | None = None  # e.g. a %-specifier or a variable from an EnvironmentFile=
    source: str = ""  # the file whose ExecStart= is the one in effect
    files: tuple[str, ...] = ()  # every file read, in the order systemd applies them
    refused: str | None = None  # why systemd would refuse the unit (two ExecStart= in a Type=simple service)
    stored: tuple[str, ...] = ()  # the argv as systemd stores it, before $VAR expansion
    path: str = ""  # the executable
    prefixes: str = ""  # its -@:+! prefixes
    cleared: str = ""  # the file whose empty ExecStart= cleared the list before the one in effect
    env: tuple[tuple[str, str], ...] = ()  # Environment= in effect, in systemd's order
    masked: tuple[tuple[str, str], ...] = ()  # (a drop-in not read, the same-named one read instead)

    def text(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class ExecLine:
    """One command of an ExecStart= as systemd stores it: its prefixes, the executable, and the argv
    before variables are expanded (what `systemd-analyze verify` prints as "Command Line")."""

    prefixes: str
    path: str
    stored: tuple[str, ...]


def parse_exec(value: str, unit_name: str = "") -> tuple[list[ExecLine], str | None, list[str]]:
    """The commands of an ExecStart= value as config_parse_exec reads them (the `-@:+!` prefixes, a lone
    `;` between commands, `\\;` for a literal one, %-specifiers), why systemd refuses it (a fatal
    error: the unit does not load), and the %-specifiers it could not resolve."""
    out: list[ExecLine] = []
    unresolved: list[str] = []
    warnings: list[str] = []
    p = 0
    while True:
        try:
            first, p = unitsyntax.extract_word(value, p, warnings)
        except unitsyntax.BadWord:
            return out, f"unbalanced quoting in ExecStart={value}", unresolved
        if first is None:
            return out, None, unresolved
        if first == ";":
            continue
        prefixes, f = _prefixes(first)
        path = _specifiers(f, unit_name, unresolved)
        if not path:
            return out, f"empty path in command line: ExecStart={value}", unresolved
        if not path.startswith("/") and "/" in path:
            return out, f"neither a valid executable name nor an absolute path: {path}", unresolved
        argv: list[str] = [] if "@" in prefixes else [path]
        while p < len(value):
            rest = value[p:]
            if rest[0] == ";" and (len(rest) == 1 or rest[1] in unitsyntax.WHITESPACE):
                p += 1
                break
            if rest.startswith("\\;") and (len(rest) == 2 or rest[2] in unitsyntax.WHITESPACE):
                argv.append(";")
                p += 2
                while p < len(value) and value[p] in unitsyntax.WHITESPACE:
                    p += 1
                continue
            try:
                word, p = unitsyntax.extract_word(value, p, warnings)
            except unitsyntax.BadWord:
                return out, f"unbalanced quoting in ExecStart={value}", unresolved
            if word is None:
                break
            argv.append(_specifiers(word, unit_name, unresolved))
        if not argv:
            return out, f"empty executable name or zeroeth argument: ExecStart={value}", unresolved
        out.append(ExecLine(prefixes, path, tuple(argv)))


def _prefixes(word: str) -> tuple[str, str]:
    """The leading `-@:+!` (and `!!`) of a command's first word, each at most once, as systemd takes them."""
    taken = ""
    i = 0
    while i < len(word):
        c = word[i]
        if c in "-@:" and c not in taken:
            taken += c
        elif c == "+" and not any(x in taken for x in "+!"):
            taken += c
        elif c == "!" and not any(x in taken for x in "+!"):
            taken += c
        elif c == "!" and "+" not in taken and taken.count("!") == 1 and not taken.endswith("!!"):
            taken += c
        else:
            break
        i += 1
    return taken, word[i:]


_SPECIFIER = re.compile(r"%(.)", re.S)


def _specifiers(word: str, unit_name: str, unresolved: list[str]) -> str:
    """A word with the unit-name specifiers systemd resolves from the name alone (%n %N %p %i %%);
    any other one is noted as not known from the unit files."""
    name, _, _suffix = unit_name.rpartition(".")
    prefix, at, instance = name.partition("@")
    known = {"%": "%", "n": unit_name, "N": name, "p": prefix, "i": instance if at else ""}

    def one(m: re.Match[str]) -> str:
        if unit_name and m.group(1) in known or m.group(1) == "%":
            return known[m.group(1)]
        unresolved.append(f"{word!r} holds the %-specifier %{m.group(1)}")
        return m.group(0)

    return _SPECIFIER.sub(one, word)


def exec_start(text: str) -> Command | None:
    """The ExecStart= in effect in one unit file (None when there is none), split into argv."""
    return effective([("unit", text)])


def effective(files: Sequence[tuple[str, str]], unit_name: str = "") -> Command | None:
    """The ExecStart= in effect after reading `files` (name, text) in order, the unit file first and
    then its drop-ins in name order, as systemd does: each ExecStart= adds its commands, an empty one
    clears the list, Environment= lines add up (an empty one clears them). None when none is left."""
    starts: list[tuple[str, ExecLine]] = []
    cleared = ""
    env: dict[str, str] = {}
    oneshot = False
    fatal: list[str] = []
    unresolved: list[str] = []
    for name, text in files:
        parsed = unitsyntax.parse(text)
        if parsed.fatal:
            fatal.append(f"{name}: {parsed.fatal}")
        for setting in parsed.settings:
            if setting.section != "Service":
                continue
            key, value = setting.key, setting.value
            if key == "ExecStart":
                if not value:
                    starts, cleared = [], name
                    continue
                commands, bad, missing = parse_exec(value, unit_name)
                unresolved += missing
                if bad:
                    fatal.append(f"{name} line {setting.line}: {bad}")
                starts += [(name, c) for c in commands]
            elif key == "Environment":
                env = _environment(value, env, unit_name)
            elif key == "Type":
                oneshot = value == "oneshot"
    if not starts and not fatal:
        return None
    refused = "; ".join(f"systemd refuses the unit: {f}" for f in fatal) or None
    if len(starts) > 1 and not oneshot:
        refused = (
            f"{len(starts)} ExecStart= commands are in effect ({', '.join(n for n, _ in starts)}): systemd "
            "refuses more than one outside Type=oneshot; a drop-in must clear the list first with an "
            "empty ExecStart="
        )
    if not starts:
        return Command((), None, "", tuple(n for n, _ in files), refused, env=tuple(env.items()))
    source, line = starts[-1]
    argv, problem = _expand(line, env)
    if unresolved:
        problem = "; ".join([*unresolved, *([problem] if problem else [])])
    return Command(
        argv,
        problem,
        source,
        tuple(n for n, _ in files),
        refused,
        line.stored,
        line.path,
        line.prefixes,
        cleared,
        tuple(env.items()),
    )


def _environment(value: str, env: dict[str, str], unit_name: str) -> dict[str, str]:
    """Environment= on top of `env`: an empty value clears it; a line systemd cannot split is ignored
    whole; each NAME=value word with a valid name sets it (config_parse_environ)."""
    if not value:
        return {}
    try:
        assignments = unitsyntax.words(value, strict=True)
    except unitsyntax.BadWord:
        return env
    out = dict(env)
    for word in assignments:
        var, sep, val = _specifiers(word, unit_name, []).partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
            out[var] = val
    return out


def _expand(line: ExecLine, env: Mapping[str, str]) -> tuple[tuple[str, ...], str | None]:
    """The argv the process sees: $VAR alone split into words, ${VAR} inside a word, $$ a dollar (not
    with the `:` prefix); a variable no Environment= line sets is noted."""
    if ":" in line.prefixes:
        return line.stored, None
    argv: list[str] = []
    problems: list[str] = []
    for word in line.stored:
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if whole:  # $VAR alone is split into words at whitespace
            if whole.group(1) not in env:
                problems.append(f"${whole.group(1)} is not set by an Environment= line of the unit")
            argv.extend(env.get(whole.group(1), "").split())
            continue

        def expand(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in env:
                problems.append(f"${{{name}}} is not set by an Environment= line of the unit")
            return env.get(name, "")

        argv.append(_VAR.sub(expand, word).replace("$$", "$"))
    return tuple(argv), "; ".join(problems) or None


def speculative_algorithm(argv: Sequence[str]) -> str | None:
    """The algorithm the command line asks sglang for (--speculative-algorithm X, its prefix
    --speculative-algo, or =X); None when it asks for none. The last one given counts, as argparse's."""
    found = None
    for i, word in enumerate(argv):
        flag, eq, value = word.partition("=")
        if len(flag) < _SHORTEST_ALGORITHM_PREFIX or not ALGORITHM_FLAG.startswith(flag):
            continue
        if eq:
            found = value
        elif i + 1 < len(argv):
            found = argv[i + 1]
    return found


def parse_systemctl_show(text: str) -> tuple[str, ...] | None:
    """The argv of the last command in `systemctl show -p ExecStart --value` output
    (`{ path=… ; argv[]=… ; … }`): systemd joins it with spaces, so it comes back split at them."""
    found = re.findall(r"argv\[\]=(.*?) ; ", text)
    if not found:
        return None
    return tuple(found[-1].split())


# ---- on a target ----------------------------------------------------------------------------------
def on_target(target: Target, override: Mapping[str, bytes | None] | None = None) -> Command | str | None:
    """The target's effective ExecStart (with `override`'s planned bytes); a string says why it is not
    known; None when the target has no unit role."""
    if "unit" not in target.config.files:
        return None
    found = unitfiles.unit_files(target, override)
    if isinstance(found, str):
        return found
    files, masked = found
    command = effective(files, posixpath.basename(target.config.files["unit"]))
    if command is None:
        return f"no ExecStart= is in effect in {', '.join(path for path, _ in files)}"
    return replace(command, masked=tuple(masked))


def systemd_loaded(target: Target, timeout: float = 10.0) -> tuple[str, ...] | None:
    """The argv systemd has loaded for the target's unit (`systemctl show -p ExecStart --value`),
    None where systemctl does not answer (no systemd, another init, the unit unknown)."""
    unit = target.config.files.get("unit")
    if unit is None:
        return None
    try:
        code, out, _ = target.run(
            ["systemctl", "show", "-p", "ExecStart", "--value", posixpath.basename(unit)], timeout=timeout
        )
    except Exception:  # noqa: BLE001 - no systemctl, a timeout: no answer
        return None
    return parse_systemctl_show(out.decode("utf-8", "replace")) if code == 0 else None


def as_dict(command: Command | str | None) -> dict[str, Any] | None:
    """The effective ExecStart as JSON: its argv and where it comes from, or why it is not known."""
    if command is None:
        return None
    if isinstance(command, str):
        return {"known": False, "why": command}
    return {
        "known": True,
        "argv": list(command.argv),
        "text": command.text(),
        "source": command.source,
        "cleared_by": command.cleared or None,
        "files": list(command.files),
        "masked": [{"path": hidden, "by": by} for hidden, by in command.masked],
        "environment": dict(command.env),
        "problem": command.problem,
        "refused": command.refused,
    }


def wrapped(argv: Sequence[str], lead: str, width: int = WIDTH) -> list[str]:
    r"""A command after `lead` as lines of at most `width` characters (but for a longer word), the
    next ones indented 4, each but the last ending in ` \`: a shell reads them back as one command."""
    out: list[str] = []
    line = lead
    for word in (shlex.quote(w) for w in argv):
        if line.strip() and line != lead and len(line) + 1 + len(word) + 2 > width:
            out.append(f"{line} \\")
            line = "    " + word
        else:
            line = f"{line} {word}" if line not in (lead, "") else line + word
    return [*out, line]


def describe(command: Command | str | None, shown: frozenset[str] = frozenset()) -> list[str]:
    """Lines saying what runs: the effective ExecStart, where it comes from, and what systemd would say.
    `shown`: files whose text was just printed (a dry run's drop-in): their ExecStart is not repeated."""
    if command is None:
        return []
    if isinstance(command, str):
        return [f"ExecStart: not known ({command})"]
    if not command.source:
        return [f"ExecStart: none runs ({command.refused})"]
    if command.source in shown:
        lines = [f"ExecStart (effective, from {command.source}): as set there (shown above)"]
    else:  # wrapped as a unit file (and the dry run's preview of one) wraps it: a `\` ends each cut line
        lines = wrapped(command.argv, f"ExecStart (effective, from {command.source}): ")
    if command.cleared and command.cleared != command.source:
        lines.append(f"  the list cleared by the empty ExecStart= of {command.cleared}")
    if len(command.files) > 1:
        lines.append("  read: " + ", then ".join(command.files))
    for hidden, by in command.masked:
        lines.append(
            f"  not read: {hidden} (masked by {by}, of the same name in a directory systemd prefers)"
        )
    if command.problem:
        lines.append(f"  note: the command line depends on more than the unit files ({command.problem})")
    if command.refused:
        lines.append(f"  warning: {command.refused}")
    return lines
