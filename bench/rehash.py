"""`audit --rehash` of the bare sglang venv against the sha256 floor of the files it reads (issue 40).

Runnable alone: `python bench/run.py rehash`. --rehash reads and hashes every file of site-packages
again and compares every pyc with its source; a source is compiled once per pair of bytes (the
pairs kept in audit/bytecode.compared, host/pycompare.py). The first --rehash after the baseline
compiles them all and is its own row (a report); the goal row is the steady state, in turns with
the floor: sha256 through OpenSSL of every regular file of the same site-packages, pycs included
(what --rehash must read), one process per CPU (bench/floor.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from common import BARE, SITE_REL, copy_venv, cpu_note, interleaved, load_note, pk, row, run, timed, workspace
from local import FLOOR

PAIRS = 3
GOAL = 3.0


def every_file(site: Path, out: Path) -> int:
    """Write the floor's listing: every regular file below `site`, largest first; the count."""
    sized = []
    for root, _, names in os.walk(site):
        for name in names:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                sized.append((os.path.getsize(path), path))
    sized.sort(reverse=True)
    out.write_text("".join(f"{path}\n" for _, path in sized))
    return len(sized)


def main(tmp: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    venv = copy_venv(BARE, tmp / "rehash-venv", link=False)
    ws = workspace(tmp / "ws-rehash", {"rehash": {"python": f"{venv}/bin/python"}})
    run(pk(ws, "snapshot", "--name", "start", "--manifest-only"), env)
    floor_list = tmp / "rehash-files.txt"
    files = every_file(venv / SITE_REL, floor_list)
    floor = FLOOR + [str(floor_list)]
    rehash = pk(ws, "audit", "-q", "--rehash")
    run(floor)  # every file read once, for both sides alike
    started = os.getloadavg()[0]
    first = timed(rehash, env, ok=(0, 1))  # no pair kept yet: every pyc's source compiled
    first_floor = timed(floor)
    first_note = cpu_note(first[1], first_floor[1]) + ", " + load_note(started)
    started = os.getloadavg()[0]
    ours, peer = interleaved([lambda: timed(rehash, env, ok=(0, 1)), lambda: timed(floor)], PAIRS)
    return [
        row(
            "audit --rehash, bare sglang",
            ours[0],
            f"sha256 floor of its {files} files",
            peer[0],
            GOAL,
            note=cpu_note(ours[1], peer[1]) + ", " + load_note(started),
        ),
        row(
            "the first audit --rehash (no pair compared yet)",
            first[0],
            "the same floor",
            first_floor[0],
            kind="report",
            note=first_note,
        ),
    ]
