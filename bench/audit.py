"""Benchmark `patchkeeper audit` against git status, b3sum, and itself over a fleet of 8 targets."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import CACHE_HOME, PRISTINE as SGLANG, REPO, SITE_REL as SITE, best, row, run  # noqa: E402

TORCH = REPO / ".cache" / "torch-venv"
PK = [sys.executable, "-m", "patchkeeper"]


def _timed(argv: list[str], cwd: Path | None = None, repeat: int = 3) -> tuple[float, int]:
    """Best wall time of `repeat` runs, and the peak RSS (KiB) of the children so far."""
    took = best(lambda: run(argv, cwd=cwd, ok=(0, 1)), repeat)
    return took, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def _workspace(root: Path, venvs: list[Path]) -> Path:
    root.mkdir(parents=True)
    text = 'default_target = "t0"\n'
    for i, venv in enumerate(venvs):
        text += f'\n[targets.t{i}]\npython = "{venv}/bin/python"\npackage = "sglang"\n'
    (root / "patchkeeper.toml").write_text(text)
    return root


def _peak_rss(argv: list[str]) -> int:
    """Peak RSS (MiB) of one run, measured by a fresh helper process so earlier children don't count."""
    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, "
            "stderr=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True).stdout
    return int(out.strip() or 0) // 1024


