"""Remote diff over a loopback OpenSSH sshd: `patchkeeper diff HOST` against rsync, and bytes sent.

On the real sglang 0.5.23 tree, in one run, against the same sshd:
- `patchkeeper diff HOST` with a cold stat cache vs `rsync -a -n -c --delete` (reads every file
  on both sides)                                                               goal <= 1x
- the same with the host's stat cache warm vs `rsync -a -n --delete` (metadata)  goal <= 0.5x
- bytes crossing the connection for that diff (through a counting TCP relay)    goal < 2 MB
- `audit --all` over 16 SSH targets behind the same sshd vs `audit` of one       goal <= 2.5x
Later commands reuse the target's held connection (persist, the default), as they would in use;
the first command's figure, which starts it, is printed too (and the first `audit --all`'s, which
starts every holder of the fleet).
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
from common import PRISTINE, REPO, SITE_REL, best, row, run  # noqa: E402

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


def timed(argv: list[str], env: dict, runs: int = RUNS, before=None, ok=(0,)) -> float:
    """Best wall time of `runs` runs; `before` runs ahead of each, outside the timing."""
    def once() -> float:
        if before:
            before()
        return run(argv, env=env, ok=ok)

    return best(once, runs)


def cpu_by_kind() -> dict[str, float]:
    """CPU seconds (user + system, its own and its waited-for children's: an agent's forked
    helpers) so far of every process here, by pid and what it is: an agent (the program the
    holders start on the host), a holder, sshd, or other."""
    hz = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        kind = ("holder" if "patchkeeper.targets.holder" in cmd else "sshd" if "sshd" in cmd.split(" ", 1)[0]
                else "agent" if "exec(sys.stdin.buffer.read(" in cmd else "other")
        out[f"{kind} {pid}"] = sum(int(x) for x in fields[11:15]) / hz
    return out


def cpu_of_run(argv: list[str], env: dict) -> dict[str, float]:
    """The CPU one run of `argv` costs each kind of process (cpu_by_kind), the command's own as
    "controller": where a fleet's time goes on this one machine."""
    before, mine = cpu_by_kind(), os.times()
    run(argv, env=env, ok=(0, 1))
    after, done = cpu_by_kind(), os.times()
    spent = {"controller": done.children_user - mine.children_user + done.children_system - mine.children_system}
    for key, seconds in after.items():
        kind = key.split()[0]
        spent[kind] = spent.get(kind, 0.0) + seconds - before.get(key, 0.0)
    return {kind: round(seconds, 3) for kind, seconds in spent.items()}


