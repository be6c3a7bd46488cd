"""Issue 25's row: 16 SSH targets behind the 10 ms link, `audit --all` and a one-host-at-a-time apply
against the same done one target after another, and the controller's own CPU per target.

Each target is its own copy of the bare sglang venv (hardlinked to one real copy) under its own SSH
alias, so each has its own connection, holder and agent. The serving venv is not used here: the
16 hosts' own work would run on this machine's two cores, one after another, and measure them, not
the controller. `apply --all --serial 1` is measured once `apply --help` offers `--serial`; until
then its row says it is pending.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from common import BARE, PK, RACY, copy_venv, pk, row, run, workspace
from link import Link, measured

HOSTS = 16
RUNS = 2


def main(tmp: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    link = Link(tmp, env)
    try:
        return _measure(tmp, link)
    finally:
        link.close()


def _sum(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {k: sum(r[k] for r in results) for k in results[0]}


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return min(runs, key=lambda r: r["wall"])


def _measure(tmp: Path, link: Link) -> list[dict[str, Any]]:
    env, proxy = link.env, link.proxy
    source = copy_venv(BARE, tmp / "fleet-src", link=False)
    names = [f"h{i:02d}" for i in range(HOSTS)]
    targets = {}
    for name in names:
        venv = copy_venv(source, tmp / f"fleet-{name}", link=True)
        targets[name] = {"ssh": link.alias(f"fleet-{name}"), "python": f"{venv}/bin/python"}
    ws = workspace(tmp / "ws-fleet", targets)
    for name in names:
        run(pk(ws, "snapshot", "-t", name, "--name", "start", "--manifest-only"), env)
    os.sync()
    time.sleep(RACY)
    for _ in range(2):
        run(pk(ws, "audit", "--all", "-q"), env, ok=(0, 1))
        time.sleep(RACY)

    every = _best([measured(pk(ws, "audit", "--all", "-q"), env, proxy) for _ in range(RUNS)])
    each = _best([_sum([measured(pk(ws, "audit", "-q", "-t", n), env, proxy) for n in names]) for _ in range(RUNS)])
    rows = [row(f"audit --all, {HOSTS} SSH targets", every["wall"], "audit -t each, one after another",
                each["wall"], kind="report", note=f"{every['round_trips']} vs {each['round_trips']} round trips"),
            row("controller CPU per target: audit --all", every["cpu"] / HOSTS, "audit -t each, one after another",
                each["cpu"] / HOSTS, kind="report")]

    def one_by_one(verb: list[str]) -> dict[str, Any]:
        return _sum([measured(pk(ws, *verb, "-t", n), env, proxy, ok=(0,)) for n in names])

    applied = one_by_one(["apply", "ddtree"])
    one_by_one(["rollback", "--to", "baseline"])
    serial = "--serial" in subprocess.run([PK, "apply", "--help"], capture_output=True, text=True, env=env).stdout
    if serial:
        at_once = measured(pk(ws, "apply", "ddtree", "--all", "--serial", "1"), env, proxy, ok=(0,))
        one_by_one(["rollback", "--to", "baseline"])
        rows += [row(f"apply ddtree --all --serial 1, {HOSTS} SSH targets", at_once["wall"],
                     "apply -t each, one after another", applied["wall"], kind="report",
                     note=f"{at_once['round_trips']} vs {applied['round_trips']} round trips"),
                 row("controller CPU per target: apply --all --serial 1", at_once["cpu"] / HOSTS,
                     "apply -t each, one after another", applied["cpu"] / HOSTS, kind="report")]
    else:
        rows += [row(f"apply ddtree -t each, one after another, {HOSTS} SSH targets", applied["wall"], kind="report",
                     note="PENDING: apply --all --serial 1 is measured against this once `apply --serial` exists"),
                 row("controller CPU per target: apply -t each, one after another", applied["cpu"] / HOSTS,
                     kind="report")]
    return rows
