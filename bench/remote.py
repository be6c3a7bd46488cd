"""Remote diff over a loopback OpenSSH sshd: `patchkeeper diff HOST` against rsync, and bytes sent.

On the real sglang 0.5.23 tree, in one run, against the same sshd:
- `patchkeeper diff HOST` with a cold stat cache vs `rsync -a -n -c --delete` (reads every file
  on both sides)                                                               goal <= 1x
- the same with the host's stat cache warm vs `rsync -a -n --delete` (metadata)  goal <= 0.5x
- bytes crossing the connection for that diff (through a counting TCP relay)    goal < 2 MB
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import PRISTINE, REPO, SITE_REL, best, run  # noqa: E402

sys.path.insert(0, str(REPO / "tests"))

from sshd import Sshd, write_client_config  # noqa: E402

RUNS = int(os.environ.get("PK_BENCH_RUNS", "3"))


class Relay:
    """A TCP relay 127.0.0.1:port -> the sshd that counts the bytes in each direction."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.sent = self.received = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pump, args=(client, server, "sent"), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, "received"), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, counter: str) -> None:
        try:
            while data := src.recv(1 << 16):
                setattr(self, counter, getattr(self, counter) + len(data))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def reset(self) -> None:
        self.sent = self.received = 0


def timed(argv: list[str], env: dict, runs: int = RUNS, before=None) -> float:
    """Best wall time of `runs` runs; `before` runs ahead of each, outside the timing."""
    def once() -> float:
        if before:
            before()
        return run(argv, env=env, ok=(0,))

    return best(once, runs)


def main() -> None:
    if not (PRISTINE / ".done").exists():
        raise SystemExit(f"{PRISTINE} missing: run `make bench`, which builds it")
    if not shutil.which("rsync"):
        raise SystemExit("rsync missing: run `make bench`, which installs it")
    tmp = Path(tempfile.mkdtemp(prefix="pk-bench-remote-"))
    sshd = Sshd.start(tmp / "sshd")
    try:
        home = tmp / "home"
        home.mkdir()
        relay = Relay(sshd.port)
        write_client_config(home, sshd, ["bench-host"],
                            extra=f"\nHost bench-counted\n  HostName 127.0.0.1\n  Port {relay.port}\n  User root\n"
                                  f"  IdentityFile {sshd.client_key}\n")
        with (home / ".ssh" / "known_hosts").open("a") as f:
            f.write(sshd.host_key_line().replace(f"]:{sshd.port} ", f"]:{relay.port} "))
        # the host's tree is a real copy (not hardlinks: other tests linking the pristine venv move
        # its ctimes, which would defeat any stat cache); the local side is the pristine venv
        host_venv = tmp / "host-venv"
        subprocess.run(["cp", "-a", str(PRISTINE), str(host_venv)], check=True)
        ws = tmp / "ws"
        ws.mkdir()
        (ws / "patchkeeper.toml").write_text("".join(
            f'[targets.{name}]\nssh = "{alias}"\npython = "{host_venv}/bin/python"\npackage = "sglang"\n'
            f'state_dir = "{host_venv}/.patchkeeper"\n\n' for name, alias in (("host", "bench-host"),
                                                                              ("counted", "bench-counted"))))
        env = {**os.environ, "HOME": str(home)}
        pk = [sys.executable, "-m", "patchkeeper", "--workspace", str(ws)]
        subprocess.run(pk + ["snapshot", "-t", "host", "--name", "bench", "--manifest-only"], env=env, check=True,
                       capture_output=True)
        time.sleep(2.5)  # past the stat cache's racy-clean window for the freshly copied files
        sglang = f"{SITE_REL}/sglang/"

        def rsync(port: int, checksum: bool) -> list[str]:
            ssh = (f"ssh -p {port} -i {sshd.client_key} -o BatchMode=yes "
                   f"-o UserKnownHostsFile={home}/.ssh/known_hosts")
            return ["rsync", "-a", "-n", *(["-c"] if checksum else []), "--delete", "-e", ssh,
                    str(PRISTINE / sglang), f"root@127.0.0.1:{host_venv / sglang}"]

        def cold() -> None:
            for p in (host_venv / ".patchkeeper").glob("statcache.json*"):
                p.unlink()

        files = sum(len(f) for _, _, f in os.walk(PRISTINE / sglang))
        t_pk_cold = timed(pk + ["diff", "host"], env, before=cold)
        t_rsync_c = timed(rsync(sshd.port, True), env)
        timed(pk + ["diff", "host"], env, runs=1)  # warm the cache
        t_pk_warm = timed(pk + ["diff", "host"], env)
        t_rsync = timed(rsync(sshd.port, False), env)
        traffic = {}
        for name, argv in (("pk", pk + ["diff", "counted"]), ("rsync", rsync(relay.port, False)),
                           ("rsync -c", rsync(relay.port, True))):
            relay.reset()
            timed(argv, env, runs=1)
            time.sleep(0.2)  # let the relay count the last packets
            traffic[name] = relay.sent + relay.received
        pk_bytes, rsync_bytes, rsync_c_bytes = traffic["pk"], traffic["rsync"], traffic["rsync -c"]

        print(f"remote diff over loopback sshd: sglang 0.5.23, {files} files under sglang/ "
              f"(patchkeeper skips bytecode caches), best of {RUNS}")
        print(f"{'measure':52} {'patchkeeper':>12} {'peer':>12} {'ratio':>7} {'goal':>7}")
        rows = [
            ("diff HOST, cold stat cache vs rsync -a -n -c --delete", t_pk_cold, t_rsync_c, 1.0, "s"),
            ("diff HOST, warm stat cache vs rsync -a -n --delete", t_pk_warm, t_rsync, 0.5, "s"),
        ]
        for what, mine, peer, goal, unit in rows:
            ratio = mine / peer
            print(f"{what:52} {mine:11.2f}{unit} {peer:11.2f}{unit} {ratio:6.2f}x {'<=' + str(goal) + 'x':>7}"
                  f"  {'ok' if ratio <= goal else 'MISSED'}")
        print(f"{'bytes on the wire, diff HOST vs rsync -a -n --delete':52} {pk_bytes / 1e6:10.3f}MB "
              f"{rsync_bytes / 1e6:10.3f}MB {pk_bytes / rsync_bytes:6.2f}x {'<2MB':>7}  "
              f"{'ok' if pk_bytes < 2e6 else 'MISSED'}")
        print(f"{'  (rsync -a -n -c --delete sends)':52} {'':12} {rsync_c_bytes / 1e6:10.3f}MB")
    finally:
        sshd.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
