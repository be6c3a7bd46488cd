"""Shared bench helpers: timing whole processes, medians, the pristine venv, result rows."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRISTINE = Path(os.environ.get("PK_SGLANG_VENV", REPO / ".cache" / "sglang-venv"))
SITE_REL = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
PK = [str(REPO / ".venv" / "bin" / "patchkeeper")]
# patchkeeper's per-user caches (interpreter facts, kept audit answers) in a directory of the run's own,
# never the user's ~/.cache: a figure must not depend on what earlier runs left there
if "XDG_CACHE_HOME" not in os.environ:  # ours: removed when the run ends (a caller's is left alone)
    import atexit
    import shutil

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="pk-bench-cache-")
    atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)
CACHE_HOME = Path(os.environ["XDG_CACHE_HOME"])


def run(argv, cwd=None, env=None, quiet=True, ok=(0, 1)) -> float:
    """Run a command to completion; return its wall time in seconds; raise unless it exits in `ok`."""
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k != "PYTHONDONTWRITEBYTECODE"}
    t = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env,
                          stdout=subprocess.DEVNULL if quiet else None, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t
    if proc.returncode not in ok:
        raise RuntimeError(f"{argv} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return elapsed


def median(fn, repeat: int = 5) -> float:
    return statistics.median(fn() for _ in range(repeat))


def best(fn, repeat: int = 3) -> float:
    """The fastest of `repeat` runs: the one least disturbed by other load."""
    return min(fn() for _ in range(repeat))


def row(name: str, ours: float, peer_name: str, peer: float, goal: str) -> dict:
    return {"measure": name, "ours_s": round(ours, 4), "peer": peer_name, "peer_s": round(peer, 4),
            "ratio": round(ours / peer, 3) if peer else None, "goal": goal}


def print_rows(title: str, rows: list[dict]) -> None:
    print(f"\n## {title}")
    print(f"{'measure':48} {'ours (s)':>9} {'peer':>34} {'peer (s)':>9} {'ratio':>7}  goal")
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if r.get("ratio") is not None else "-"
        print(f"{r['measure']:48} {r['ours_s']:9.3f} {r['peer']:>34} {r['peer_s']:9.3f} {ratio:>7}  {r['goal']}")


def copy_venv(dest: Path, src: Path = PRISTINE) -> Path:
    """A real copy (not hardlinks: other copies' link counts would keep moving our ctimes)."""
    subprocess.run(["cp", "-a", str(src), str(dest)], check=True)
    return dest


def workspace(root: Path, venv: Path, name: str = "local") -> Path:
    import shutil

    root.mkdir(parents=True, exist_ok=True)
    if not (root / "patchsets").exists():
        shutil.copytree(REPO / "patchsets", root / "patchsets")
    unit = root / f"{name}.service"
    shutil.copy(REPO / "demo" / "sglang-qwen.service", unit)
    with open(root / "patchkeeper.toml", "a") as f:
        if f.tell() == 0:
            f.write(f'default_target = "{name}"\n')
        f.write(f'\n[targets.{name}]\npython = "{venv}/bin/python"\npackage = "sglang"\n'
                f'[targets.{name}.vars]\ndraft_model_path = "/root/models/Qwen3.6-27B-DFlash"\n'
                f'[targets.{name}.files]\nunit = "{unit}"\n')
    return root
