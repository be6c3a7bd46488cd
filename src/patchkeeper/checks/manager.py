"""What the target's systemd manager says runs: `systemctl show` of the unit parsed into a value, the main
process's argv and environment checked against it, and where it and the unit files' reading disagree."""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..host import unitask
from ..targets.base import Target
from . import units

PROPERTIES = (
    "LoadState",
    "LoadError",
    "FragmentPath",
    "DropInPaths",
    "ExecStart",
    "Environment",
    "EnvironmentFiles",
    "NeedDaemonReload",
    "MainPID",
    "ActiveState",
    "ExecMainStartTimestamp",
)
STALE = (
    "systemd has not reloaded the unit files since they changed (NeedDaemonReload=yes): the service runs "
    "the command line systemd loaded before, not the files'; `systemctl daemon-reload` and a restart "
    "make the files' command line run"
)
# one command of ExecStart= as `systemctl show` prints it (src/systemctl/systemctl-show.c): argv joined
# with spaces, so the tail is anchored to the fields after it, which an argument cannot end a line with
_EXEC = re.compile(
    r"^ExecStart=\{ path=(?P<path>.*?) ; argv\[\]=(?P<argv>.*?) ; ignore_errors=(?P<ignore>yes|no) ; "
    r"start_time=\[[^\]\n]*\] ; stop_time=\[[^\]\n]*\] ; pid=(?P<pid>\d+) ; code=\S+ ; status=\S+ \}$",
    re.M | re.S,
)
_KEY = re.compile(r"^([A-Za-z]+)=(.*)$")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b"}


@dataclass(frozen=True)
class ExecCommand:
    """One command of the unit's ExecStart= as the manager holds it: before $VAR expansion, its argv
    joined with spaces (systemctl prints it so: an argument with a space cannot be told from two)."""

    path: str
    argv_text: str
    ignore_errors: bool


@dataclass(frozen=True)
class ManagerView:
    """The unit as the running manager has it loaded, and its main process as /proc shows it."""

    scope: str  # system | user
    unit: str
    load_state: str
    load_error: str
    fragment: str
    dropins: tuple[str, ...]
    commands: tuple[ExecCommand, ...]
    environment: tuple[str, ...]  # Environment= NAME=value assignments, in order
    environment_files: tuple[tuple[str, bool], ...]  # (path, ignore errors)
    need_reload: bool
    main_pid: int
    active_state: str
    main_started: float | None  # ExecMainStartTimestamp, epoch seconds
    argv: tuple[str, ...] | None = None  # /proc/MAIN_PID/cmdline
    argv_why: str | None = None
    environ: tuple[str, ...] | None = None  # /proc/MAIN_PID/environ
    environ_why: str | None = None

    @property
    def command(self) -> ExecCommand | None:
        return self.commands[-1] if self.commands else None

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for word in self.environment:
            name, eq, value = word.partition("=")
            if eq:
                out[name] = value
        return out

    def expected_text(self) -> tuple[str, str | None]:
        """The main command's argv as the process gets it (joined with spaces): $VAR and ${VAR} expanded
        from Environment=, and why not where a variable may come from elsewhere (an EnvironmentFile=)."""
        command = self.command
        if command is None:
            return "", "the manager holds no ExecStart="
        env, missing = self.env(), []

        def one(m: re.Match[str]) -> str:
            if m.group(0) == "$$":
                return "$"
            name = m.group(1) or m.group(2)
            if name not in env:
                missing.append(name)
                return m.group(0)
            return " ".join(env[name].split()) if m.group(2) else env[name]

        text = re.sub(
            r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|(?<!\S)\$([A-Za-z_][A-Za-z0-9_]*)(?!\S)|\$\$",
            one,
            command.argv_text,
        )
        why = None
        if missing:
            why = f"${', $'.join(missing)} not set by the unit's Environment= (an EnvironmentFile=, the manager's)"
        return text, why

    def runs_loaded(self) -> tuple[bool | None, str]:
        """Does the main process run the command line the manager loaded? None: cannot be known."""
        if self.argv is None:
            return None, f"the main process's command line could not be read ({self.argv_why})"
        command = self.command
        if command is None:
            return None, "the manager holds no ExecStart="
        joined = " ".join(self.argv)
        expanded, why = self.expected_text()
        if joined in (expanded, command.argv_text):
            return True, f"pid {self.main_pid} runs the ExecStart= systemd loaded"
        if not why and self.environment_files and "$" in command.argv_text:
            why = f"an EnvironmentFile= ({', '.join(p for p, _ in self.environment_files)}) may set its $VARs"
        if why:
            return None, f"pid {self.main_pid}'s command line depends on more than the manager says ({why})"
        return False, (
            f"pid {self.main_pid} runs another command line than systemd loaded\n"
            f"running:  {joined}\nsystemd:  {expanded}"
        )

    def environment_loaded(self) -> tuple[bool | None, str]:
        """Is every Environment= assignment the manager holds in the main process's environment?"""
        if not self.environment:
            return True, "the unit sets no Environment="
        if self.environ is None:
            return None, f"the main process's environment could not be read ({self.environ_why})"
        have = set(self.environ)
        missing = [w for w in self.environment if "=" in w and w not in have]
        if not missing:
            return True, f"its environment has the unit's {len(self.environment)} Environment= assignment(s)"
        if self.environment_files:
            return None, (
                f"{', '.join(missing)} not in the process's environment; an EnvironmentFile= "
                f"({', '.join(p for p, _ in self.environment_files)}) may set another value"
            )
        return False, f"the main process's environment lacks {', '.join(missing)}, which systemd loaded"


