"""What `systemctl daemon-reload && systemctl restart UNIT` does, for tests: stop the unit's process,
read the unit file anew, and start its ExecStart detached, its output appended to a journal file.

    python fake_systemd.py restart --unit FILE --pidfile P --journal J --port N [--setenv K=V ...]

The unit is read the way systemd reads it (continuation lines, the last ExecStart=, a leading
-@:+! prefix, quoting, Environment=), independently of patchkeeper's own reader. Each start writes
`-- restart at EPOCH` into the journal first. Stdlib only.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time


def read_unit(path: str) -> tuple[list[str], dict[str, str]]:
    text = open(path, encoding="utf-8").read().replace("\\\n", " ")
    argv, env = None, {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("ExecStart="):
            argv = shlex.split(line.partition("=")[2].lstrip("-@:+!"))
        elif line.startswith("Environment="):
            env.update(w.split("=", 1) for w in shlex.split(line.partition("=")[2]))
    if not argv:
        sys.exit(f"{path}: no ExecStart=")
    return argv, env


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


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("action", choices=("restart", "stop"))
    p.add_argument("--unit", required=True)
    p.add_argument("--pidfile", required=True)
    p.add_argument("--journal", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--setenv", action="append", default=[])
    args = p.parse_args()
    stop(args.pidfile, args.port)
    if args.action == "stop":
        return 0
    argv, env = read_unit(args.unit)
    env = {**os.environ, **env, **dict(kv.split("=", 1) for kv in args.setenv)}
    with open(args.journal, "a") as journal:
        journal.write(f"-- restart at {int(time.time())}\n")
        journal.flush()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=journal, stderr=journal, env=env,
                                start_new_session=True)
    with open(args.pidfile, "w") as f:
        f.write(str(proc.pid))
    return 0


if __name__ == "__main__":
    sys.exit(main())
