"""The README's first hour on the serving environment: the first `apply` after the first `audit`, and
the first `audit` after the first `apply`, each beside the same command on a copy that ran nothing before.

A first change records a baseline whose environment fingerprint checks every other distribution
against its RECORD, as an audit does; each takes the answers the other sealed while they hold
(host/distcheck.RecordSeals' `also`). Each figure is one run on a fresh hardlinked copy of the serving
venv (a first command happens once), the two copies of a pair in turns, twice; the better of each.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from common import RACY, SERVE, copy_venv, cpu_note, pk, row, run, timed, workspace

TRIES = 2


def _fresh(tmp: Path, name: str) -> Path:
    """A workspace whose one target is a new hardlinked copy of the serving venv, at rest."""
    venv = copy_venv(SERVE, tmp / f"{name}-venv", link=True)
    ws = workspace(tmp / f"{name}-ws", {"serve": {"python": f"{venv}/bin/python"}})
    os.sync()
    time.sleep(RACY)  # the links moved every file's ctime: past the racy window, as on a host at rest
    return ws


def _second(
    tmp: Path, name: str, env: dict[str, str], first: list[str], second: list[str]
) -> tuple[float, float]:
    """(wall, CPU) of `second` run right after `first` on a fresh copy."""
    ws = _fresh(tmp, name)
    run(pk(ws, *first), env, ok=(0, 1))
    time.sleep(RACY)
    return timed(pk(ws, *second), env, ok=(0, 1))


def _alone(tmp: Path, name: str, env: dict[str, str], command: list[str]) -> tuple[float, float]:
    """(wall, CPU) of `command` as the first command on a fresh copy."""
    return timed(pk(_fresh(tmp, name), *command), env, ok=(0, 1))


def main(tmp: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    apply, audit = ["apply", "ddtree"], ["audit", "-q"]
    after_audit, apply_alone, after_apply, audit_alone = [], [], [], []
    for i in range(TRIES):
        after_audit.append(_second(tmp, f"aa{i}", env, audit, apply))
        apply_alone.append(_alone(tmp, f"ap{i}", env, apply))
        after_apply.append(_second(tmp, f"pa{i}", env, apply, audit))
        audit_alone.append(_alone(tmp, f"au{i}", env, audit))
    pairs = [
        (
            "the first apply ddtree, after the first audit",
            after_audit,
            "the first apply ddtree, nothing before it",
            apply_alone,
        ),
        (
            "the first audit, after the first apply ddtree",
            after_apply,
            "the first audit, nothing before it",
            audit_alone,
        ),
    ]
    return [
        row(
            measure,
            min(ours)[0],
            peer,
            min(theirs)[0],
            kind="report",
            note=cpu_note(min(ours)[1], min(theirs)[1]),
        )
        for measure, ours, peer, theirs in pairs
    ]