def fleet(tmp: Path, home: Path, host_venv: Path, env: dict,
          n: int = 16) -> tuple[float, float, int, float, dict[str, float]]:
    """`audit --all` over n SSH targets (each its own hardlinked copy of the host's tree, its own
    alias of the same sshd) against `audit` of one of them, stat caches warm, connections held;
    the first `audit --all`, which starts every target's holder at once; and the CPU one more
    `audit --all` costs each kind of process."""
    config = (home / ".ssh" / "config").read_text()
    port = config.split("Port ", 1)[1].split()[0]
    key = config.split("IdentityFile ", 1)[1].split()[0]
    ws = tmp / "fleet-ws"
    ws.mkdir()
    toml = ""
    with (home / ".ssh" / "config").open("a") as f:
        for i in range(n):
            venv = tmp / f"fleet-{i}"
            subprocess.run(["cp", "-al", str(host_venv), str(venv)], check=True)
            shutil.rmtree(venv / ".patchkeeper", ignore_errors=True)
            f.write(f"\nHost fleet-{i}\n  HostName 127.0.0.1\n  Port {port}\n  User root\n  IdentityFile {key}\n")
            toml += f'[targets.h{i:02d}]\nssh = "fleet-{i}"\npython = "{venv}/bin/python"\npackage = "sglang"\n\n'
    (ws / "patchkeeper.toml").write_text(toml)
    pk = [sys.executable, "-m", "patchkeeper", "--workspace", str(ws)]
    for i in range(n):
        run(pk + ["snapshot", "-t", f"h{i:02d}", "--name", "b", "--manifest-only"], env=env, ok=(0,))
    time.sleep(2.5)  # hardlinking moved every ctime: past the racy window before caching
    run(pk + ["disconnect", "--all"], env=env, ok=(0,))
    t = time.perf_counter()
    proc = subprocess.run(pk + ["audit", "--all", "-q"], env=env, capture_output=True, text=True)
    first = time.perf_counter() - t  # every holder starts
    if proc.returncode not in (0, 1):
        raise SystemExit(f"the first audit --all failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    run(pk + ["audit", "--all", "-q"], env=env, ok=(0, 1))
    one = timed(pk + ["audit", "-q", "-t", "h00"], env, ok=(0, 1))
    every = timed(pk + ["audit", "--all"], env, ok=(0, 1))
    return one, every, n, first, cpu_of_run(pk + ["audit", "--all"], env)


def main() -> list[dict]:
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
        (tmp / "run").mkdir(mode=0o700)
        env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(tmp / "run")}
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
        t_first = run(pk + ["diff", "host"], env=env, ok=(0,))  # starts the held connection
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
        t_one, t_fleet, n_fleet, t_fleet_first, cpu = fleet(tmp, home, host_venv, env)

        print(f"remote diff over loopback sshd: sglang 0.5.23, {files} files under sglang/ "
              f"(patchkeeper skips bytecode caches), best of {RUNS}")
        print(f"{'measure':52} {'patchkeeper':>12} {'peer':>12} {'ratio':>7} {'goal':>7}")
        rows = [
            ("diff HOST, cold stat cache vs rsync -a -n -c --delete", t_pk_cold, t_rsync_c, 1.0, "s"),
            ("diff HOST, warm stat cache vs rsync -a -n --delete", t_pk_warm, t_rsync, 0.5, "s"),
            (f"audit --all, {n_fleet} SSH targets vs audit of one", t_fleet, t_one, 2.5, "s"),
        ]
        for what, mine, peer, goal, unit in rows:
            ratio = mine / peer
            print(f"{what:52} {mine:11.2f}{unit} {peer:11.2f}{unit} {ratio:6.2f}x {'<=' + str(goal) + 'x':>7}"
                  f"  {'ok' if ratio <= goal else 'MISSED'}")
        print(f"{'bytes on the wire, diff HOST vs rsync -a -n --delete':52} {pk_bytes / 1e6:10.3f}MB "
              f"{rsync_bytes / 1e6:10.3f}MB {pk_bytes / rsync_bytes:6.2f}x {'<2MB':>7}  "
              f"{'ok' if pk_bytes < 2e6 else 'MISSED'}")
        print(f"{'  (rsync -a -n -c --delete sends)':52} {'':12} {rsync_c_bytes / 1e6:10.3f}MB")
        print(f"{'first diff HOST (starts the held connection)':52} {t_first:11.2f}s")
        print(f"{f'first audit --all (starts {n_fleet} holders at once)':52} {t_fleet_first:11.2f}s")
        print(f"{f'CPU of one audit --all over {n_fleet} SSH targets, by process':52} "
              + ", ".join(f"{kind} {seconds:.2f}s" for kind, seconds in sorted(cpu.items())))
        return [*(row(what, mine, what.split(" vs ")[-1], peer, f"<= {goal}x") for what, mine, peer, goal, _ in rows),
                row("bytes on the wire, diff HOST (MB)", pk_bytes / 1e6, "rsync -a -n --delete", rsync_bytes / 1e6, "< 2 MB"),
                row("first diff HOST (starts the held connection)", t_first, "", 0.0, "report"),
                row(f"first audit --all (starts {n_fleet} holders at once)", t_fleet_first, "", 0.0, "report"),
                *(row(f"CPU of audit --all over {n_fleet} SSH targets: {kind}", seconds, "", 0.0, "report")
                  for kind, seconds in sorted(cpu.items()))]
    finally:
        subprocess.run([sys.executable, "-m", "patchkeeper", "disconnect", "--all"], env=env, capture_output=True)
        sshd.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
