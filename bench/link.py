"""A host behind a slow link: the test sshd on 127.0.0.1, the delay proxy before it, SSH aliases through it,
and the CPU and memory the controller's processes spend (the command, and the SSH holders it leaves running)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from common import PK, REPO
from proxy import DelayProxy

sys.path.insert(0, str(REPO / "tests"))
from sshd import Sshd, write_client_config  # noqa: E402


class Link:
    """An sshd and a DelayProxy before it; aliases added with `alias` reach the sshd through the proxy."""

    def __init__(self, tmp: Path, env: dict[str, str], delay: float = 0.010) -> None:
        self.sshd = Sshd.start(tmp / "sshd")
        self.proxy = DelayProxy(self.sshd.port, delay)
        self.home = tmp / "home"
        self.home.mkdir(exist_ok=True)
        write_client_config(self.home, self.sshd, [])
        with (self.home / ".ssh" / "known_hosts").open("a") as f:
            f.write(self.sshd.host_key_line().replace(f"]:{self.sshd.port} ", f"]:{self.proxy.port} "))
        self.env = {**env, "HOME": str(self.home)}

    def alias(self, name: str) -> str:
        with (self.home / ".ssh" / "config").open("a") as f:
            f.write(
                f"\nHost {name}\n  HostName 127.0.0.1\n  Port {self.proxy.port}\n  User root\n"
                f"  IdentityFile {self.sshd.client_key}\n"
            )
        return name

    def ssh_command(self) -> str:
        """The ssh command line through the proxy, for rsync -e."""
        return (
            f"ssh -p {self.proxy.port} -i {self.sshd.client_key} -o BatchMode=yes "
            f"-o UserKnownHostsFile={self.home}/.ssh/known_hosts"
        )

    def close(self) -> None:
        subprocess.run([PK, "disconnect", "--all"], env=self.env, capture_output=True)
        self.proxy.close()
        self.sshd.stop()


def _processes() -> dict[int, tuple[int, str, list[str]]]:
    """pid -> (parent pid, the stat fields after the name, argv) of every process that can be read."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        out[int(pid)] = (int(fields[1]), " ".join(fields), argv)
    return out


def _kept(argv: list[str], marks: tuple[str, ...]) -> bool:
    """A process the controller keeps between commands: a holder of this run (its spec names this run's
    socket directory) or an ssh ControlPersist master of this run's Ansible (its ControlPath)."""
    line = " ".join(argv)
    held = "patchkeeper.targets.holder" in line or os.path.basename(argv[0]) == "ssh"
    return held and any(mark in line for mark in marks)


def controller(root: int | None, marks: tuple[str, ...]) -> dict[int, tuple[float, int]]:
    """pid -> (CPU seconds so far, RSS bytes) of the controller's processes: `root` and its descendants,
    and the processes it keeps (_kept). Not the sshd nor the agents on the "hosts" (this machine too)."""
    procs = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    chosen = {pid for pid, (_, _, argv) in procs.items() if _kept(argv, marks)}
    stack = [root] if root is not None and root in procs else []
    while stack:
        pid = stack.pop()
        chosen.add(pid)
        stack.extend(c for c in children.get(pid, []) if "sshd" not in procs[c][2][0])
    hz, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    out = {}
    for pid in chosen:
        fields = procs[pid][1].split()
        out[pid] = (
            sum(int(x) for x in fields[11:13]) / hz,
            int(fields[21]) * page,
        )  # utime, stime; rss pages
    return out