def role_dropins(target: Target, reading: units.Command | str | None) -> list[tuple[str, bool]]:
    """The drop-ins patchkeeper writes for the target (role files `*.conf` in a `*.d` directory, other
    than one the reading finds masked by a same-named file) and whether each is on disk now."""
    masked = {hidden for hidden, _ in reading.masked} if isinstance(reading, units.Command) else set()
    out = []
    for role, path in sorted(target.config.files.items()):
        if role == "unit" or not path.endswith(".conf") or not posixpath.dirname(path).endswith(".d"):
            continue
        if path not in masked:
            out.append((path, target.agent.lstat(path) is not None))
    return out


def owed(view: ManagerView, dropins: Sequence[tuple[str, bool]] = ()) -> list[str]:
    """Why what systemd runs is not what the unit files say until a daemon-reload: NeedDaemonReload, and
    patchkeeper's drop-ins written or removed since systemd loaded the unit (NeedDaemonReload does not see
    a drop-in directory created since the manager's last load: its cache of the search path lacks it)."""
    out = [STALE] if view.need_reload else []
    if view.main_pid and view.runs_loaded()[0] is False:
        out.append(
            f"the main process, pid {view.main_pid}, runs another command line than systemd has loaded: it "
            "started before the last daemon-reload; a restart makes the loaded one run"
        )
    for path, present in dropins:
        if present and path not in view.dropins:
            out.append(
                f"systemd has not loaded {path} (not among the unit's DropInPaths): no daemon-reload since it "
                "was written; the service runs the command line systemd loaded before"
            )
        elif not present and path in view.dropins:
            out.append(
                f"systemd still has {path} loaded, which is gone: no daemon-reload since it was removed"
            )
    return out


def debts(target: Target, view: ManagerView | str | None, reading: units.Command | str | None) -> list[str]:
    """owed() for the target's own drop-ins; nothing where no manager answered."""
    return owed(view, role_dropins(target, reading)) if isinstance(view, ManagerView) else []


def parse_show(text: str, scope: str = "system", unit: str = "") -> ManagerView:
    """`systemctl show --timestamp=unix -p PROPERTIES UNIT` output as a value; nothing in it is a path
    patchkeeper opens."""
    commands = []
    for found in _EXEC.finditer(text):
        commands.append(ExecCommand(found.group("path"), found.group("argv"), found.group("ignore") == "yes"))
    rest = _EXEC.sub("", text)
    values: dict[str, str] = {}
    files: list[tuple[str, bool]] = []
    for line in rest.splitlines():
        m = _KEY.match(line)
        if not m:
            continue
        key, value = m.groups()
        if key == "EnvironmentFiles":
            path, _, flag = value.rpartition(" (ignore_errors=")
            if path:
                files.append((path, flag.startswith("yes")))
        elif key not in values:
            values[key] = value
    started = values.get("ExecMainStartTimestamp", "")
    return ManagerView(
        scope=scope,
        unit=unit,
        load_state=values.get("LoadState", ""),
        load_error=values.get("LoadError", ""),
        fragment=values.get("FragmentPath", ""),
        dropins=tuple(split_quoted(values.get("DropInPaths", ""))),
        commands=tuple(commands),
        environment=tuple(split_quoted(values.get("Environment", ""))),
        environment_files=tuple(files),
        need_reload=values.get("NeedDaemonReload") == "yes",
        main_pid=int(values["MainPID"]) if values.get("MainPID", "").isdigit() else 0,
        active_state=values.get("ActiveState", ""),
        main_started=_timestamp(started),
    )


