"""The warm audit on the serving environment against the stat floor: `find -printf` of the same
site-packages (one lstat per entry, in C), measured in turns in the same run; pip check beside it.

Runnable alone: `python bench/run.py warm-audit`."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from common import (
    RACY,
    SERVE,
    SITE_REL,
    copy_venv,
    cpu_note,
    interleaved,
    load_note,
    pk,
    row,
    run,
    timed,
    workspace,
)

PAIRS = 5
GOAL = 2.0  # a warm audit looks at every file: at most twice the cost of looking, in C, at each once


def warm_audit(ws: Path, venv: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    audit = pk(ws, "audit", "-q")
    for _ in range(3):  # a target at rest: every cache an audit writes (stat caches, seals, kept answers)
        time.sleep(RACY)  # past the racily-clean window of the last one's writes
        run(audit, env, ok=(0, 1))
    check = [str(venv / "bin" / "python"), "-m", "pip", "check"]
    # The physical floor of a warm audit that looks at every file: one lstat per entry of the site dir
    # (a file edited in place moves only its own mtime and ctime), by find(1) in C.
    stat_walk = ["find", str(venv / SITE_REL), "-printf", "%s %T@ %C@ %i\n"]
    started = os.getloadavg()[0]
    ours, walk, peer = interleaved(
        [
            lambda: timed(audit, env, ok=(0, 1)),
            lambda: timed(stat_walk, env),
            lambda: timed(check, env, ok=(0, 1)),
        ],
        PAIRS,
    )
    load = load_note(started)
    return [
        row(
            "warm audit",
            ours[0],
            "the stat floor: find -printf, one lstat per entry",
            walk[0],
            GOAL,
            note=cpu_note(ours[1], walk[1]) + ", " + load,
        ),
        row(
            "warm audit against pip check",
            ours[0],
            "python -m pip check",
            peer[0],
            kind="report",
            note=cpu_note(ours[1], peer[1]) + ", " + load,
        ),
        row(
            "the stat floor against pip check",
            walk[0],
            "python -m pip check",
            peer[0],
            kind="report",
            note="pip check, its modules compiled, costs about the walk itself",
        ),
    ]


def main(tmp: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    serve = copy_venv(SERVE, tmp / "serve", link=True)
    ws = workspace(tmp / "ws-serve", {"serve": {"python": f"{serve}/bin/python"}})
    run(pk(ws, "snapshot", "--name", "start", "--manifest-only"), env)
    os.sync()
    return warm_audit(ws, serve, env)
