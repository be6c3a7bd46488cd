"""The serving environment on a host 10 ms away each way: round trips per command, and `diff HOST` vs rsync."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from common import RACY, SERVE, SITE_REL, copy_venv, interleaved, pk, row, run, workspace
from link import Link, measured

RUNS = 3


def main(tmp: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    host = copy_venv(SERVE, tmp / "host", link=True)
    link = Link(tmp, env)
    try:
        return _measure(tmp, host, link)
    finally:
        link.close()


def _measure(tmp: Path, host: Path, link: Link) -> list[dict[str, Any]]:
    env, proxy = link.env, link.proxy
    ws = workspace(tmp / "ws-remote", {"host": {"ssh": link.alias("host"), "python": f"{host}/bin/python"}})
    run(pk(ws, "snapshot", "--name", "start", "--manifest-only"), env)
    os.sync()
    time.sleep(RACY)
    for _ in range(2):
        run(pk(ws, "audit", "-q"), env, ok=(0, 1))  # the host's caches, then past their racy window
        time.sleep(RACY)
    run(pk(ws, "disconnect", "--all"), env)
    rows = []
    first = measured(pk(ws, "status"), env, proxy)
    rows.append(
        row(
            "round trips: first status (connects, starts the agent)",
            first["round_trips"],
            unit="rt",
            kind="report",
            note=f"{first['wall']:.2f} s",
        )
    )
    commands = [
        ("status", pk(ws, "status")),
        ("audit", pk(ws, "audit", "-q")),
        ("apply ddtree", pk(ws, "apply", "ddtree")),
        ("rollback --to baseline", pk(ws, "rollback", "--to", "baseline")),
        ("diff HOST", pk(ws, "diff", "host")),
    ]
    for name, argv in commands:
        m = measured(argv, env, proxy)
        rows.append(
            row(
                f"round trips: {name} (held connection)",
                m["round_trips"],
                unit="rt",
                kind="report",
                note=f"{m['wall']:.2f} s, {m['bytes'] / 1e3:.0f} kB",
            )
        )
    site = f"{SITE_REL}/"
    rsync = [
        "rsync",
        "-a",
        "-n",
        "--delete",
        "-e",
        link.ssh_command(),
        str(SERVE / site),
        f"root@127.0.0.1:{host / site}",
    ]
    ours_m, peer_m = measured(pk(ws, "diff", "host"), env, proxy), measured(rsync, env, proxy, ok=(0,))
    rows.append(
        row(
            "bytes on the link: diff HOST",
            ours_m["bytes"] / 1e3,
            "rsync -a -n --delete",
            peer_m["bytes"] / 1e3,
            unit="kB",
            kind="report",
            note=f"round trips {ours_m['round_trips']} vs {peer_m['round_trips']}",
        )
    )
    ours, peer = interleaved([lambda: run(pk(ws, "diff", "host"), env), lambda: run(rsync, env)], RUNS)
    rows.append(
        row(
            "diff HOST over the 20 ms link",
            ours,
            "rsync -a -n --delete, same link",
            peer,
            0.5,
            note="the whole site-packages; goal carried over from the loopback row",
        )
    )
    return rows
