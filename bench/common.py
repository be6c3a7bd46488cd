"""Shared bench helpers: patchkeeper driven through its CLI only, timing, copies of venvs, workspaces, rows."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The patchkeeper under test: this checkout's, or another install's (PK_BIN: a checkout of an older commit,
# to measure before and after a change with the same bench).
PK = os.environ.get("PK_BIN", str(REPO / ".venv" / "bin" / "patchkeeper"))
SERVE = Path(os.environ.get("PK_SERVE_VENV", REPO / ".cache" / "serve-venv"))  # the full sglang install
BARE = Path(os.environ.get("PK_SGLANG_VENV", REPO / ".cache" / "sglang-venv"))  # sglang alone (--no-deps)
SITE_REL = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
RACY = 2.5  # seconds past a file's mtime/ctime before a stat cache may trust it (racily clean)
# What a state dir keeps that is not a cache: the records of the target's states. Everything else in it
# (stat caches, seals, audit answers, listings, whatever a later version adds) is cleared for a first audit.
RECORDS = {
    "ledger",
    "store",
    "state_dir",
    "lock",
    "lock.guard",
    "manifests",
    "snapshots",
    "transactions",
    "journal",
}


def scratch(prefix: str) -> Path:
    """A tmp dir on the file system of the serving venv (hardlinked copies of it must live there)."""
    SERVE.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=SERVE.parent))


def base_env(tmp: Path) -> dict[str, str]:
    """patchkeeper's per-user caches and sockets in the run's own dirs, never the user's."""
    for sub in ("xdg-cache", "run"):
        (tmp / sub).mkdir(mode=0o700, exist_ok=True)
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PATCHKEEPER_WORKSPACE")
    }
    return {**env, "XDG_CACHE_HOME": str(tmp / "xdg-cache"), "XDG_RUNTIME_DIR": str(tmp / "run")}


def run(
    argv: list[str], env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,), cwd: Path | None = None
) -> float:
    """Run a command to completion, output discarded; its wall time in seconds; raise unless it exits in `ok`."""
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - start
    if proc.returncode not in ok:
        raise RuntimeError(
            f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-800:]}"
        )
    return took


def run_usage(
    argv: list[str], env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)
) -> tuple[float, Any]:
    """Like run, and the child's resource usage (os.wait4: its own and its waited-for children's)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in ok:
        raise RuntimeError(
            f"{' '.join(argv)} exited {proc.returncode}: {err.decode(errors='replace')[-800:]}"
        )
    return took, usage


def timed(
    argv: list[str], env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)
) -> tuple[float, float]:
    """(wall, CPU) seconds of one run: the CPU is user + system of the command and its waited-for children,
    a figure that other load on a shared machine moves far less than the wall time."""
    took, usage = run_usage(argv, env, ok)
    return took, usage.ru_utime + usage.ru_stime


def best(fn: Callable[[], float], repeat: int = 3) -> float:
    """The fastest of `repeat` runs: the one least disturbed by other load on a shared machine."""
    return min(fn() for _ in range(repeat))


def interleaved(fns: list[Callable[[], Any]], repeat: int = 5) -> list[Any]:
    """Medians of each fn (a figure, or a tuple of figures: each median on its own), run in turns, so
    that drifting machine load falls on all of them alike."""
    times: list[list[Any]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            times[i].append(fn())
    return [
        tuple(statistics.median(x) for x in zip(*t)) if isinstance(t[0], tuple) else statistics.median(t)
        for t in times
    ]


def load_note(started: float) -> str:
    """The machine's load (1-minute average) when a measurement started and now, as its note says it."""
    return f"load {started:.1f}-{os.getloadavg()[0]:.1f}"


def cpu_note(ours: float, peer: float) -> str:
    return f"CPU {ours:.2f} s vs {peer:.2f} s, {ours / peer:.2f}x" if peer else f"CPU {ours:.2f} s"


