"""The old rows against git and b3sum on the bare sglang venv, kept as guards (bench/BENCHMARKS.md says why)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import (
    BARE,
    PK,
    RACY,
    REPO,
    SITE_REL,
    clear_caches,
    copy_venv,
    cpu_note,
    interleaved,
    load_note,
    pk,
    row,
    run,
    site_files,
    timed,
    workspace,
)

GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "-c", "gc.auto=0"]


def git_copy(site: Path, dest: Path) -> Path:
    """The same tree as a committed git work tree."""
    subprocess.run(["cp", "-a", str(site), str(dest)], check=True)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(GIT + ["-C", str(dest), *args], check=True, stdout=subprocess.DEVNULL)
    run(["git", "-C", str(dest), "status", "--porcelain"])  # git's index refreshed, as ours is warm
    return dest


def site_entries(venv: Path) -> list[str]:
    """Every entry below a venv's site-packages, directories and bytecode included: what a warm audit's
    seals hold one identity each of (src/patchkeeper/host/seal.py)."""
    found: list[str] = []
    for root, dirs, names in os.walk(venv / SITE_REL):
        found.extend(os.path.join(root, n) for n in dirs + names)
    return found


def click_floor(entries: Path) -> list[str]:
    """The least a warm audit written as a click CLI in Python can take, whatever its design: the
    interpreter patchkeeper runs on starts, imports click (a chosen dependency) and lstats each entry
    listed in `entries` once, nothing more."""
    shebang = Path(PK).read_bytes().split(b"\n", 1)[0].decode(errors="replace")
    python = shebang[2:].strip() if shebang.startswith("#!") and "python" in shebang else sys.executable
    code = f"import os, click\nfor p in open({str(entries)!r}).read().splitlines(): os.lstat(p)"
    return [python, "-c", code]


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

        def cold() -> tuple[float, float]:
            clear_caches(venv / ".patchkeeper", env)
            os.sync()
            return timed(audit, env, ok=(0, 1))

        ours, peer = interleaved(
            [cold, lambda: timed(["sh", "-c", f"xargs -d '\\n' {b3sum} < {listing} >/dev/null"])], 3
        )
        rows.append(
            row(
                "first audit, bare sglang",
                ours[0],
                "b3sum of the same files",
                peer[0],
                1.5,
                kind="guard",
                note=cpu_note(ours[1], peer[1]),
            )
        )
    run(audit, env, ok=(0, 1))
    listed = site_entries(venv)
    entries = tmp / "guard-entries.txt"
    entries.write_text("".join(f"{p}\n" for p in listed))
    time.sleep(RACY)
    started = os.getloadavg()[0]
    ours, peer, least = interleaved(
        [
            lambda: timed(audit, env, ok=(0, 1)),
            lambda: timed(["git", "-C", str(repo), "status", "--porcelain"]),
            lambda: timed(click_floor(entries)),
        ],
        5,
    )
    rows.append(
        row(
            "warm audit, bare sglang",
            ours[0],
            "git status --porcelain",
            peer[0],
            3.0,
            note=cpu_note(ours[1], peer[1]) + ", " + load_note(started),
        )
    )
    rows.append(
        row(
            "the same, against the least a click CLI in Python takes",
            ours[0],
            "python: import click, one lstat an entry",
            least[0],
            kind="report",
            note=f"that floor is {least[0] / peer[0]:.2f}x git status ({len(listed)} entries); "
            + cpu_note(ours[1], least[1]),
        )
    )
    diff = tmp / "ddtree.diff"
    diff.write_bytes(
        b"".join(p.read_bytes() for p in sorted((REPO / "patchsets" / "ddtree").glob("*.patch")))
    )

    def ours_pair() -> tuple[float, float]:
        apply, rollback = (
            timed(pk(ws, "apply", "ddtree"), env),
            timed(pk(ws, "rollback", "--to", "baseline"), env),
        )
        return apply[0] + rollback[0], apply[1] + rollback[1]

    def git_pair() -> tuple[float, float]:
        apply = timed(["git", "-C", str(repo), "apply", str(diff)])
        back = timed(["sh", "-c", f"cd {repo} && git checkout -- . && git clean -fdq"])
        return apply[0] + back[0], apply[1] + back[1]

    ours, peer = interleaved([ours_pair, git_pair], 5)
    rows.append(
        row(
            "apply ddtree + rollback, bare sglang",
            ours[0],
            "git apply + checkout + clean",
            peer[0],
            3.0,
            kind="guard",
            note=cpu_note(ours[1], peer[1]),
        )
    )
    return rows
