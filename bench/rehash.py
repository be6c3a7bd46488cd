"""`audit --rehash` of the bare sglang venv against the sha256 floor of the files it reads (issue 40).

Runnable alone: `python bench/run.py rehash`. --rehash reads and hashes every file of site-packages
again and compares every pyc with its source; a source is compiled once per pair of bytes (the
pairs kept in audit/bytecode.compared, host/pycompare.py). The first --rehash after the baseline
compiles them all and is its own row (a report); the goal row is the steady state, in turns with
the floor: sha256 through OpenSSL of every regular file of the same site-packages, pycs included
(what --rehash must read), one process per CPU (bench/floor.py). Then the first --rehash of two more
copies (two more hosts of a fleet) with the release's wheel in the workspace's wheels directory: the
first makes the release's code digests (its sources compiled on the controller, checks/release_code.py),
the second finds them in the user cache, as every later host of a fleet does."""

from __future__ import annotations

import ensurepip
import os
import shutil
from pathlib import Path
from typing import Any

from common import (
    BARE,
    REPO,
    SITE_REL,
    copy_venv,
    cpu_note,
    interleaved,
    load_note,
    pk,
    row,
    run,
    timed,
    workspace,
)
from local import FLOOR

PAIRS = 3
GOAL = 3.0


def every_file(site: Path, out: Path) -> int:
    """Write the floor's listing: every regular file below `site`, largest first; the count."""
    sized = []
    for root, _, names in os.walk(site):
        for name in names:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                sized.append((os.path.getsize(path), path))
    sized.sort(reverse=True)
    out.write_text("".join(f"{path}\n" for _, path in sized))
    return len(sized)


def main(tmp: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    hosts = ("rehash", "second", "third")
    venvs = {h: copy_venv(BARE, tmp / f"rehash-venv-{h}", link=False) for h in hosts}
    venv = venvs["rehash"]
    ws = workspace(tmp / "ws-rehash", {h: {"python": f"{v}/bin/python"} for h, v in venvs.items()})
    for h in hosts:
        run(pk(ws, "snapshot", "-t", h, "--name", "start", "--manifest-only"), env)
    floor_list = tmp / "rehash-files.txt"
    files = every_file(venv / SITE_REL, floor_list)
    floor = FLOOR + [str(floor_list)]
    rehash = pk(ws, "audit", "-q", "--rehash", "-t", "rehash")
    run(floor)  # every file read once, for both sides alike
    started = os.getloadavg()[0]
    first = timed(rehash, env, ok=(0, 1))  # no pair kept yet: every pyc's source compiled
    first_floor = timed(floor)
    first_note = cpu_note(first[1], first_floor[1]) + ", " + load_note(started)
    started = os.getloadavg()[0]
    ours, peer = interleaved([lambda: timed(rehash, env, ok=(0, 1)), lambda: timed(floor)], PAIRS)
    release = _with_release_digests(tmp, ws, env, floor)
    return [
        row(
            "audit --rehash, bare sglang",
            ours[0],
            f"sha256 floor of its {files} files",
            peer[0],
            GOAL,
            note=cpu_note(ours[1], peer[1]) + ", " + load_note(started),
        ),
        row(
            "the first audit --rehash (no pair compared yet)",
            first[0],
            "the same floor",
            first_floor[0],
            kind="report",
            note=first_note,
        ),
        *release,
    ]


def _with_release_digests(tmp: Path, ws: Path, env: dict[str, str], floor: list[str]) -> list[dict[str, Any]]:
    """The first --rehash of the second and of the third copy, the release's wheel in the workspace's wheels
        directory (sglang's, and the venv's pip and setuptools as ensurepip bundles them): the second makes the
    releases' code digests (none in the user cache), the third finds them."""
    wheels = tmp / "rehash-wheels"
    wheels.mkdir()
    site = BARE / SITE_REL
    bundled = Path(ensurepip.__file__).parent / "_bundled"  # the venv's pip and setuptools, as it got them
    for wheel in [*(REPO / ".cache" / "wheels").glob("sglang-0.5.23-*.whl"), *bundled.glob("*.whl")]:
        if (site / ("-".join(wheel.name.split("-")[:2]) + ".dist-info")).is_dir():
            shutil.copy(wheel, wheels / wheel.name)
    toml = ws / "patchkeeper.toml"
    toml.write_text(f'wheels = "{wheels}"\n' + toml.read_text())
    shutil.rmtree(Path(env["XDG_CACHE_HOME"]) / "patchkeeper" / "release-code", ignore_errors=True)
    rows = []
    for host, what in (
        ("second", "the first audit --rehash of a second host, the release's code digests made for it"),
        ("third", "the first audit --rehash of a third host, the release's code digests kept"),
    ):
        started = os.getloadavg()[0]
        ours = timed(pk(ws, "audit", "-q", "--rehash", "-t", host), env, ok=(0, 1))
        peer = timed(floor)
        rows.append(
            row(
                what,
                ours[0],
                "the same floor",
                peer[0],
                kind="report",
                note=cpu_note(ours[1], peer[1]) + ", " + load_note(started),
            )
        )
    return rows
