"""What each cache saves on the serving environment: a command with every cache warm against the same
command with one cache deleted before each run, in turns (issue 31: keep a cache only for a figure a
user would feel). The digest cache (statcache.json) and the held SSH connection have their own rows."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import RACY, SERVE, copy_venv, interleaved, pk, row, run, timed, workspace

PAIRS = 3
SEALS = ("audit/tree.seal", "audit/records.seal")


def _remove(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _globbed(root: Path, patterns: tuple[str, ...]) -> list[Path]:
    return [p for pattern in patterns for p in sorted(root.glob(pattern))]


def main(tmp: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    serve = copy_venv(SERVE, tmp / "serve", link=True)
    ws = workspace(tmp / "ws", {"serve": {"python": f"{serve}/bin/python"}})
    state, user = serve / ".patchkeeper", Path(env["XDG_CACHE_HOME"]) / "patchkeeper"
    run(pk(ws, "apply", "ddtree"), env)  # a baseline (a pack), a change, a ledger of two entries
    time.sleep(RACY)
    for args in (("audit", "-q"), ("audit", "-q"), ("env",), ("status",), ("log",)):
        run(pk(ws, *args), env, ok=(0, 1))  # every cache written, past the racily-clean window
    time.sleep(RACY)
    for args in (("audit", "-q"), ("env",), ("status",), ("log",)):
        run(pk(ws, *args), env, ok=(0, 1))
    audit, env_cmd, status, log = pk(ws, "audit", "-q"), pk(ws, "env"), pk(ws, "status"), pk(ws, "log")
    # (cache, what it is, command, what is deleted before the run with it, and before the run without it)
    cases: list[tuple[str, list[str], tuple[str, ...], tuple[str, ...]]] = [
        ("audit/tree.seal", audit, (), ("audit/tree.seal",)),
        ("audit/records.seal", audit, (), ("audit/records.seal",)),
        ("audit/bytecode.cache{,.dirs} (seals gone)", audit, SEALS, SEALS + ("audit/bytecode.cache*",)),
        ("audit/*.dist-info.json (seals gone)", audit, SEALS, SEALS + ("audit/*.dist-info*.json",)),
        ("manifest-cache/ (seals gone)", audit, SEALS, SEALS + ("manifest-cache",)),
        ("pack-cache/ (seals gone)", audit, SEALS, SEALS + ("pack-cache",)),
        ("env/ (every fingerprint cache)", env_cmd, (), ("env",)),
        ("env/native/", env_cmd, (), ("env/native",)),
        (
            "user cache: interpreters, dist-infos",
            status,
            (),
            ("@interpreter*.marshal", "@dist-infos.marshal"),
        ),
        ("user cache: ledgers/", log, (), ("@ledgers",)),
    ]
    rows = []
    for name, argv, before_with, before_without in cases:

        def prepared(patterns: tuple[str, ...]) -> Callable[[], tuple[float, float]]:
            def go() -> tuple[float, float]:
                _remove(
                    _globbed(state, tuple(p for p in patterns if not p.startswith("@")))
                    + _globbed(user, tuple(p[1:] for p in patterns if p.startswith("@")))
                )
                return timed(argv, env, ok=(0, 1))  # noqa: B023

            return go

        warm, cold = interleaved([prepared(before_with), prepared(before_without)], PAIRS)
        verb = " ".join(argv[3:])
        rows.append(
            row(
                f"{verb} without {name}",
                cold[0],
                f"{verb} with it",
                warm[0],
                kind="report",
                note=f"saves {cold[0] - warm[0]:+.3f} s wall, {cold[1] - warm[1]:+.3f} s CPU",
            )
        )
    return rows
