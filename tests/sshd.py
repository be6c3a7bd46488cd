"""A real OpenSSH sshd on 127.0.0.1 for remote-target tests and benchmarks, keys made in a tmp dir.

`Sshd.start(dir)` generates a host key and a client key with ssh-keygen, writes an sshd_config
that only listens on 127.0.0.1 at a free port and only accepts that client key, and runs
/usr/sbin/sshd in the foreground. `write_client_config(home, sshd, hosts)` gives a HOME an
~/.ssh/config with one alias per host, the client key and a known_hosts entry.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "patchkeeper-test", "-f", str(path)], check=True
    )
    return path


@dataclass
class Sshd:
    dir: Path
    port: int
    host_key: Path
    client_key: Path
    proc: subprocess.Popen

    @classmethod
    def start(cls, directory: Path) -> Sshd:
        if not os.access(SSHD, os.X_OK) or not os.path.isdir("/run/sshd"):
            pytest.fail(f"{SSHD} (and /run/sshd) missing: run `make sshd`, which installs openssh-server")
        directory.mkdir(parents=True, exist_ok=True)
        host_key = keygen(directory / "host_ed25519")
        client_key = keygen(directory / "client_ed25519")
        (directory / "authorized_keys").write_bytes(client_key.with_suffix(".pub").read_bytes())
        for _attempt in range(5):
            port = free_port()
            config = directory / "sshd_config"
            config.write_text(
                "\n".join(
                    [
                        f"Port {port}",
                        "ListenAddress 127.0.0.1",
                        f"HostKey {host_key}",
                        f"PidFile {directory / 'sshd.pid'}",
                        f"AuthorizedKeysFile {directory / 'authorized_keys'}",
                        "UsePAM no",
                        "StrictModes no",
                        "PasswordAuthentication no",
                        "KbdInteractiveAuthentication no",
                        "PubkeyAuthentication yes",
                        "PermitRootLogin prohibit-password",
                        "AllowTcpForwarding yes",
                        "MaxSessions 100",
                        "MaxStartups 100:30:200",
                        "LogLevel INFO",
                        "PrintMotd no",
                        "UseDNS no",
                        "",
                    ]
                )
            )
            proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config), "-E", str(directory / "sshd.log")])
            for _ in range(200):
                if proc.poll() is not None:
                    break
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    return cls(directory, port, host_key, client_key, proc)
                except OSError:
                    time.sleep(0.02)
            proc.kill()
            proc.wait()
        raise RuntimeError(f"sshd did not start: {(directory / 'sshd.log').read_text(errors='replace')}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def host_key_line(self) -> str:
        kind, blob = self.host_key.with_suffix(".pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {blob}\n"


def write_client_config(
    home: Path, sshd: Sshd, aliases: list[str], extra: str = "", known_hosts: bool = True
) -> Path:
    """~/.ssh/config with each alias -> the test sshd, and its host key in ~/.ssh/known_hosts."""
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    blocks = [
        f"Host {alias}\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n"
        f"  IdentityFile {sshd.client_key}\n"
        for alias in aliases
    ]
    (ssh / "config").write_text("\n".join(blocks) + extra)
    if known_hosts:
        (ssh / "known_hosts").write_text(sshd.host_key_line())
    return ssh


def accepted(sshd: Sshd) -> int:
    """How many SSH connections the sshd has accepted so far (LogLevel INFO logs each login)."""
    log = sshd.dir / "sshd.log"
    return log.read_text(errors="replace").count("Accepted publickey") if log.exists() else 0


def agent_session_pid(agent_pid: int) -> int:
    """The sshd process that serves the connection a remote agent runs under (its nearest sshd)."""
    pid = agent_pid
    while pid > 1:
        stat = Path(f"/proc/{pid}/stat").read_text()
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if comm.startswith("sshd") and pid != agent_pid:
            return pid
        pid = ppid
    raise LookupError(f"no sshd above pid {agent_pid}")


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> Sshd:
    server = Sshd.start(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()
