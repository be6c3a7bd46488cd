"""Issue 35's rows: a fleet of 100 SSH targets beside 16, behind the same 10 ms link, one sshd with an
alias per target, each a hardlinked copy of the bare sglang venv.

For both ways of reaching the hosts, held connections (one controller process holding every
target's connection, `persist` 60, the default) and none (`persist = 0`: each command connects and
starts its agents itself): `audit --all` at 16 and at 100 targets, and `apply ddtree --all --serial 10`
at 100; each with the controller's peak resident memory (the command, its children and every process
it keeps: the controller, Ansible's ssh masters) and its CPU per target, and with held connections the
PSS of the processes kept between commands once they hold 16 and 100 targets. Then the same play
through ansible-playbook -f 10 (`serial: 10`). The goals (issue 40): kept memory <= 5 MB PSS per held
target, `audit --all` at 100 <= 3x its time at 16. Beside each audit, its floor in the same run: the
CPU the hosts spent on it (the sshd, its sessions and the agents, all on this machine's cores) over
the number of cores, with the link's CPU, every core's and the load. `PK_BENCH_AUDITS_ONLY=1` measures the audits and
the memory alone (no apply, no Ansible).
"""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import BARE, PK, RACY, copy_venv, pk, row, run, workspace
from link import Link, ansible_inventory, kept_pss, measured

SIZES = (16, 100)
SERIAL = 10
RUNS = 2
MB = 1e6


