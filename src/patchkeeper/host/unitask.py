"""Ask the target's systemd manager about a unit: `systemctl show`, and the main process's argv and
environment from /proc, in one run on the target (standard library only).

Run as `python -I -c <source>` with a JSON request on stdin:
    {"scope": "system" | "user", "unit": "NAME.service", "properties": [...], "timeout": seconds}
It prints one JSON document: whether systemd is the running init (/run/systemd/system, sd_booted()),
systemctl's exit code, stdout and stderr as it gave them (parsed by the controller: values are data),
and for the MainPID it named, /proc/PID/cmdline and /proc/PID/environ (or why they could not be read).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

BOOTED = "/run/systemd/system"  # what sd_booted() looks at: systemd is the running init
KEEP = 1 << 20  # bytes of systemctl's output kept: a unit's properties fit many times over
_UNIT = re.compile(r"[A-Za-z0-9:_.\\@-]+\.[a-z]+\Z")


def _read(path: str) -> tuple[bytes | None, str | None]:
    try:
        with open(path, "rb") as f:
            return f.read(KEEP), None
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"


def _split(data: bytes) -> list[str]:
    return [w.decode("utf-8", "surrogateescape") for w in data.split(b"\0")[:-1]] if data else []


def _pid(out: str) -> int:
    found = re.search(r"^MainPID=(\d+)$", out, re.M)
    return int(found.group(1)) if found else 0


def ask(request: dict[str, Any]) -> dict[str, Any]:
    unit, scope = str(request["unit"]), request.get("scope", "system")
    answer: dict[str, Any] = {"booted": os.path.isdir(BOOTED), "unit": unit, "scope": scope}
    if not _UNIT.match(unit) or scope not in ("system", "user"):
        answer["error"] = f"not a unit name or scope patchkeeper asks about: {unit!r} ({scope!r})"
        return answer
    if not answer["booted"]:
        return answer
    argv = ["systemctl", *(["--user"] if scope == "user" else []), "show", "--timestamp=us+utc"]
    argv += ["-p", ",".join(request["properties"]), "--", unit]
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            timeout=float(request.get("timeout", 10)),
            stdin=subprocess.DEVNULL,
            env={**os.environ, "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0", "LC_ALL": "C"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        answer["error"] = f"`{' '.join(argv)}` could not run: {exc}"
        return answer
    answer["code"] = proc.returncode
    answer["out"] = proc.stdout[:KEEP].decode("utf-8", "surrogateescape")
    answer["err"] = proc.stderr[-4096:].decode("utf-8", "replace")
    pid = _pid(answer["out"]) if proc.returncode == 0 else 0
    if pid > 0:
        cmdline, why = _read(f"/proc/{pid}/cmdline")
        answer["argv"] = _split(cmdline) if cmdline else None
        answer["argv_why"] = why or (None if cmdline else f"/proc/{pid}/cmdline is empty (a zombie?)")
        environ, why = _read(f"/proc/{pid}/environ")
        answer["environ"] = _split(environ) if environ is not None else None
        answer["environ_why"] = why
    return answer


if __name__ == "__main__":
    json.dump(ask(json.loads(sys.stdin.read())), sys.stdout, ensure_ascii=True)