def _timestamp(text: str) -> float | None:
    """A timestamp as `systemctl show --timestamp=us+utc` prints it (or `unix`: @SECONDS), in epoch seconds."""
    if re.fullmatch(r"@\d+(\.\d+)?", text):
        return float(text[1:])
    try:
        when = datetime.strptime(text, "%a %Y-%m-%d %H:%M:%S.%f UTC")
    except ValueError:
        return None
    return when.replace(tzinfo=UTC).timestamp()


def split_quoted(value: str) -> list[str]:
    """Words as systemctl prints a list (shell_maybe_quote: a word with a special character in "…",
    with \\-escapes for `"\\$` and C escapes; or $'…')."""
    out: list[str] = []
    i, n = 0, len(value)
    while i < n:
        while i < n and value[i] == " ":
            i += 1
        if i >= n:
            break
        word, quote = [], ""
        while i < n and (quote or value[i] != " "):
            c = value[i]
            if not quote and (c == '"' or value.startswith("$'", i)):
                quote = '"' if c == '"' else "'"
                i += 1 if c == '"' else 2
                continue
            if quote and c == quote:
                quote, i = "", i + 1
                continue
            if quote and c == "\\" and i + 1 < n:
                nxt = value[i + 1]
                if nxt == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", value[i + 2 : i + 4]):
                    word.append(chr(int(value[i + 2 : i + 4], 16)))
                    i += 4
                    continue
                if re.fullmatch(r"[0-7]{3}", value[i + 1 : i + 4]):
                    word.append(chr(int(value[i + 1 : i + 4], 8)))
                    i += 4
                    continue
                word.append(_ESCAPES.get(nxt, nxt))
                i += 2
                continue
            word.append(c)
            i += 1
        out.append("".join(word))
    return out


def scope_of(target: Target) -> str:
    return getattr(target.config, "systemd", "system")


def ask(target: Target, timeout: float | None = None) -> ManagerView | str | None:
    """The manager's view of the target's unit; a string says why there is none (no manager runs, it
    did not answer); None when the target has no unit role or `systemd = "off"`."""
    unit = target.config.files.get("unit")
    scope = scope_of(target)
    if unit is None or scope == "off":
        return None
    name = posixpath.basename(unit)
    seconds = timeout or target.config.timeout
    request = {
        "scope": scope,
        "unit": name,
        "properties": PROPERTIES,
        "timeout": seconds,
    }
    not_booted = f"systemd is not the running init on the target ({unitask.BOOTED} is absent)"
    try:  # the agent already runs: no interpreter is started where no manager can answer
        if target.agent.lstat(unitask.BOOTED) is None:
            return not_booted
    except Exception:  # noqa: BLE001 - the probe below looks again and says why
        pass
    source = Path(unitask.__file__).read_text(encoding="utf-8")
    try:
        code, out, err = target.run_python(source, timeout=seconds + 30, input=json.dumps(request).encode())
        answer = json.loads(out) if code == 0 else None
    except (OSError, ValueError) as exc:
        return f"the manager could not be asked ({exc})"
    if not isinstance(answer, dict):
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {code}"]
        return f"the manager could not be asked ({tail[0]})"
    if answer.get("error"):
        return str(answer["error"])
    if not answer.get("booted"):
        return not_booted
    which = "systemctl" + (" --user" if scope == "user" else "")
    if answer.get("code") != 0:
        said = (answer.get("err") or "").strip().splitlines()[-1:] or [f"exit code {answer.get('code')}"]
        return f"`{which} show {name}` did not answer: {said[0]}"
    view = parse_show(str(answer.get("out", "")), scope, name)
    if not view.load_state:
        return f"`{which} show {name}` gave no LoadState: not understood"
    argv, environ = answer.get("argv"), answer.get("environ")
    return ManagerView(
        **{
            **view.__dict__,
            "argv": tuple(str(a) for a in argv) if isinstance(argv, list) else None,
            "argv_why": answer.get("argv_why") or (None if view.main_pid else "no main process"),
            "environ": tuple(str(e) for e in environ) if isinstance(environ, list) else None,
            "environ_why": answer.get("environ_why") or (None if view.main_pid else "no main process"),
        }
    )


