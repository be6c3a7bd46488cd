"""What systemd does with a unit, for tests: `daemon-reload` reads the unit file and its drop-ins anew,
`restart` stops the unit's process and starts the ExecStart in effect detached, its output appended to
a journal file. It does not answer `systemctl show`: the tests' workspaces ask no manager (`systemd =
"off"`, tests/conftest.py make_workspace); tests/livesystemd.py runs a real one where a test asks.

    python fake_systemd.py restart --unit FILE --pidfile P --journal J --port N [--setenv K=V ...] [--loaded S]
    python fake_systemd.py daemon-reload --unit FILE --loaded S
    python fake_systemd.py stop --unit FILE --pidfile P --journal J --port N

The unit is read the way systemd reads it (continuation lines, the unit file then <unit>.d/*.conf in
name order, an empty ExecStart= clearing the list, more than one left refused outside Type=oneshot, a
leading -@:+! prefix, quoting, Environment=, WorkingDirectory= where it exists), independently of patchkeeper's own reader. Without
--loaded a restart reads the files itself (a daemon-reload first); with it, it starts what the last
daemon-reload loaded into S, and says on stderr, as systemctl does, when the files changed since.
Each start writes `-- restart at EPOCH` into the journal first. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time


def files_of(unit: str) -> list[str]:
    dropins = unit + ".d"
    names = sorted(n for n in os.listdir(dropins) if n.endswith(".conf")) if os.path.isdir(dropins) else []
    return [unit] + [os.path.join(dropins, n) for n in names]


def read_unit(unit: str) -> dict:
    """The unit as systemd loads it: the ExecStart= in effect, Environment=, and the files' bytes."""
    starts: list[list[str]] = []
    env: dict[str, str] = {}
    oneshot = False
    workdir = None
    texts = {}
    for path in files_of(unit):
        texts[path] = open(path, encoding="utf-8").read()
        section = ""
        for line in texts[path].replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
            elif section != "Service" or line.startswith(("#", ";")):
                continue
            elif line.startswith("ExecStart="):
                value = line.partition("=")[2].strip()
                starts = starts + [shlex.split(value.lstrip("-@:+!"))] if value else []
            elif line.startswith("Environment="):
                env.update(w.split("=", 1) for w in shlex.split(line.partition("=")[2]))
            elif line.startswith("Type="):
                oneshot = line.partition("=")[2].strip() == "oneshot"
            elif line.startswith("WorkingDirectory="):
                workdir = line.partition("=")[2].strip()
    if not starts:
        sys.exit(f"{unit}: no ExecStart=")
    if len(starts) > 1 and not oneshot:
        sys.exit(
            f"{unit}: Service has more than one ExecStart= setting, which is only allowed for Type=oneshot "
            "services. Refusing."
        )
    return {"argv": starts[-1], "env": env, "texts": texts, "workdir": workdir}


def stop(pidfile: str, port: int) -> None:
    try:
        pid = int(open(pidfile).read())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    for _ in range(250):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.02)
    for _ in range(250):  # the port is free again once the old socket is gone
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return
        time.sleep(0.02)


def loaded(args: argparse.Namespace) -> dict:
    """What the last daemon-reload loaded (the first use loads it, as booting does)."""
    if not os.path.exists(args.loaded):
        reload(args)
    return json.load(open(args.loaded))


def reload(args: argparse.Namespace) -> None:
    with open(args.loaded + ".tmp", "w") as f:
        json.dump(read_unit(args.unit), f)
    os.replace(args.loaded + ".tmp", args.loaded)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("action", choices=("restart", "stop", "daemon-reload"))
    p.add_argument("--unit", required=True)
    p.add_argument("--pidfile")
    p.add_argument("--journal")
    p.add_argument("--port", type=int)
    p.add_argument("--setenv", action="append", default=[])
    p.add_argument("--loaded")
    p.add_argument("name", nargs="?")
    args = p.parse_intermixed_args()
    if args.action == "daemon-reload":
        reload(args)
        return 0
    stop(args.pidfile, args.port)
    if args.action == "stop":
        return 0
    unit = loaded(args) if args.loaded else read_unit(args.unit)
    name = os.path.basename(args.unit)
    if args.loaded and unit["texts"] != {
        path: open(path, encoding="utf-8").read() for path in files_of(args.unit)
    }:
        print(
            f"Warning: The unit file, source configuration file or drop-ins of {name} changed on disk. "
            "Run 'systemctl daemon-reload' to reload units.",
            file=sys.stderr,
        )
    env = {**os.environ, **unit["env"], **dict(kv.split("=", 1) for kv in args.setenv)}
    with open(args.journal, "a") as journal:
        journal.write(f"-- restart at {int(time.time())}\n")
        journal.flush()
        workdir = unit.get("workdir")
        proc = subprocess.Popen(
            unit["argv"],
            stdin=subprocess.DEVNULL,
            stdout=journal,
            stderr=journal,
            env=env,
            start_new_session=True,
            cwd=workdir if workdir and os.path.isdir(workdir) else None,
        )
    with open(args.pidfile, "w") as f:
        f.write(str(proc.pid))
    return 0


if __name__ == "__main__":
    sys.exit(main())
