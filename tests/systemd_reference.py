"""systemd's own reading of a unit, for tests to compare with: `systemd-analyze verify --root=DIR` at debug
level loads the unit in a test manager (no running systemd needed) and dumps it: the fragment, the drop-ins
in the order applied, Environment= and each ExecStart= command line as systemd stores them."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ANALYZE = shutil.which("systemd-analyze")


@dataclass(frozen=True)
class Loaded:
    """What systemd loaded for a unit, or `failed`: why it refused it."""

    fragment: str
    dropins: tuple[str, ...]
    env: dict[str, str]
    commands: tuple[tuple[str, ...], ...]  # each ExecStart= command's argv, before $VAR expansion
    failed: str | None
    log: str


def why_not() -> str | None:
    """Why systemd's parser cannot run here (None when it can)."""
    if ANALYZE is None:
        return "systemd-analyze is not installed (Debian's systemd package: `make test-needs` installs it)"
    probe = subprocess.run([ANALYZE, "--version"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"systemd-analyze does not run here: {probe.stderr.strip()[:200]}"
    return None


def loaded(root: Path, unit: str) -> Loaded:
    """systemd's reading of `unit` under `root` (its default unit search path below root)."""
    assert ANALYZE is not None
    proc = subprocess.run(
        [ANALYZE, "verify", f"--root={root}", "--", unit],
        capture_output=True,
        text=True,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "debug", "SYSTEMD_LOG_TARGET": "console"},
    )
    log = proc.stdout + proc.stderr
    fragment, dropins, env, commands = "", [], {}, []
    section, in_unit = "", False
    for line in log.splitlines():
        body = line.strip()
        if line.startswith("\t-> Unit "):
            in_unit = body == f"-> Unit {unit}:"
            continue
        if not in_unit or not line.startswith("\t\t"):
            continue
        if body.startswith("-> "):
            section = body[3:].rstrip(":")
        elif body.startswith("Fragment Path: "):
            fragment = body.removeprefix("Fragment Path: ")
        elif body.startswith("DropIn Path: "):
            dropins.append(body.removeprefix("DropIn Path: "))
        elif line.startswith("\t\tEnvironment: "):
            var, _, value = line.removeprefix("\t\tEnvironment: ").partition("=")
            env[var] = value
        elif body.startswith("Command Line: ") and section == "ExecStart":
            commands.append(command_line(line.split("Command Line: ", 1)[1]))
    failed = next(
        (
            ln.strip()
            for ln in log.splitlines()
            if f"{unit}: Failed to load configuration" in ln or "Refusing." in ln
        ),
        None,
    )
    return Loaded(fragment, tuple(dropins), env, tuple(commands), failed, log)


_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "'": "'"}


def command_line(text: str) -> tuple[str, ...]:
    """The argv in a dump's "Command Line:" (systemd's quote_command_line: a word with special characters
    in double quotes, \\ before " \\ ` $, C escapes for control characters, "" for an empty word)."""
    words: list[str] = []
    raw = bytearray()
    i, quoted, started = 0, False, False
    while i < len(text):
        c = text[i]
        if c == '"':
            quoted, started = not quoted, True
        elif c == "\\" and quoted:
            nxt = text[i + 1]
            if nxt in '"\\`$':
                raw += nxt.encode()
            elif nxt in _C_ESCAPES:
                raw += _C_ESCAPES[nxt].encode()
            elif nxt in "01234567":
                raw.append(int(text[i + 1 : i + 4], 8))
                i += 2
            else:
                raise ValueError(f"unexpected escape \\{nxt} in {text!r}")
            i += 1
        elif c == " " and not quoted:
            if started:
                words.append(raw.decode("utf-8", "surrogateescape"))
            raw, started = bytearray(), False
        else:
            raw += c.encode("utf-8", "surrogateescape")
            started = True
        i += 1
    if started:
        words.append(raw.decode("utf-8", "surrogateescape"))
    return tuple(words)


def write_tree(root: Path, files: dict[str, bytes | str]) -> None:
    """Files below `root` (paths relative to it); a value of b"->/dev/null" makes a symlink there."""
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if data == b"->/dev/null":
            path.symlink_to("/dev/null")
        else:
            path.write_bytes(data.encode() if isinstance(data, str) else data)