def as_command(view: ManagerView) -> units.Command | str:
    """What runs, from the manager, as the command checks take it: the main process's argv (/proc), else
    (no main process, or not readable) what systemd loaded, split at spaces as systemctl joins it."""
    if view.load_state != "loaded":
        return f"systemd has no such unit loaded ({view.load_state}: {view.load_error or 'no error given'})"
    command = view.command
    if command is None:
        return "systemd holds no ExecStart= for the unit"
    same, _ = view.runs_loaded()
    expanded, why = view.expected_text()
    argv = view.argv if view.argv is not None else tuple(expanded.split())
    source = f"systemd ({view.scope} manager)"
    files = tuple(p for p in (view.fragment, *view.dropins) if p)
    return units.Command(argv, why if not same else None, source, files, env=tuple(view.env().items()))


def disagreement(view: ManagerView, reading: units.Command | str | None) -> str | None:
    """Where the unit files' reading and the manager differ (the manager is taken), or None."""
    taken = as_command(view)
    if isinstance(taken, str):
        if isinstance(reading, units.Command) and reading.source:
            return f"the files' reading says {reading.text()}; systemd: {taken}"
        return None
    if reading is None:
        return None
    if isinstance(reading, str):
        return f"the files' reading did not know ({reading}); systemd says what runs"
    if not reading.source:
        return f"the files' reading says none runs ({reading.refused}); systemd runs {' '.join(taken.argv)}"
    if " ".join(reading.argv) != " ".join(taken.argv):
        return f"the files' reading says {reading.text()}; systemd runs {' '.join(taken.argv)}"
    read, loaded = [f for f in reading.files if f], [f for f in taken.files if f]
    if loaded and set(read) != set(loaded):
        return f"the files' reading read {', '.join(read)}; systemd loaded {', '.join(loaded)}"
    return None


def describe(
    view: ManagerView | str | None, reading: units.Command | str | None = None, debts: list[str] | None = None
) -> list[str]:
    """Lines saying what the manager runs, NeedDaemonReload in words (`debts`: owed(), else NeedDaemonReload
    alone), and a disagreement with the files."""
    if view is None:
        return []
    if isinstance(view, str):
        return [f"  (a reading of the files: no manager was asked; {view})"] if reading is not None else []
    which = "systemctl" + (" --user" if view.scope == "user" else "")
    taken = as_command(view)
    lines = [f"systemd ({which} show {view.unit}): {view.load_state}, {view.active_state or 'state unknown'}"]
    if isinstance(taken, str):
        lines.append(f"  {taken}")
    else:
        pid = f"main pid {view.main_pid}" if view.main_pid else "no main process"
        lines.append(f"  runs ({pid}): {' '.join(taken.argv)}")
        same, said = view.runs_loaded()
        if same is False:
            lines.append(f"  loaded (not running): {view.expected_text()[0]}")
        elif view.main_pid and same is None:
            lines.append(f"  note: {said.splitlines()[0]}")
        if view.dropins:
            lines.append("  loaded: " + ", then ".join([view.fragment, *view.dropins]))
    for debt in owed(view) if debts is None else debts:
        lines.append(f"  warning: {debt}")
    differs = disagreement(view, reading)
    if differs:
        lines.append(f"  the files' reading and systemd disagree; systemd's is taken: {differs}")
    return lines


def as_dict(
    view: ManagerView | str | None, reading: units.Command | str | None = None, debts: list[str] | None = None
) -> dict[str, Any] | None:
    """The manager's view as JSON (`{"asked": false, "why"}` where none answered)."""
    if view is None:
        return None
    if isinstance(view, str):
        return {"asked": False, "why": view}
    taken = as_command(view)
    same, said = view.runs_loaded()
    return {
        "asked": True,
        "scope": view.scope,
        "unit": view.unit,
        "load_state": view.load_state,
        "load_error": view.load_error or None,
        "active_state": view.active_state,
        "fragment": view.fragment or None,
        "dropins": list(view.dropins),
        "exec_start": [
            {"path": c.path, "argv": c.argv_text, "ignore_errors": c.ignore_errors} for c in view.commands
        ],
        "environment": list(view.environment),
        "environment_files": [{"path": p, "ignore_errors": i} for p, i in view.environment_files],
        "need_daemon_reload": view.need_reload,
        "owed": owed(view) if debts is None else debts,  # why a daemon-reload is owed, in words
        "main_pid": view.main_pid or None,
        "main_started": view.main_started,
        "main_argv": list(view.argv) if view.argv is not None else None,
        "runs_loaded": same,
        "runs_loaded_detail": said,
        "runs": None if isinstance(taken, str) else list(taken.argv),
        "disagreement": disagreement(view, reading),
    }
