"""The serving environment on this machine: first audit vs the hashing floor, peak memory, and apply +
rollback on it vs on the bare sglang venv (the warm audit is its own part: warm_audit.py)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from common import (
    BARE,
    RACY,
    REPO,
    SERVE,
    clear_caches,
    copy_venv,
    cpu_note,
    interleaved,
    pk,
    row,
    run,
    run_usage,
    site_files,
    timed,
    workspace,
)

FLOOR = [sys.executable, str(REPO / "bench" / "floor.py")]
COLD_RUNS = 3  # each a whole read of the environment; best of these, as a first audit would meet a quiet host
PAIRS = 5


def listing(venv: Path, out: Path) -> tuple[int, int]:
    """Write the floor's listing, largest file first; (files, bytes)."""
    sized = sorted(((p.stat().st_size, str(p)) for p in site_files(venv)), reverse=True)
    out.write_text("".join(f"{path}\n" for _, path in sized))
    return len(sized), sum(size for size, _ in sized)


def first_audit(ws: Path, state_dir: Path, env: dict[str, str], floor_list: Path) -> list[dict[str, Any]]:
    """The first audit (every cache of patchkeeper's cleared, the bytes written back by os.sync) and
    the hashing floor of the same files, in turns; the OS page cache is warm for both alike."""
    audit = pk(ws, "audit", "-q")
    run(FLOOR + [str(floor_list)])  # read everything once, so neither side pays for the disk alone
    cold, floor, peak = (float("inf"), 0.0), (float("inf"), 0.0), 0
    for _ in range(COLD_RUNS):
        clear_caches(state_dir, env)
        os.sync()
        took, usage = run_usage(audit, env, ok=(0, 1))
        cold, peak = min(cold, (took, usage.ru_utime + usage.ru_stime)), max(peak, usage.ru_maxrss)
        floor = min(floor, timed(FLOOR + [str(floor_list)]))
    return [
        row(
            "first audit (nothing cached)",
            cold[0],
            "sha256 floor, 1 process per CPU",
            floor[0],
            1.3,
            note=cpu_note(cold[1], floor[1]),
        ),
        row(
            "peak memory of the first audit (ru_maxrss)",
            peak / 1024,
            goal=150,
            unit="MiB",
            note=f"worst of {COLD_RUNS}",
        ),
    ]


def apply_rollback(ws: Path, env: dict[str, str]) -> tuple[float, float]:
    apply, rollback = (
        timed(pk(ws, "apply", "ddtree"), env),
        timed(pk(ws, "rollback", "--to", "baseline"), env),
    )
    return apply[0] + rollback[0], apply[1] + rollback[1]


def main(tmp: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    serve = copy_venv(SERVE, tmp / "serve", link=True)
    bare = copy_venv(BARE, tmp / "bare", link=False)
    ws = workspace(tmp / "ws-serve", {"serve": {"python": f"{serve}/bin/python"}})
    ws_bare = workspace(tmp / "ws-bare", {"bare": {"python": f"{bare}/bin/python"}})
    files, size = listing(serve, tmp / "floor.txt")
    for w in (ws, ws_bare):
        run(pk(w, "snapshot", "--name", "start", "--manifest-only"), env)
    os.sync()
    time.sleep(RACY)
    rows = first_audit(ws, serve / ".patchkeeper", env, tmp / "floor.txt")
    rows[0]["note"] = f"{files} files, {size / 1e9:.1f} GB; " + rows[0]["note"]
    run(pk(ws_bare, "status"), env)  # both at rest, as after any earlier command on a real target
    apply_rollback(ws, env)
    apply_rollback(ws_bare, env)
    ours, peer = interleaved([lambda: apply_rollback(ws, env), lambda: apply_rollback(ws_bare, env)], PAIRS)
    rows.append(
        row(
            "apply ddtree + rollback, serving venv",
            ours[0],
            "the same on the bare sglang venv",
            peer[0],
            2.0,
            note=cpu_note(ours[1], peer[1]),
        )
    )
    return rows