def main() -> list[dict]:
    rows: list[tuple[str, float, str, float, str]] = []
    with tempfile.TemporaryDirectory(prefix="pk-bench-audit-") as tmp:
        tmp = Path(tmp)
        # real copies (not hardlinks: others' hardlinking would keep ctimes fresh and the cache cold)
        venv = tmp / "venv"
        subprocess.run(["cp", "-a", str(SGLANG), str(venv)], check=True)
        ws = _workspace(tmp / "ws", [venv])
        subprocess.run([*PK, "-w", str(ws), "snapshot", "--name", "base"], check=True, stdout=subprocess.DEVNULL)
        time.sleep(2.2)  # past the stat cache's timestamp granularity
        audit = [*PK, "-w", str(ws), "audit", "-q"]

        # warm audit vs git status on a git copy of the same tree
        gitcopy = tmp / "git"
        subprocess.run(["cp", "-a", str(venv / SITE), str(gitcopy)], check=True)
        git = ["git", "-c", "user.name=b", "-c", "user.email=b@b", "-C", str(gitcopy)]
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
            subprocess.run([*git, *args], check=True, stdout=subprocess.DEVNULL)
        for _ in range(3):  # the caches, the tree's seal, then the answer kept (replay.py): a target at rest
            subprocess.run(audit, stdout=subprocess.DEVNULL)
        warm, _ = _timed(audit, repeat=5)
        gst, _ = _timed([*git, "status", "--porcelain"], repeat=5)
        rows.append(("warm audit, sglang", warm, "git status --porcelain", gst, "<= 2x"))

        # cold audit vs b3sum over the same files
        files = [str(p) for p in (venv / SITE).rglob("*") if p.is_file()]
        listing = tmp / "files.txt"
        listing.write_text("\n".join(files))

        # a cold audit needs the recorded state: keep the ledger, drop only the caches
        def drop_caches_only() -> None:
            state = venv / ".patchkeeper"
            shutil.rmtree(CACHE_HOME / "patchkeeper" / "replay", ignore_errors=True)  # kept answers too
            shutil.rmtree(state / "audit", ignore_errors=True)
            for cache in state.glob("statcache.json*"):  # digests, and the walked directories' listings
                cache.unlink()

        best = float("inf")
        for _ in range(3):
            drop_caches_only()
            t = time.perf_counter()
            subprocess.run(audit, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            best = min(best, time.perf_counter() - t)
        b3 = shutil.which("b3sum")
        if b3:
            b3t, _ = _timed(["sh", "-c", f"xargs -d '\\n' {b3} < {listing} > /dev/null"])
            rows.append((f"cold audit, sglang ({len(files)} files)", best, "b3sum same files", b3t, "<= 1.5x"))
        else:
            rows.append((f"cold audit, sglang ({len(files)} files)", best, "b3sum (not installed)", float("nan"), ""))

        # torch beside sglang
        if (TORCH / ".done").exists():
            tv = tmp / "torch-venv"
            subprocess.run(["cp", "-a", str(TORCH), str(tv)], check=True)
            tws = _workspace(tmp / "tws", [tv])
            subprocess.run([*PK, "-w", str(tws), "snapshot", "--name", "base"], check=True, stdout=subprocess.DEVNULL)
            os.sync()  # the copy's gigabyte written back now, not during the timed runs

            def drop_torch_caches() -> None:
                shutil.rmtree(CACHE_HOME / "patchkeeper" / "replay", ignore_errors=True)
                shutil.rmtree(tv / ".patchkeeper" / "audit", ignore_errors=True)
                for cache in (tv / ".patchkeeper").glob("statcache.json*"):
                    cache.unlink()

            time.sleep(2.2)
            taudit = [*PK, "-w", str(tws), "audit", "-q"]
            tcold = float("inf")
            for _ in range(3):  # best of three, as the sglang row: one sample swung 1.2-2.1 s between runs
                drop_torch_caches()
                t = time.perf_counter()
                cold_mem = _peak_rss(taudit)
                tcold = min(tcold, time.perf_counter() - t)
            _timed(taudit, repeat=2)  # the stat caches, then the seal
            time.sleep(2.2)  # past the racily-clean window of the caches' writes
            _timed(taudit, repeat=2)  # the answer kept, then replayed
            warm_mem = _peak_rss(taudit)
            tgit = tmp / "torch-git"  # git status of a git copy of the same site-packages, the warm peer
            subprocess.run(["cp", "-a", str(tv / SITE), str(tgit)], check=True)
            tg = ["git", "-c", "user.name=b", "-c", "user.email=b@b", "-C", str(tgit)]
            for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
                subprocess.run([*tg, *args], check=True, stdout=subprocess.DEVNULL)
            subprocess.run([*tg, "status", "--porcelain"], stdout=subprocess.DEVNULL)
            twarm, _ = _timed(taudit, repeat=5)
            tgst, _ = _timed([*tg, "status", "--porcelain"], repeat=5)
            rows.append((f"cold audit, torch+sglang (peak {cold_mem} MiB)", tcold, "", float("nan"), "< 150 MB"))
            rows.append((f"warm audit, torch+sglang (peak {warm_mem} MiB)", twarm, "git status --porcelain", tgst,
                         "<= 2x, < 150 MB"))
            shutil.rmtree(tgit)

        # --all over 8 targets vs one
        venvs = [venv]
        for i in range(1, 8):
            v = tmp / f"venv{i}"
            subprocess.run(["cp", "-a", str(venv), str(v)], check=True)
            venvs.append(v)
        fleet = _workspace(tmp / "fleet", venvs)
        for v in venvs:
            subprocess.run([*PK, "-w", str(fleet), "audit", "-q", "-t", f"t{venvs.index(v)}"],
                           stdout=subprocess.DEVNULL)
        time.sleep(2.2)
        for v in venvs:
            subprocess.run([*PK, "-w", str(fleet), "audit", "-q", "-t", f"t{venvs.index(v)}"],
                           stdout=subprocess.DEVNULL)
        one, _ = _timed([*PK, "-w", str(fleet), "audit", "-q", "-t", "t0"])
        eight, _ = _timed([*PK, "-w", str(fleet), "audit", "--all"])
        rows.append(("audit --all, 8 targets (warm)", eight, "audit, 1 target", one, "<= 2.5x"))

    print(f"{'measure':48} {'patchkeeper':>12} {'peer':26} {'peer s':>8} {'ratio':>7}  goal")
    for name, ours, peer, theirs, goal in rows:
        ratio = ours / theirs if theirs == theirs and theirs else float("nan")
        print(f"{name:48} {ours:12.3f} {peer:26} {theirs:8.3f} {ratio:7.2f}  {goal}")
    return [row(name, ours, peer, theirs if theirs == theirs else 0.0, goal) for name, ours, peer, theirs, goal in rows]


if __name__ == "__main__":
    main()