def copy_venv(src: Path, dest: Path, link: bool) -> Path:
    """A copy of a venv without its state dir: hardlinks (`link`, for the 11 GB serving venv: patchkeeper
    replaces files by rename, never writes through them; bench/run.py checks the source after) or bytes."""
    subprocess.run(["cp", "-al" if link else "-a", str(src), str(dest)], check=True)
    shutil.rmtree(dest / ".patchkeeper", ignore_errors=True)
    for marker in (".done", ".files"):
        (dest / marker).unlink(missing_ok=True)
    return dest


def clear_caches(state_dir: Path, env: dict[str, str]) -> None:
    """Everything patchkeeper caches for a target: the state dir but its records, and the user cache."""
    for entry in state_dir.iterdir():
        if entry.name in RECORDS:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    shutil.rmtree(env["XDG_CACHE_HOME"], ignore_errors=True)
    os.mkdir(env["XDG_CACHE_HOME"], 0o700)


def workspace(root: Path, targets: dict[str, dict[str, str]], default: str | None = None) -> Path:
    """A workspace with the repository's patch sets and one table per target (python, ssh, state_dir...),
    each with the vars and the unit file that the ddtree patch set fills in."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "patchsets", root / "patchsets")
    text = f'default_target = "{default or next(iter(targets))}"\n'
    for name, table in targets.items():
        unit = root / f"{name}.service"
        shutil.copy(REPO / "demo" / "sglang-qwen.service", unit)
        text += f"\n[targets.{name}]\n" + "".join(f'{k} = "{v}"\n' for k, v in table.items())
        text += (
            f'package = "sglang"\n[targets.{name}.vars]\ndraft_model_path = "/root/models/Qwen3.6-27B-DFlash"\n'
            f'[targets.{name}.files]\nunit = "{unit}"\n'
        )
    (root / "patchkeeper.toml").write_text(text)
    return root


def pk(ws: Path, *args: str) -> list[str]:
    return [PK, "--workspace", str(ws), *args]


def site_files(venv: Path) -> list[Path]:
    """Every regular file of a venv's site-packages but bytecode caches (what a first audit reads)."""
    files: list[Path] = []
    for root, dirs, names in os.walk(venv / SITE_REL):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        files.extend(
            Path(root, n)
            for n in names
            if os.path.isfile(os.path.join(root, n)) and not os.path.islink(os.path.join(root, n))
        )
    return files


def row(
    measure: str,
    ours: float,
    peer: str = "",
    peer_value: float | None = None,
    goal: float | None = None,
    unit: str = "s",
    kind: str = "goal",
    note: str = "",
) -> dict[str, Any]:
    """One figure. With a peer, the ratio ours/peer is judged against `goal`; without one, ours itself
    (in `unit`). kind: "goal" (the figures the project steers by), "guard" (old rows against git and
    b3sum, kept to catch a regression, not steered by), "report" (a count or a time without a goal)."""
    ratio = ours / peer_value if peer_value else None
    judged = ours if ratio is None else ratio
    met = None if goal is None or kind == "report" else judged <= goal
    return {
        "measure": measure,
        "kind": kind,
        "ours": round(ours, 4),
        "unit": unit,
        "peer": peer,
        "peer_value": None if peer_value is None else round(peer_value, 4),
        "ratio": None if ratio is None else round(ratio, 3),
        "goal": goal,
        "met": met,
        "note": note,
    }


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.0f} {unit}" if unit not in ("s",) else f"{value:.3f} s"


def print_rows(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n## {title}")
    print(f"{'measure':58} {'ours':>11}  {'peer':34} {'':>11} {'ratio':>7} {'goal':>8}  verdict")
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        goal = "-" if r["goal"] is None else (f"<={r['goal']}x" if r["peer_value"] else f"<={r['goal']:g}")
        verdict = (
            {
                "goal": "met" if r["met"] else "MISSED",
                "guard": "guard " + ("ok" if r["met"] else "over"),
                "report": "",
            }[r["kind"]]
            if r["met"] is not None
            else ("" if r["kind"] != "goal" else "?")
        )
        print(
            f"{r['measure'][:58]:58} {_value(r['ours'], r['unit']):>11}  {r['peer'][:34]:34} "
            f"{_value(r['peer_value'], r['unit']):>11} {ratio:>7} {goal:>8}  {verdict}"
            + (f"  [{r['note']}]" if r["note"] else "")
        )
