"""A real release's whole diff (issue 33): sglang 0.5.22 -> 0.5.23 as plain `git diff --binary` writes
it (2,098 files, 35 MB, renames and binary files), applied and rolled back by patchkeeper on a venv with
0.5.22, against its floor on the same tree: git apply plus a copy of the files it replaces (the backup
patchkeeper keeps and git does not), and git apply -R."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

from common import BARE, REPO, SITE_REL, copy_venv, cpu_note, interleaved, pk, row, run, timed, workspace

WHEELS = REPO / ".cache" / "wheels" / "port"
PAIRS = 3


def _wheel(version: str) -> Path:
    found = sorted(WHEELS.glob(f"sglang-{version}-*.whl"))
    if not found:
        raise SystemExit(f"no sglang {version} wheel in {WHEELS}: run `make test`, which downloads it")
    return found[-1]


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@b", *args],
        check=True,
        capture_output=True,
    ).stdout


def release_diff(tmp: Path) -> tuple[Path, Path]:
    """The diff (as plain git diff writes it, --binary) and a tree of 0.5.22's package in a git repo."""
    repo = tmp / "repo"
    for version in ("0.5.22", "0.5.23"):
        shutil.rmtree(repo / "sglang", ignore_errors=True)
        with zipfile.ZipFile(_wheel(version)) as wheel:
            wheel.extractall(repo, members=[n for n in wheel.namelist() if n.startswith("sglang/")])
        if version == "0.5.22":
            _git(repo, "init", "-q")
        _git(repo, "add", "-A")
        if version == "0.5.22":
            _git(repo, "commit", "-qm", version)
    patch = tmp / "release.patch"
    patch.write_bytes(_git(repo, "diff", "--cached", "--binary"))
    _git(repo, "reset", "-q", "--hard")
    return patch, repo


def replaced(patch: Path) -> list[str]:
    """The files the diff changes, renames away or deletes (what a backup must copy), from git's own numstat."""
    out = subprocess.run(
        ["git", "apply", "--numstat", "-z", str(patch)], check=True, capture_output=True
    ).stdout
    fields = out.split(b"\0")
    paths, i = [], 0
    while i < len(fields) - 1:
        stat = fields[i].split(b"\t")
        if stat[-1]:  # "added deleted path"
            paths.append(stat[-1].decode())
            i += 1
        else:  # a rename or copy: "added deleted " then the old and the new name
            paths.append(fields[i + 1].decode())
            i += 3
    return paths


def main(tmp: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    patch, tree = release_diff(tmp)
    venv = copy_venv(BARE, tmp / "venv", link=False)
    run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "install",
            "--no-index",
            "--no-compile",
            "--no-deps",
            "--force-reinstall",
            str(_wheel("0.5.22")),
        ],
        env,
    )
    ws = workspace(tmp / "ws", {"release": {"python": f"{venv}/bin/python"}})
    run(pk(ws, "import", "release", str(patch)), env)
    run(pk(ws, "snapshot", "--name", "start", "--manifest-only"), env)
    old = [p for p in replaced(patch) if (tree / p).exists()]
    listing = tmp / "replaced.txt"
    listing.write_text("".join(f"{p}\n" for p in old))
    backup = tmp / "backup"
    floor_apply = [
        "sh",
        "-c",
        f'cd "{tree}" && cp --parents -p $(cat "{listing}") "{backup}" && git apply "{patch}"',
    ]

    def ours() -> tuple[float, float, float, float]:
        apply, rollback = (
            timed(pk(ws, "apply", "release"), env),
            timed(pk(ws, "rollback", "--to", "baseline"), env),
        )
        return (*apply, *rollback)

    def floor() -> tuple[float, float, float, float]:
        shutil.rmtree(backup, ignore_errors=True)
        backup.mkdir()
        subprocess.run(["git", "-C", str(tree), "clean", "-qfdx"], check=True)
        apply = timed(floor_apply, env)
        return (*apply, *timed(["git", "-C", str(tree), "apply", "-R", str(patch)], env))

    ours()  # one pair each untimed: the page cache warm for both alike
    floor()
    mine, peer = interleaved([ours, floor], PAIRS)
    files = len(list((ws / "patchsets" / "release").glob("*.patch")))
    assert (venv / SITE_REL / "sglang").is_dir()
    return [
        row(
            "apply the 0.5.22->0.5.23 release diff",
            mine[0],
            "git apply + a copy of the replaced files",
            peer[0],
            2.0,
            note=f"{len(old)} files replaced, {files} .patch files; " + cpu_note(mine[1], peer[1]),
        ),
        row(
            "rollback --to baseline of it",
            mine[2],
            "git apply -R",
            peer[2],
            kind="report",
            note=cpu_note(mine[3], peer[3]),
        ),
    ]
