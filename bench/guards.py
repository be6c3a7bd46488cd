"""The old rows against git and b3sum on the bare sglang venv, kept as guards (docs/BENCHMARKS.md says why)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from common import BARE, RACY, REPO, SITE_REL, clear_caches, copy_venv, interleaved, pk, row, run, site_files, workspace

GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "-c", "gc.auto=0"]


def git_copy(site: Path, dest: Path) -> Path:
    """The same tree as a committed git work tree."""
    subprocess.run(["cp", "-a", str(site), str(dest)], check=True)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(GIT + ["-C", str(dest), *args], check=True, stdout=subprocess.DEVNULL)
    run(["git", "-C", str(dest), "status", "--porcelain"])  # git's index refreshed, as ours is warm
    return dest


def main(tmp: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    venv = copy_venv(BARE, tmp / "guard-venv", link=False)
    ws = workspace(tmp / "ws-guard", {"guard": {"python": f"{venv}/bin/python"}})
    run(pk(ws, "snapshot", "--name", "start", "--manifest-only"), env)
    repo = git_copy(venv / SITE_REL, tmp / "guard-git")
    os.sync()
    time.sleep(RACY)
    rows = []
    audit = pk(ws, "audit", "-q")
    b3sum = shutil.which("b3sum")
    if b3sum:
        listing = tmp / "guard-files.txt"
        listing.write_text("".join(f"{p}\n" for p in site_files(venv)))

        def cold() -> float:
            clear_caches(venv / ".patchkeeper", env)
            os.sync()
            return run(audit, env, ok=(0, 1))

        ours, peer = interleaved([cold, lambda: run(["sh", "-c", f"xargs -d '\\n' {b3sum} < {listing} >/dev/null"])],
                                 3)
        rows.append(row("first audit, bare sglang", ours, "b3sum of the same files", peer, 1.5, kind="guard"))
    run(audit, env, ok=(0, 1))
    time.sleep(RACY)
    ours, peer = interleaved([lambda: run(audit, env, ok=(0, 1)),
                              lambda: run(["git", "-C", str(repo), "status", "--porcelain"])], 5)
    rows.append(row("warm audit, bare sglang", ours, "git status --porcelain", peer, 2.0, kind="guard"))
    diff = tmp / "ddtree.diff"
    diff.write_bytes(b"".join(p.read_bytes() for p in sorted((REPO / "patchsets" / "ddtree").glob("*.patch"))))

    def ours_pair() -> float:
        return run(pk(ws, "apply", "ddtree"), env) + run(pk(ws, "rollback", "--to", "baseline"), env)

    def git_pair() -> float:
        return (run(["git", "-C", str(repo), "apply", str(diff)])
                + run(["sh", "-c", "git checkout -- . && git clean -fdq"], cwd=repo))

    ours, peer = interleaved([ours_pair, git_pair], 5)
    rows.append(row("apply ddtree + rollback, bare sglang", ours, "git apply + checkout + clean", peer, 3.0,
                    kind="guard"))
    return rows
