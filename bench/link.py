"""A host behind a slow link: the test sshd on 127.0.0.1, the delay proxy before it, SSH aliases through it,
and the CPU that the controller's processes spend (the command, and the SSH holders it leaves running)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from common import PK, REPO, run_usage
from proxy import DelayProxy

sys.path.insert(0, str(REPO / "tests"))
from sshd import Sshd, write_client_config  # noqa: E402

CONTROLLER = str(Path(PK).parent.parent) + "/"  # the controller's processes run patchkeeper's venv's interpreter


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
            f.write(f"\nHost {name}\n  HostName 127.0.0.1\n  Port {self.proxy.port}\n  User root\n"
                    f"  IdentityFile {self.sshd.client_key}\n")
        return name

    def ssh_command(self) -> str:
        """The ssh command line through the proxy, for rsync -e."""
        return (f"ssh -p {self.proxy.port} -i {self.sshd.client_key} -o BatchMode=yes "
                f"-o UserKnownHostsFile={self.home}/.ssh/known_hosts")

    def close(self) -> None:
        subprocess.run([PK, "disconnect", "--all"], env=self.env, capture_output=True)
        self.proxy.close()
        self.sshd.stop()


def _controller_cpu() -> dict[int, float]:
    """CPU seconds so far of every controller process but this one: the SSH holders a command leaves."""
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0].decode(errors="replace")
            if not argv0.startswith(CONTROLLER):
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(pid)] = sum(int(x) for x in fields[11:15]) / hz
    return out


def measured(argv: list[str], env: dict[str, str], proxy: DelayProxy,
             ok: tuple[int, ...] = (0, 1)) -> dict[str, Any]:
    """One run of a command: wall time, the controller's CPU (the command's own and its children's,
    and what the holders spent meanwhile), and the proxy's round trips and bytes."""
    before_cpu = _controller_cpu()
    trips, up, down = proxy.counts()
    took, usage = run_usage(argv, env, ok)
    after_cpu = _controller_cpu()
    trips2, up2, down2 = proxy.counts()
    holders = sum(cpu - before_cpu.get(pid, 0.0) for pid, cpu in after_cpu.items())
    return {"wall": took, "cpu": usage.ru_utime + usage.ru_stime + holders, "round_trips": trips2 - trips,
            "bytes": up2 - up + down2 - down}
