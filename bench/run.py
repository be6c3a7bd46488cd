"""`make bench`: patchkeeper on the real serving environment, each figure beside its peer in one run.

`python bench/run.py [local warm-audit remote fleet guards caches release rehash first-hour]` runs the named parts (default:
all), prints one table per part with each ratio, goal and verdict, and writes bench/results.json (parts not run keep
their figures from the last run). patchkeeper is driven through its CLI only. bench/BENCHMARKS.md says
what each row measures and why.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import BARE, PK, REPO, SERVE, SITE_REL, base_env, print_rows, scratch, site_files  # noqa: E402

PARTS = {
    "local": "the serving environment on this machine",
    "warm-audit": "the warm audit against the stat floor",
    "remote": "the serving environment 10 ms away",
    "fleet": "16 SSH targets 10 ms away (issue 25)",
    "hundred": "100 SSH targets beside 16, 10 ms away (issue 35)",
    "guards": "old rows against git and b3sum (guards only)",
    "caches": "what each cache saves on the serving environment (issue 31)",
    "release": "the 0.5.22->0.5.23 release diff, 2,098 files (issue 33)",
    "rehash": "audit --rehash of the bare sglang venv against the sha256 floor (issue 40)",
    "first-hour": "the first apply after the first audit, and the first audit after the first apply",
}
OUT = Path(__file__).parent / "results.json"


def _fingerprint(venv: Path) -> dict[str, str]:
    """sha256 of the serving venv's files that the ddtree patch set changes: the bench's hardlinked copies
    must never be written through (patchkeeper replaces files by rename), or the cache itself changed."""
    paths = set()
    for patch in (REPO / "patchsets" / "ddtree").glob("*.patch"):
        for line in patch.read_text().splitlines():
            if line.startswith("+++ b/"):
                paths.add(line[6:].split("\t")[0])
    site = venv / SITE_REL
    return {
        p: hashlib.sha256((site / p).read_bytes()).hexdigest() for p in sorted(paths) if (site / p).exists()
    }


def _about() -> dict[str, Any]:
    found = subprocess.run(
        [str(Path(PK).parent / "python"), "-c", "import patchkeeper; print(patchkeeper.__file__)"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    checkout = (
        Path(found).resolve().parents[2]
    )  # the checkout of the patchkeeper under test (PYTHONPATH wins)
    commit = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    serve = site_files(SERVE)
    size = 0
    for path in serve:
        try:
            size += path.stat().st_size
        except OSError:  # a file going away under another user of the cache
            pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit + ("+dirty" if dirty else ""),
        "patchkeeper": PK,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_at_start": os.getloadavg()[0],
        "serving_venv": {
            "files": len(serve),
            "bytes": size,
            "distributions": len(list((SERVE / SITE_REL).glob("*.dist-info"))),
        },
        "bare_venv_files": len(site_files(BARE)),
    }


def main() -> None:
    parts = sys.argv[1:] or list(PARTS)
    for missing in (SERVE, BARE):
        if not (missing / ".done").exists():
            raise SystemExit(f"{missing} is not built: run `make bench`, which builds it")
    results: dict[str, Any] = json.loads(OUT.read_text()) if OUT.exists() and parts != list(PARTS) else {}
    if "about" not in results:  # figures of the old bench: not merged with these
        results = {}
    results["about"] = about = _about()  # this run's; "ran" says when and at which commit each part last ran
    print(
        f"patchkeeper bench {about['date']} at {about['commit']}: {about['cpus']} CPUs, load {about['load_at_start']:.1f};"
        f" serving venv {about['serving_venv']['files']} files, {about['serving_venv']['bytes'] / 1e9:.1f} GB"
    )
    before = _fingerprint(SERVE)
    tmp = scratch("bench-")
    try:
        env = base_env(tmp)
        for part in parts:
            started = time.perf_counter()
            part_tmp = tmp / part
            part_tmp.mkdir()
            rows = importlib.import_module(part.replace("-", "_")).main(part_tmp, env)
            print_rows(f"{part}: {PARTS[part]} ({time.perf_counter() - started:.0f} s)", rows)
            results[part] = rows
            results.setdefault("ran", {})[part] = {
                "date": about["date"],
                "commit": about["commit"],
                "load_at_start": about["load_at_start"],
            }
            shutil.rmtree(part_tmp, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if _fingerprint(SERVE) != before:
        raise SystemExit(
            f"{SERVE} changed under the bench: a hardlinked copy was written through; rebuild it"
        )
    about["load_at_end"] = os.getloadavg()[0]
    goals = [r for part in PARTS for r in results.get(part, []) if r["kind"] == "goal"]
    print(
        f"\ngoals met: {sum(1 for r in goals if r['met'])} of {len(goals)}"
        + "".join(f"\n  missed: {r['measure']}" for r in goals if not r["met"])
    )
    OUT.write_text(json.dumps(results, indent=1) + "\n")
    print(f"figures written to {OUT}")


if __name__ == "__main__":
    main()