def hosts_cpu(root: int) -> float:
    """CPU seconds the "hosts" have spent so far: the sshd `root` and every process below it (its
    sessions, the agents they run), each with the time of its children it has reaped, so that a
    session or an agent that ended is still counted (in its parent's)."""
    procs = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    total, stack = 0, [root] if root in procs else []
    while stack:
        pid = stack.pop()
        fields = procs[pid][1].split()
        total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
        stack.extend(children.get(pid, []))
    return total / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> float:
    """CPU seconds every core of this machine has been busy so far (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def kept_pss(marks: tuple[str, ...]) -> tuple[int, int]:
    """(PSS bytes, count) of the processes the controller keeps between commands (_kept): the memory
    they cost, each shared page counted once across them (smaps_rollup's Pss)."""
    total, count = 0, 0
    for pid, (_, _, argv) in _processes().items():
        if not _kept(argv, marks):
            continue
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                pss = next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue
        total, count = total + pss * 1024, count + 1
    return total, count


class _Peak(threading.Thread):
    """Samples the controller's resident memory (the sum over its processes) while a command runs."""

    def __init__(self, pid: int, marks: tuple[str, ...]) -> None:
        super().__init__(daemon=True)
        self.pid, self.marks, self.peak, self.most = pid, marks, 0, 0
        self.stop = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            procs = controller(self.pid, self.marks)
            self.peak = max(self.peak, sum(rss for _, rss in procs.values()))
            self.most = max(self.most, len(procs))


def measured(
    argv: list[str],
    env: dict[str, str],
    proxy: DelayProxy,
    ok: tuple[int, ...] = (0, 1),
    hosts: int | None = None,
) -> dict[str, Any]:
    """One run of a command: wall time, the controller's CPU (the command's own and its children's,
    and what the processes it keeps spent meanwhile), its peak resident memory (every process of it,
    kept ones included), and the proxy's round trips and bytes. With `hosts` (the sshd's pid) also
    the CPU the hosts spent meanwhile (hosts_cpu), the proxy's (the link's), every core's (busy, all
    processes of the machine, other sessions' too) and the load average before and after."""
    marks = (env["XDG_RUNTIME_DIR"],) + (
        (env["ANSIBLE_SSH_CONTROL_PATH_DIR"],) if "ANSIBLE_SSH_CONTROL_PATH_DIR" in env else ()
    )
    before_cpu = controller(None, marks)
    trips, up, down = proxy.counts()
    load, hosts_before, link_before, busy_before = os.getloadavg()[0], 0.0, proxy.cpu(), machine_cpu()
    if hosts is not None:
        hosts_before = hosts_cpu(hosts)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = _Peak(proc.pid, marks)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - start
    peak.stop.set()
    peak.join()
    code = os.waitstatus_to_exitcode(status)
    if code not in ok:
        raise RuntimeError(f"{' '.join(argv)} exited {code}: {err.decode(errors='replace')[-800:]}")
    after_cpu = controller(None, marks)
    trips2, up2, down2 = proxy.counts()
    kept = sum(cpu - before_cpu.get(pid, (0.0, 0))[0] for pid, (cpu, _) in after_cpu.items())
    sides = {}
    if hosts is not None:
        sides = {
            "hosts_cpu": hosts_cpu(hosts) - hosts_before,
            "link_cpu": proxy.cpu() - link_before,
            "machine_cpu": machine_cpu() - busy_before,
            "load": (load, os.getloadavg()[0]),
        }
    return {
        **sides,
        "wall": took,
        "cpu": usage.ru_utime + usage.ru_stime + kept,
        "round_trips": trips2 - trips,
        "bytes": up2 - up + down2 - down,
        "peak_rss": peak.peak,
        "processes": peak.most,
    }


def ansible_inventory(tmp: Path, ws: Path, link: Link, names: list[str]) -> tuple[Path, dict[str, str]]:
    """An inventory of `names`, every host 127.0.0.1 through the link's proxy, and the environment for
    ansible-playbook (the collection from this checkout, the workspace `ws`)."""
    proxy = link.proxy
    inventory = tmp / "hosts.yml"
    inventory.write_text(
        json.dumps(
            {
                "fleet": {
                    "vars": {
                        "ansible_host": "127.0.0.1",
                        "ansible_port": proxy.port,
                        "ansible_user": "root",
                        "ansible_ssh_private_key_file": str(link.sshd.client_key),
                        "ansible_python_interpreter": sys.executable,
                        "ansible_ssh_common_args": f"-o UserKnownHostsFile={link.home}/.ssh/known_hosts",
                        "patchkeeper": {},
                    },
                    "hosts": {n: None for n in names},
                }
            }
        )
    )
    return inventory, {
        **link.env,
        "ANSIBLE_COLLECTIONS_PATH": str(REPO),
        "ANSIBLE_HOME": str(tmp / "ansible"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp / "cp"),
        "ANSIBLE_LOCAL_TEMP": str(tmp / "atmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "PATCHKEEPER_WORKSPACE": str(ws),
    }
