"""systemd units: the command line a unit's effective ExecStart= runs (the unit file, then its drop-ins in
name order, as systemd reads them) and the speculative algorithm it asks sglang for: a reading (manager.py asks)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..patchset import unitsyntax
from ..targets.base import Target
from . import specifiers, unitfiles

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
    notes: tuple[str, ...] = ()  # what systemd skips in the files read (the rest of a broken drop-in)
    env_problem: str | None = None  # why `env` is not the whole environment the unit sets
    unit: str = ""  # the unit's id (an alias's target)

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
    `;` between commands, `\\;` for a literal one, %-specifiers), why systemd stops reading the file at this
    line (a fatal error: in the unit file the unit does not load, in a drop-in the rest of it is not read),
    and the %-specifiers only the running system resolves. A line systemd ignores (unbalanced quoting; with
    the `-` prefix, a bad path or specifier too) gives no command and no error."""
    out: list[ExecLine] = []
    unresolved: list[str] = []
    warnings: list[str] = []
    p = 0
    while True:
        try:
            first, p = unitsyntax.extract_word(value, p, warnings)
        except unitsyntax.BadWord:
            return [], None, []  # "Unbalanced quoting, ignoring": the whole line
        if first is None:
            return out, None, unresolved
        if first == ";":
            continue
        prefixes, f = _prefixes(first)
        ignore = "-" in prefixes
        got = specifiers.resolve(f, unit_name)
        path = got.text
        why = None
        if got.bad:
            why = f"unknown specifier {', '.join(got.bad)} in ExecStart={value}"
        elif not path:
            why = f"empty path in command line: ExecStart={value}"
        elif not path.startswith("/") and "/" in path:
            why = f"neither a valid executable name nor an absolute path: {path}"
        if why:
            return ([], None, []) if ignore else (out, why, unresolved)
        unresolved += got.unknown
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
                return [], None, []  # ignored whole, as above
            if word is None:
                break
            got = specifiers.resolve(word, unit_name)
            if got.bad:
                why = f"unknown specifier {', '.join(got.bad)} in ExecStart={value}"
                return ([], None, []) if ignore else (out, why, unresolved)
            unresolved += got.unknown
            argv.append(got.text)
        if not argv:
            why = f"empty executable name or zeroeth argument: ExecStart={value}"
            return ([], None, []) if ignore else (out, why, unresolved)
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


def exec_start(text: str) -> Command | None:
    """The ExecStart= in effect in one unit file (None when there is none), split into argv."""
    return effective([("unit", text)])


def effective(files: Sequence[tuple[str, str]], unit_name: str = "") -> Command | None:
    """The ExecStart= in effect after reading `files` (name, text) in order, the unit file first and
    then its drop-ins in name order, as systemd does: each ExecStart= adds its commands, an empty one
    clears the list, Environment= lines add up (an empty one clears them). A fatal error in the unit file
    refuses the unit; in a drop-in, it ends that drop-in (what came before it stays). None when no
    ExecStart= was ever given."""
    starts: list[tuple[str, ExecLine]] = []
    cleared = ""
    env: dict[str, str] = {}
    unsure: dict[str, str] = {}  # variables whose value the unit files do not say, and why
    oneshot = False
    fatal: list[str] = []
    unresolved: list[str] = []
    notes: list[str] = []
    env_from: list[str] = []  # EnvironmentFile=, PassEnvironment=, UnsetEnvironment=: the files do not say
    given = False
    for index, (name, text) in enumerate(files):
        parsed = unitsyntax.parse(text)
        stop = parsed.fatal
        for setting in parsed.settings:
            if setting.section != "Service":
                continue
            key, value = setting.key, setting.value
            if key == "ExecStart":
                given = True
                if not value:
                    starts, cleared = [], name
                    continue
                commands, bad, missing = parse_exec(value, unit_name)
                unresolved += missing
                if bad:
                    stop = f"line {setting.line}: {bad}"
                    break
                starts += [(name, c) for c in commands]
            elif key == "Environment":
                env = _environment(value, env, unit_name, unsure)
            elif key in ("EnvironmentFile", "PassEnvironment", "UnsetEnvironment") and value:
                env_from.append(f"{key}={value} ({name})")
            elif key == "Type":
                oneshot = value == "oneshot"
        if stop and index == 0:
            fatal.append(f"{name}: {stop}")
        elif stop:
            notes.append(f"{name}: {stop}: systemd stops reading this drop-in there")
    if not given and not fatal:
        return None
    refused = "; ".join(f"systemd refuses the unit: {f}" for f in fatal) or None
    if not refused and len(starts) > 1 and not oneshot:
        refused = (
            f"{len(starts)} ExecStart= commands are in effect ({', '.join(n for n, _ in starts)}): systemd "
            "refuses more than one outside Type=oneshot; a drop-in must clear the list first with an "
            "empty ExecStart="
        )
    if not refused and not starts and not oneshot:
        refused = "no ExecStart= is in effect: systemd refuses a service without one"
    env_problem = "; ".join(
        [f"{e} is applied when the service starts, not read by patchkeeper" for e in env_from]
        + [f"{var}: {why}" for var, why in unsure.items()]
    )
    if not starts:
        return Command(
            (),
            None,
            "",
            tuple(n for n, _ in files),
            refused,
            env=tuple(env.items()),
            notes=tuple(notes),
            env_problem=env_problem or None,
        )
    source, line = starts[-1]
    argv, problem = _expand(line, env, unsure, bool(env_from))
    if unresolved:
        problem = "; ".join(
            [
                *(f"{u} is resolved by the running system" for u in dict.fromkeys(unresolved)),
                *([problem] if problem else []),
            ]
        )
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
        notes=tuple(notes),
        env_problem=env_problem or None,
    )