def main(tmp: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    link = Link(tmp, env)
    try:
        return _measure(tmp, link)
    finally:
        link.close()


def _workspace(root: Path, targets: dict[str, dict[str, str]], persist: float) -> Path:
    ws = workspace(root, targets)
    toml = ws / "patchkeeper.toml"
    toml.write_text(f"persist = {persist:g}\n" + toml.read_text())
    return ws


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return min(runs, key=lambda r: r["wall"])


def _load(*runs: dict[str, Any]) -> str:
    """The load average over the runs (the lowest at a start and the highest at an end)."""
    return f"load {min(r['load'][0] for r in runs):.1f}-{max(r['load'][1] for r in runs):.1f}"


def _disconnect(link: Link) -> None:
    subprocess.run([PK, "disconnect", "--all"], env=link.env, capture_output=True)


def _measure(tmp: Path, link: Link) -> list[dict[str, Any]]:
    env, proxy = link.env, link.proxy
    source = copy_venv(BARE, tmp / "fleet-src", link=False)
    names = [f"h{i:03d}" for i in range(max(SIZES))]
    targets = {}
    for name in names:
        venv = copy_venv(source, tmp / f"fleet-{name}", link=True)
        targets[name] = {"ssh": link.alias(f"fleet-{name}"), "python": f"{venv}/bin/python"}
    spaces = {
        (n, persist): _workspace(tmp / f"ws-{n}-{persist}", {k: targets[k] for k in names[:n]}, persist)
        for n in SIZES
        for persist in (60, 0)
    }
    start = spaces[(max(SIZES), 0)]
    with ThreadPoolExecutor(4) as pool:  # a recorded state on each; four at a time (two cores, loaded)
        list(
            pool.map(
                lambda n: run(pk(start, "snapshot", "-t", n, "--name", "start", "--manifest-only"), env),
                names,
            )
        )
    os.sync()
    time.sleep(RACY)
    for _ in range(2):
        run(pk(start, "audit", "--all", "-q"), env, ok=(0, 1))
        time.sleep(RACY)

    rows: list[dict[str, Any]] = []
    audits: dict[tuple[int, int], dict[str, Any]] = {}
    kept: dict[int, tuple[int, int]] = {}
    marks = (env["XDG_RUNTIME_DIR"],)
    hosts, cores = link.sshd.proc.pid, os.cpu_count() or 1
    for persist, how in ((60, "held connections"), (0, "no held connections")):
        for n in SIZES:
            ws = spaces[(n, persist)]
            run(pk(ws, "audit", "--all", "-q"), env, ok=(0, 1))  # connections held (persist), caches warm
            audits[(n, persist)] = _best(
                [measured(pk(ws, "audit", "--all", "-q"), env, proxy, hosts=hosts) for _ in range(RUNS)]
            )
            if persist:
                kept[n] = kept_pss(marks)  # what stays between commands, holding these n targets
        small, large = audits[(SIZES[0], persist)], audits[(SIZES[1], persist)]
        rows += [
            row(
                f"audit --all, {SIZES[1]} vs {SIZES[0]} targets ({how})",
                large["wall"],
                f"audit --all, {SIZES[0]} targets",
                small["wall"],
                goal=3.0 if persist else None,
                kind="goal" if persist else "report",
                note=f"{large['round_trips']} vs {small['round_trips']} round trips; "
                f"hosts' CPU {large['hosts_cpu']:.2f} s vs {small['hosts_cpu']:.2f} s; {_load(large, small)}",
            ),
            *(
                row(
                    f"audit --all of {m} ({how}) vs its floor, the hosts' CPU over {cores} cores",
                    a["wall"],
                    "the hosts' CPU (sshd, agents) / cores",
                    a["hosts_cpu"] / cores,
                    kind="report",
                    note=f"hosts {a['hosts_cpu']:.2f} s, controller {a['cpu']:.2f} s, link {a['link_cpu']:.2f} s, "
                    f"every core {a['machine_cpu']:.2f} s (other sessions' too) in {a['wall']:.2f} s; "
                    f"load {a['load'][0]:.1f}-{a['load'][1]:.1f}",
                )
                for m, a in ((SIZES[1], large), (SIZES[0], small))
            ),
            row(
                f"the hosts' CPU, audit --all of {SIZES[1]} vs {SIZES[0]} targets ({how})",
                large["hosts_cpu"],
                f"the same at {SIZES[0]}",
                small["hosts_cpu"],
                kind="report",
                note=f"per target {large['hosts_cpu'] / SIZES[1]:.3f} s vs {small['hosts_cpu'] / SIZES[0]:.3f} s",
            ),
            row(
                f"controller peak RSS per target, audit --all of {SIZES[1]} ({how})",
                large["peak_rss"] / SIZES[1] / MB,
                unit="MB",
                kind="report",
                note=f"peak {large['peak_rss'] / MB:.0f} MB over {large['processes']} process(es); "
                f"at {SIZES[0]}: {small['peak_rss'] / SIZES[0] / MB:.1f} MB per target",
            ),
            row(
                f"controller CPU per target, audit --all of {SIZES[1]} ({how})",
                large["cpu"] / SIZES[1],
                f"the same at {SIZES[0]}",
                small["cpu"] / SIZES[0],
                kind="report",
            ),
        ]
        if persist:
            (pss, procs), (pss16, procs16) = kept[SIZES[1]], kept[SIZES[0]]
            rows.append(
                row(
                    f"controller memory, {SIZES[1]} held targets (PSS per target of every process kept)",
                    pss / SIZES[1] / MB,
                    unit="MB",
                    goal=5.0,
                    note=f"{pss / MB:.0f} MB PSS in {procs} process(es); at {SIZES[0]}: "
                    f"{pss16 / MB:.0f} MB in {procs16}, {pss16 / SIZES[0] / MB:.1f} MB per target",
                )
            )
        if os.environ.get("PK_BENCH_AUDITS_ONLY"):
            _disconnect(link)
            continue
        ws = spaces[(SIZES[1], persist)]
        applied = measured(pk(ws, "apply", "ddtree", "--all", "--serial", str(SERIAL)), env, proxy, ok=(0,))
        run(pk(ws, "rollback", "--to", "baseline", "--all", "--serial", str(SERIAL)), env)
        rows += [
            row(
                f"apply ddtree --all --serial {SERIAL}, {SIZES[1]} targets ({how})",
                applied["wall"],
                kind="report",
                note=f"{applied['round_trips']} round trips; controller CPU per target "
                f"{applied['cpu'] / SIZES[1]:.2f} s; peak memory "
                f"{applied['peak_rss'] / MB:.0f} MB, "
                f"{applied['peak_rss'] / SIZES[1] / MB:.1f} MB per target",
            )
        ]
        _disconnect(link)
    if not os.environ.get("PK_BENCH_AUDITS_ONLY"):
        rows += _ansible(tmp, spaces[(SIZES[1], 0)], link, names)
    return rows


def _ansible(tmp: Path, ws: Path, link: Link, names: list[str]) -> list[dict[str, Any]]:
    """The same change as a play of patchkeeper.core.patchset, `serial: 10`, `-f 10`, over Ansible's ssh
    connection through the same link (one ControlPersist master per host)."""
    playbook = Path(PK).parent / "ansible-playbook"
    if not playbook.exists():
        return [
            row(
                "apply ddtree through Ansible", 0.0, kind="report", note="PENDING: ansible-core not installed"
            )
        ]
    env, proxy = link.env, link.proxy
    inventory, ansible_env = ansible_inventory(tmp, ws, link, names)
    play = tmp / "play.yml"
    play.write_text(
        f"- hosts: fleet\n  gather_facts: false\n  serial: {SERIAL}\n  tasks:\n"
        "    - patchkeeper.core.patchset: {name: ddtree}\n"
    )
    m = measured(
        [str(playbook), "-i", str(inventory), "-f", str(SERIAL), str(play)], ansible_env, proxy, ok=(0,)
    )
    run(pk(ws, "rollback", "--to", "baseline", "--all", "--serial", str(SERIAL)), env)
    return [
        row(
            f"apply ddtree through Ansible (serial: {SERIAL}, -f {SERIAL}), {len(names)} targets",
            m["wall"],
            kind="report",
            note=f"{m['round_trips']} round trips; controller CPU per target "
            f"{m['cpu'] / len(names):.2f} s; peak memory {m['peak_rss'] / MB:.0f} MB, "
            f"{m['peak_rss'] / len(names) / MB:.1f} MB per target (ssh masters included)",
        )
    ]
