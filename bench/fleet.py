"""Issue 25's row: 16 SSH targets behind the 10 ms link, `audit --all` and a one-host-at-a-time apply
against the same done one target after another, and the controller's own CPU per target.

Each target is its own copy of the bare sglang venv (hardlinked to one real copy) under its own SSH
alias, so each has its own connection, holder and agent. The serving venv is not used here: the
16 hosts' own work would run on this machine's two cores, one after another, and measure them, not
the controller. `apply --all --serial 1` is measured once `apply --help` offers `--serial`; until
then its row says it is pending. Beside it, the same change as a play of the patchkeeper.core.patchset
module through ansible-playbook -f 16 (serial: 1, and all at once against `apply --all --serial 16`).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from common import BARE, PK, RACY, copy_venv, pk, row, run, workspace
from link import Link, ansible_inventory, measured

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
    each = _best(
        [_sum([measured(pk(ws, "audit", "-q", "-t", n), env, proxy) for n in names]) for _ in range(RUNS)]
    )
    rows = [
        row(
            f"audit --all, {HOSTS} SSH targets",
            every["wall"],
            "audit -t each, one after another",
            each["wall"],
            kind="report",
            note=f"{every['round_trips']} vs {each['round_trips']} round trips",
        ),
        row(
            "controller CPU per target: audit --all",
            every["cpu"] / HOSTS,
            "audit -t each, one after another",
            each["cpu"] / HOSTS,
            kind="report",
        ),
    ]

    def one_by_one(verb: list[str]) -> dict[str, Any]:
        return _sum([measured(pk(ws, *verb, "-t", n), env, proxy, ok=(0,)) for n in names])

    applied = one_by_one(["apply", "ddtree"])
    one_by_one(["rollback", "--to", "baseline"])
    serial = (
        "--serial" in subprocess.run([PK, "apply", "--help"], capture_output=True, text=True, env=env).stdout
    )
    if serial:
        at_once = measured(pk(ws, "apply", "ddtree", "--all", "--serial", "1"), env, proxy, ok=(0,))
        one_by_one(["rollback", "--to", "baseline"])
        rows += [
            row(
                f"apply ddtree --all --serial 1, {HOSTS} SSH targets",
                at_once["wall"],
                "apply -t each, one after another",
                applied["wall"],
                kind="report",
                note=f"{at_once['round_trips']} vs {applied['round_trips']} round trips",
            ),
            row(
                "controller CPU per target: apply --all --serial 1",
                at_once["cpu"] / HOSTS,
                "apply -t each, one after another",
                applied["cpu"] / HOSTS,
                kind="report",
            ),
        ]
        rows += _ansible(tmp, ws, link, names, at_once)
    else:
        rows += [
            row(
                f"apply ddtree -t each, one after another, {HOSTS} SSH targets",
                applied["wall"],
                kind="report",
                note="PENDING: apply --all --serial 1 is measured against this once `apply --serial` exists",
            ),
            row(
                "controller CPU per target: apply -t each, one after another",
                applied["cpu"] / HOSTS,
                kind="report",
            ),
        ]
    return rows


def _ansible(tmp: Path, ws: Path, link: Link, names: list[str], ours: dict[str, Any]) -> list[dict[str, Any]]:
    """The same change as a play of patchkeeper.core.patchset (`serial: 1`, then all at once), `-f 16`,
    over Ansible's ssh connection through the same link: one ControlPersist connection per host."""
    playbook = Path(PK).parent / "ansible-playbook"
    if not playbook.exists():
        return [
            row(
                "apply ddtree through Ansible", 0.0, kind="report", note="PENDING: ansible-core not installed"
            )
        ]
    env, proxy = link.env, link.proxy
    inventory, ansible_env = ansible_inventory(tmp, ws, link, names)
    rows = []
    for serial, label in (("1", "serial: 1"), (str(len(names)), "all at once")):
        play = tmp / "play.yml"
        play.write_text(
            f"- hosts: fleet\n  gather_facts: false\n  serial: {serial}\n  tasks:\n"
            "    - patchkeeper.core.patchset: {name: ddtree}\n"
        )
        m = measured(
            [str(playbook), "-i", str(inventory), "-f", str(len(names)), str(play)],
            ansible_env,
            proxy,
            ok=(0,),
        )
        run(pk(ws, "rollback", "--to", "baseline", "--all", "--serial", str(len(names))), env)
        rows.append(
            row(
                f"apply ddtree through Ansible ({label}, -f {len(names)}), {len(names)} SSH targets",
                m["wall"],
                "apply --all --serial 1",
                ours["wall"],
                kind="report",
                note=f"{m['round_trips']} round trips; controller CPU per target {m['cpu'] / len(names):.2f} s",
            )
        )
        if serial != "1":
            fast = measured(
                pk(ws, "apply", "ddtree", "--all", "--serial", str(len(names))), env, proxy, ok=(0,)
            )
            run(pk(ws, "rollback", "--to", "baseline", "--all", "--serial", str(len(names))), env)
            rows.append(
                row(
                    f"apply ddtree --all --serial {len(names)}, {len(names)} SSH targets",
                    fast["wall"],
                    f"Ansible, all at once, -f {len(names)}",
                    m["wall"],
                    kind="report",
                    note=f"{fast['round_trips']} round trips; controller CPU per target "
                    f"{fast['cpu'] / len(names):.2f} s",
                )
            )
    return rows
