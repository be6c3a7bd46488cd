"""systemd units: the command line a unit's effective ExecStart= runs (the unit file, then its drop-ins in
name order, as systemd reads them), the speculative algorithm it asks sglang for, and `systemctl show`."""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..targets.base import Target

_PREFIXES = "-@:+!|"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # inside a word only ${VAR} is expanded
ALGORITHM_FLAG = "--speculative-algorithm"
_SHORTEST_ALGORITHM_PREFIX = len("--speculative-al")  # argparse takes an unambiguous prefix: --speculative-algo


@dataclass(frozen=True)
class Command:
    """What ExecStart= runs: the argv the process sees, or why it cannot be known from the unit alone."""

    argv: tuple[str, ...]
    problem: str | None = None  # e.g. a %-specifier or a variable from an EnvironmentFile=
    source: str = ""  # the file whose ExecStart= is the one in effect
    files: tuple[str, ...] = ()  # every file read, in the order systemd applies them
    refused: str | None = None  # why systemd would refuse the unit (two ExecStart= in a Type=simple service)

    def text(self) -> str:
        return shlex.join(self.argv)


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
    """The ExecStart= in effect in one unit file (None when there is none), split into argv."""
    return effective([("unit", text)])


def effective(files: Sequence[tuple[str, str]]) -> Command | None:
    """The ExecStart= in effect after reading `files` (name, text) in order, the unit file first and
    then its drop-ins in name order, as systemd does: each ExecStart= adds a command, an empty one
    clears the list, Environment= lines add up (an empty one clears them). None when none is left."""
    starts: list[tuple[str, str]] = []
    env: dict[str, str] = {}
    oneshot = False
    for name, text in files:
        for key, value in _service_settings(text):
            if key == "ExecStart":
                starts = starts + [(name, value)] if value else []
            elif key == "Environment":
                if not value:
                    env = {}
                    continue
                try:
                    words = shlex.split(value)
                except ValueError:
                    continue
                for word in words:
                    var, sep, val = word.partition("=")
                    if sep:
                        env[var] = val
            elif key == "Type":
                oneshot = value == "oneshot"
    if not starts:
        return None
    refused = None
    if len(starts) > 1 and not oneshot:
        refused = (f"{len(starts)} ExecStart= lines are in effect ({', '.join(n for n, _ in starts)}): systemd refuses "
                   "more than one outside Type=oneshot; a drop-in must clear the list first with an empty ExecStart=")
    source, value = starts[-1]
    argv, problem = _split(value, env)
    return Command(argv, problem, source, tuple(n for n, _ in files), refused)


def _split(value: str, env: Mapping[str, str]) -> tuple[tuple[str, ...], str | None]:
    prefix = len(value) - len(value.lstrip(_PREFIXES))
    flags, value = value[:prefix], value[prefix:]
    try:
        words = shlex.split(value)
    except ValueError as exc:
        return (), f"its ExecStart= cannot be split into words ({exc})"
    if "@" in flags and words:
        words = words[1:]  # '@': the second word is argv[0]
    if ";" in words:
        words = words[:words.index(";")]
    argv: list[str] = []
    problems: list[str] = []
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
def unit_files(target: Target, override: Mapping[str, bytes | None] | None = None) -> list[tuple[str, str]] | str:
    """The files systemd reads for the target's unit: the unit file, then the *.conf files of its
    drop-in directories (<unit>.d/, and the `dropin` role's directory) in name order; `override`
    gives some paths' planned bytes (None: absent). A string says why they cannot be read."""
    roles = target.config.files
    unit = roles.get("unit")
    if unit is None:
        return "the target has no unit role file"
    override = override or {}
    try:
        data = override[unit] if unit in override else target.agent.read(unit)
    except FileNotFoundError:
        data = None
    except Exception as exc:  # noqa: BLE001 - any failure to read is said, and the caller goes on
        return f"the unit file {unit} could not be read ({exc})"
    if data is None:
        return f"the unit file {unit} is absent (systemd has no such unit)"
    dirs = [unit + ".d"]
    dropin = roles.get("dropin")
    if dropin and posixpath.dirname(dropin) not in dirs and posixpath.dirname(dropin).endswith(".d"):
        dirs.append(posixpath.dirname(dropin))
    paths: dict[str, str] = {}  # name -> path: a name in a later directory hides the same name in an earlier
    for directory in dirs:
        try:
            names = target.agent.listdir(directory)
        except Exception:  # noqa: BLE001 - not a directory, unreadable: systemd reads nothing there either
            names = []
        paths.update({n: posixpath.join(directory, n) for n in names if n.endswith(".conf")})
    for path in override:
        if path != unit and posixpath.dirname(path) in dirs and path.endswith(".conf"):
            paths[posixpath.basename(path)] = path
    files = [(unit, data.decode("utf-8", "replace"))]
    for name in sorted(paths):
        path = paths[name]
        try:
            got = override[path] if path in override else target.agent.read(path)
        except FileNotFoundError:
            got = None  # gone since the listing
        except Exception as exc:  # noqa: BLE001
            return f"the drop-in {path} could not be read ({exc})"
        if got is not None:
            files.append((path, got.decode("utf-8", "replace")))
    return files


def on_target(target: Target, override: Mapping[str, bytes | None] | None = None) -> Command | str | None:
    """The target's effective ExecStart (with `override`'s planned bytes); a string says why it is not
    known; None when the target has no unit role."""
    if "unit" not in target.config.files:
        return None
    files = unit_files(target, override)
    if isinstance(files, str):
        return files
    command = effective(files)
    if command is None:
        return f"no ExecStart= is in effect in {', '.join(path for path, _ in files)}"
    return command


def systemd_loaded(target: Target, timeout: float = 10.0) -> tuple[str, ...] | None:
    """The argv systemd has loaded for the target's unit (`systemctl show -p ExecStart --value`),
    None where systemctl does not answer (no systemd, another init, the unit unknown)."""
    unit = target.config.files.get("unit")
    if unit is None:
        return None
    try:
        code, out, _ = target.run(["systemctl", "show", "-p", "ExecStart", "--value", posixpath.basename(unit)],
                                  timeout=timeout)
    except Exception:  # noqa: BLE001 - no systemctl, a timeout: no answer
        return None
    return parse_systemctl_show(out.decode("utf-8", "replace")) if code == 0 else None


def as_dict(command: Command | str | None) -> dict | None:
    """The effective ExecStart as JSON: its argv and where it comes from, or why it is not known."""
    if command is None:
        return None
    if isinstance(command, str):
        return {"known": False, "why": command}
    return {"known": True, "argv": list(command.argv), "text": command.text(), "source": command.source,
            "files": list(command.files), "problem": command.problem, "refused": command.refused}


def describe(command: Command | str | None) -> list[str]:
    """Lines saying what runs: the effective ExecStart, where it comes from, and what systemd would say."""
    if command is None:
        return []
    if isinstance(command, str):
        return [f"ExecStart: not known ({command})"]
    lines = [f"ExecStart (effective, from {command.source}): {command.text()}"]
    if len(command.files) > 1:
        lines.append("  read: " + ", then ".join(command.files))
    if command.problem:
        lines.append(f"  note: the command line depends on more than the unit files ({command.problem})")
    if command.refused:
        lines.append(f"  warning: {command.refused}")
    return lines
