"""Issue 2 figures: apply+rollback against git apply+checkout, torch beside sglang, baseline vs git add."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import PK, REPO, SITE_REL, copy_venv, print_rows, row, run, workspace  # noqa: E402

TORCH_VENV = Path(os.environ.get("PK_TORCH_VENV", REPO / ".cache" / "torch-venv"))


def _git_copy(tmp: Path, site: Path) -> Path:
    repo = tmp / "git-copy"
    subprocess.run(["cp", "-a", str(site), str(repo)], check=True)
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    # gc.auto 0: no `git gc --auto` detached after the commit of ~6,500 loose objects, to run beside the timed
    # commands and to write into .git/objects while the temporary directory is being removed (the run then failed)
    for argv in (["git", "init", "-q"], ["git", "config", "gc.auto", "0"], ["git", "add", "-A"],
                 ["git", "commit", "-qm", "base"]):
        subprocess.run(argv, cwd=repo, check=True, env={**os.environ, **env})
    return repo


def prepare(ws: Path) -> None:
    """Record the baseline outside the timing and let the stat cache reach its steady state."""
    run(PK + ["--workspace", str(ws), "snapshot", "--name", "bench-start"])
    time.sleep(2.5)  # past the stat cache's racy window for the freshly copied tree
    run(PK + ["--workspace", str(ws), "status"])  # as any earlier command on a real target would


def apply_rollback(ws: Path) -> float:
    args = ["--workspace", str(ws)]
    return run(PK + args + ["apply", "ddtree"]) + run(PK + args + ["rollback", "--to", "baseline"])


def interleaved(fns: list, repeat: int = 9) -> list[float]:
    """Medians of each fn, run in turns, so that drifting machine load falls on all of them alike."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            times[i].append(fn())
    return [statistics.median(t) for t in times]


def main() -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="pk-bench-core-") as t:
        tmp = Path(t)
        venv = copy_venv(tmp / "venv")
        ws = workspace(tmp / "ws", venv)
        diff = tmp / "ddtree.diff"
        diff.write_bytes(b"".join(p.read_bytes() for p in sorted((REPO / "patchsets/ddtree").glob("*.patch"))))

        # baseline recording (bytes included) against git add -A of the same tree
        base_ws = workspace(tmp / "ws-base", copy_venv(tmp / "venv-base"))
        ours_base = run(PK + ["--workspace", str(base_ws), "snapshot", "--name", "x"])
        git_tree = tmp / "git-add"
        subprocess.run(["cp", "-a", str(venv / SITE_REL), str(git_tree)], check=True)
        subprocess.run(["git", "init", "-q"], cwd=git_tree, check=True)
        git_add = run(["git", "add", "-A"], cwd=git_tree)
        rows.append(row("record baseline (bytes kept)", ours_base, "git add -A", git_add, "<= 0.5x"))

        repo = _git_copy(tmp, venv / SITE_REL)

        def git_once() -> float:
            return (run(["git", "apply", str(diff)], cwd=repo)
                    + run(["sh", "-c", "git checkout -- . && git clean -fdq"], cwd=repo))

        prepare(ws)
        fns = [lambda: apply_rollback(ws), git_once]
        if (TORCH_VENV / ".done").exists():
            tws = workspace(tmp / "ws-torch", copy_venv(tmp / "venv-torch", TORCH_VENV))
            prepare(tws)
            fns.append(lambda: apply_rollback(tws))
        else:
            print(f"(skipped the torch figure: {TORCH_VENV} is not built; `make bench` builds it)")
        ours, peer, *torch = interleaved(fns)
        rows.append(row("apply ddtree + rollback --to baseline", ours, "git apply + checkout -- . + clean -fd", peer,
                        "<= 3x"))
        if torch:
            rows.append(row("same, torch 2.13.0 in site-packages", torch[0], "same without torch", ours, "<= 1.2x"))
    print_rows("core: apply, rollback, baseline (sglang 0.5.23)", rows)
    return rows


if __name__ == "__main__":
    main()