def _environment(value: str, env: dict[str, str], unit_name: str, unsure: dict[str, str]) -> dict[str, str]:
    """Environment= on top of `env` (config_parse_environ): an empty value clears it; each NAME=value word
    with a valid name sets it, one systemd cannot split ends the line (the words before it stay), one with
    an unknown specifier is skipped; a running system's specifier makes the value unknown (`unsure`)."""
    if not value:
        unsure.clear()
        return {}
    out = dict(env)
    i = 0
    while True:
        try:
            word, i = unitsyntax.next_word_strict(value, i)
        except unitsyntax.BadWord:
            return out
        if word is None:
            return out
        got = specifiers.resolve(word, unit_name)
        if got.bad:
            continue
        var, sep, val = got.text.partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
            out[var] = val
            if got.unknown:
                unsure[var] = f"its value holds {', '.join(got.unknown)}, resolved by the running system"
            else:
                unsure.pop(var, None)


def _expand(
    line: ExecLine, env: Mapping[str, str], unsure: Mapping[str, str], env_from: bool
) -> tuple[tuple[str, ...], str | None]:
    """The argv the process sees: $VAR alone split into words, ${VAR} inside a word, $$ a dollar (not
    with the `:` prefix); a variable the unit's Environment= lines do not settle is noted."""
    if ":" in line.prefixes:
        return line.stored, None
    argv: list[str] = []
    problems: list[str] = []

    def note(name: str, shown: str) -> None:
        if env_from:
            problems.append(
                f"{shown} may come from an EnvironmentFile=/PassEnvironment=/UnsetEnvironment= line"
            )
        elif name not in env:
            problems.append(
                f"{shown} is not set by an Environment= line of the unit (the manager's environment may)"
            )
        elif name in unsure:
            problems.append(f"{shown}: {unsure[name]}")

    for word in line.stored:
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if whole:  # $VAR alone is split into words at whitespace
            note(whole.group(1), f"${whole.group(1)}")
            argv.extend(env.get(whole.group(1), "").split())
            continue

        def expand(m: re.Match[str]) -> str:
            note(m.group(1), f"${{{m.group(1)}}}")
            return env.get(m.group(1), "")

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


# ---- on a target ----------------------------------------------------------------------------------
def on_target(target: Target, override: Mapping[str, bytes | None] | None = None) -> Command | str | None:
    """The target's effective ExecStart (with `override`'s planned bytes); a string says why it is not
    known; None when the target has no unit role."""
    if "unit" not in target.config.files:
        return None
    found = unitfiles.unit_files(target, override)
    if isinstance(found, str):
        return found
    files = tuple(path for path, _ in found.files)
    if found.unknown:
        return found.unknown
    if found.refused:
        return Command((), None, "", files, found.refused, unit=found.unit)
    command = effective(found.files, found.unit)
    if command is None:
        return f"no ExecStart= is in effect in {', '.join(files)}"
    return replace(command, masked=tuple(found.masked), notes=command.notes + found.notes, unit=found.unit)


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
        "environment_known": command.env_problem is None,
        "environment_problem": command.env_problem,
        "path": command.path,
        "prefixes": command.prefixes,
        "unit": command.unit or None,
        "notes": list(command.notes),
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
    for note in command.notes:
        lines.append(f"  note: {note}")
    if command.problem:
        lines.append(f"  note: the command line depends on more than the unit files ({command.problem})")
    if command.env_problem:
        lines.append(f"  note: the environment depends on more than the unit files ({command.env_problem})")
    if command.refused:
        lines.append(f"  warning: {command.refused}")
    return lines
