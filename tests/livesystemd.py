"""A live systemd 252 manager for tests: `/lib/systemd/systemd --user`, run as root in a private pid and mount
namespace (`unshare -pfm --mount-proc`) with a tmpfs on /run/systemd and an empty /run/systemd/system there, so
that its "booted with systemd" check passes and nothing else on the machine sees it. Its unit search path is
$SYSTEMD_UNIT_PATH (a test root's directories, then a directory of the few targets a manager needs), it answers
`systemctl --user` over $XDG_RUNTIME_DIR/systemd/private, and it runs in a cgroup of its own.

systemd refuses a private-bus client whose pid it cannot see, so `systemctl` runs inside the namespace
(`nsenter -t PID -p -m`). The manager's log (SYSTEMD_LOG_TARGET=console; systemd writes it only to a
terminal) goes to a pseudo-terminal bind-mounted on /dev/console inside the namespace, copied to a file by
a thread of the test process. `stop()` kills the namespace's first process: the kernel then kills every
process in it; the manager's parent dies with the test process (PR_SET_PDEATHSIG), so a crashed test
leaves nothing running."""

from __future__ import annotations

import ctypes
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

SYSTEMD = Path("/lib/systemd/systemd")
CGROUP_ROOTS = (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
_PR_SET_PDEATHSIG = 1

# What a user manager needs to start a service with default dependencies, and nothing more.
BASE_UNITS = {
    "default.target": "[Unit]\nDescription=default\nRequires=basic.target\nAfter=basic.target\n",
    "basic.target": "[Unit]\nDescription=basic\n",
    "shutdown.target": "[Unit]\nDescription=shutdown\nDefaultDependencies=no\n",
    "exit.target": "[Unit]\nDescription=exit\nDefaultDependencies=no\n",
}

# An executable for a unit's ExecStart=: it records the argv (as bytes, hex) and the environment it really
# got, as JSON, in $PK_RECORD_DIR/<its unit's name>.json, the name taken from its own cgroup.
RECORDER = """#!/usr/bin/python3
import json, os, sys
name = "unnamed"
for line in open("/proc/self/cgroup"):
    last = line.rstrip("\\n").rpartition("/")[2]
    if last.endswith(".service"):
        name = last
directory = os.environ.get("PK_RECORD_DIR", "/nonexistent")
data = {"argv": [os.fsencode(a).hex() for a in sys.argv], "env": {k: os.fsencode(v).hex() for k, v in os.environ.items()}}
tmp = os.path.join(directory, "." + name + ".tmp")
with open(tmp, "w") as f:
    json.dump(data, f)
os.replace(tmp, os.path.join(directory, name + ".json"))
"""


def record(directory: Path, unit: str) -> tuple[list[str], dict[str, str]] | None:
    """What the recorder got as `unit`'s process: argv and environment (bytes decoded surrogateescape)."""
    try:
        data = json.loads((directory / f"{unit}.json").read_text())
    except FileNotFoundError:
        return None

    def text(h: str) -> str:
        return bytes.fromhex(h).decode("utf-8", "surrogateescape")

    return [text(a) for a in data["argv"]], {k: text(v) for k, v in data["env"].items()}


def below_root(root: Path, directories: Iterable[str]) -> tuple[Path, ...]:
    """A search path's directories below a test root (`/etc/systemd/system` -> ROOT/etc/systemd/system)."""
    return tuple(Path(f"{root}{d}") for d in directories)


def why_not() -> str | None:
    """Why a live manager cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "a live systemd manager needs root (unshare of a pid and mount namespace)"
    if not SYSTEMD.exists():
        return f"{SYSTEMD} is missing: `make systemd` installs Debian's systemd"
    for tool in ("unshare", "nsenter", "systemctl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the test process dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


@dataclass
class LiveManager:
    """One running user manager; `unit_path` is its search path (highest priority first)."""

    home: Path
    unit_path: tuple[Path, ...]
    proc: subprocess.Popen[bytes]
    init: int  # the namespace's first process (host pid): nsenter's target, SIGKILL ends it all
    cgroups: list[Path] = field(default_factory=list)
    root: Path | None = None  # the test root whose systemd directories make `unit_path` (below_root)
    copier: threading.Thread | None = None  # copies the manager's console to manager.log

    @property
    def runtime(self) -> Path:
        """$XDG_RUNTIME_DIR: a short path of its own (a socket's path is at most 107 bytes), linked from home."""
        return (self.home / "runtime").resolve()

    @property
    def records(self) -> Path:
        """Where the recorder writes what each unit's process got."""
        return self.home / "records"

    @property
    def recorder(self) -> Path:
        return self.home / "record.py"

    # ---- starting and stopping ------------------------------------------------------------------------
    @classmethod
    def start(
        cls, home: Path, unit_path: Iterable[Path], environment: Mapping[str, str] | None = None
    ) -> LiveManager:
        """A manager whose search path is `unit_path` then a directory of BASE_UNITS, ready to answer."""
        home.mkdir(parents=True, exist_ok=True)
        base = home / "base-units"
        base.mkdir(exist_ok=True)
        for name, text in BASE_UNITS.items():
            (base / name).write_text(text)
        runtime = Path(tempfile.mkdtemp(prefix="pk-live-"))  # mode 0700
        (home / "runtime").symlink_to(runtime)
        (home / "records").mkdir(exist_ok=True)
        (home / "record.py").write_text(RECORDER)
        (home / "record.py").chmod(0o755)
        console = home / "manager.log"
        pty_master, pty_slave = os.openpty()
        tty = f"/proc/self/fd/{pty_slave}"  # by descriptor: the pty's own /dev/pts may not be this one
        copier = threading.Thread(target=_copy_log, args=(pty_master, console), daemon=True)
        copier.start()
        paths = tuple(Path(p) for p in unit_path)
        for p in paths:
            p.mkdir(parents=True, exist_ok=True)
        tag = f"pk-live-{uuid.uuid4().hex[:12]}"
        cgroups = [root / tag for root in CGROUP_ROOTS if (root / "cgroup.procs").exists()][:2]
        for cg in cgroups:
            cg.mkdir()
        join = " && ".join(f"echo $$ > {shlex.quote(str(cg / 'cgroup.procs'))}" for cg in cgroups) or "true"
        script = (
            f"{join} && mount -t tmpfs -o mode=0755 tmpfs /run/systemd && mkdir /run/systemd/system"
            f" && mount --bind {shlex.quote(tty)} /dev/console"
            f" && {SYSTEMD} --user"  # not exec'd: systemd refuses --user as pid 1
        )
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(home),
            "XDG_RUNTIME_DIR": str(runtime),
            "SYSTEMD_UNIT_PATH": ":".join([*map(str, paths), str(base)]),
            "SYSTEMD_LOG_TARGET": "console",
            "SYSTEMD_LOG_LEVEL": "info",
            "LANG": "C.UTF-8",
            "PK_RECORD_DIR": str(home / "records"),
            **(environment or {}),
        }
        proc = subprocess.Popen(
            ["unshare", "-pfm", "--mount-proc", "--kill-child=SIGKILL", "sh", "-c", script],
            env=env,
            cwd=home,
            stdin=subprocess.DEVNULL,
            stdout=open(home / "stdout.log", "wb"),  # noqa: SIM115 - the child keeps it
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
            start_new_session=True,
            pass_fds=(pty_slave,),
        )
        os.close(pty_slave)  # the namespace holds it open through /dev/console
        init = 0
        for _ in range(500):  # up to ~10 s for unshare's fork, then the manager's private bus
            if proc.poll() is not None:
                break
            init = init or next(iter(_children(proc.pid)), 0)
            if init and (runtime / "systemd" / "private").exists():
                manager = cls(home, paths, proc, init, cgroups, copier=copier)
                if manager.systemctl("show", "-p", "Version").returncode == 0:
                    return manager
            time.sleep(0.02)
        manager = cls(home, paths, proc, init, cgroups, copier=copier)
        manager.stop()
        log = manager.log()
        raise RuntimeError(f"the live systemd manager did not start:\n{log}")

    def stop(self) -> None:
        """Kill the namespace (every process in it), reap, and remove its cgroups."""
        for pid in (self.init, self.proc.pid):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for cg in self.cgroups:
            _remove_cgroup(cg)
        if self.copier is not None:
            self.copier.join(timeout=30)  # the terminal's last holder is gone: the copy ends
        shutil.rmtree(self.runtime, ignore_errors=True)

    def log(self) -> str:
        """The manager's own log and its first process's output."""
        parts = []
        for name in ("manager.log", "stdout.log"):
            try:
                parts.append((self.home / name).read_text(errors="replace"))
            except OSError:
                pass
        return "\n".join(parts)

    # ---- asking it --------------------------------------------------------------------------------------
    def systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`systemctl --user ARGS` inside the namespace, its output as text."""
        return subprocess.run(
            ["nsenter", "-t", str(self.init), "-p", "-m", "systemctl", "--user", "--no-pager", *args],
            env={
                "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                "XDG_RUNTIME_DIR": str(self.runtime),
                "LANG": "C.UTF-8",
            },
            capture_output=True,
            text=True,
            errors="surrogateescape",
            stdin=subprocess.DEVNULL,
        )

    def daemon_reload(self) -> None:
        done = self.systemctl("daemon-reload")
        if done.returncode != 0:
            raise RuntimeError(f"daemon-reload failed: {done.stderr}\n{self.log()}")

    def start_unit(self, *units: str, wait: bool = True) -> subprocess.CompletedProcess[str]:
        """`systemctl --user start UNIT...` (waiting for the jobs unless `wait` is False)."""
        return self.systemctl("start", *([] if wait else ["--no-block"]), "--", *units)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        """`systemctl --user show UNIT -p P...` as a dict (every property when none is named)."""
        done = self.systemctl("show", *(f"--property={p}" for p in props), "--", unit)
        if done.returncode != 0:
            raise RuntimeError(f"systemctl show {unit} failed: {done.stderr}")
        out: dict[str, str] = {}
        for line in done.stdout.splitlines():
            key, _, value = line.partition("=")
            out[key] = value
        return out

    def show_many(self, units: Iterable[str], *props: str) -> dict[str, dict[str, str]]:
        """`systemctl show` of many units in one call: each unit's properties (in the order asked)."""
        names = list(units)
        done = self.systemctl("show", *(f"--property={p}" for p in props), "--", *names)
        if done.returncode != 0:
            raise RuntimeError(f"systemctl show failed: {done.stderr}")
        blocks = done.stdout.split("\n\n")
        out: dict[str, dict[str, str]] = {}
        for name, block in zip(names, blocks, strict=False):
            out[name] = dict(line.partition("=")[::2] for line in block.splitlines() if line)
        return out

    def systemctl_argv(self) -> list[str]:
        """A command line that runs `systemctl --user` against this manager from outside its namespace
        (for a [service]'s restart command): nsenter, the runtime directory, systemctl."""
        return [
            "nsenter", "-t", str(self.init), "-p", "-m",
            "env", f"XDG_RUNTIME_DIR={self.runtime}", "systemctl", "--user", "--no-pager",
        ]  # fmt: skip

    def write(self, root: Path, files: Mapping[str, bytes | str]) -> None:
        """Files below `root` (relative paths); b"->TARGET" makes a symlink to TARGET."""
        write_tree(root, files)


def write_tree(root: Path, files: Mapping[str, bytes | str]) -> None:
    """Files below `root` (relative paths); b"->TARGET" makes a symlink to TARGET, b"|fifo" a FIFO."""
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if data == b"|fifo":
            os.mkfifo(path)
            continue
        if isinstance(data, bytes) and data.startswith(b"->"):
            path.symlink_to(data[2:].decode())
        else:
            path.write_bytes(data.encode() if isinstance(data, str) else data)


def _copy_log(master: int, path: Path) -> None:
    """The manager's console, copied to `path` until the last writer is gone."""
    with open(path, "wb", buffering=0) as out:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every process holding the terminal has exited
                break
            if not data:
                break
            out.write(data.replace(b"\r\n", b"\n"))
    os.close(master)


def _remove_cgroup(cg: Path) -> None:
    """A cgroup directory and every one below it (each empty once the namespace is dead)."""
    if not cg.is_dir():
        return
    for _ in range(100):
        for sub in sorted((p for p in cg.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            try:
                sub.rmdir()
            except OSError:
                pass
        try:
            cg.rmdir()
            return
        except OSError:
            time.sleep(0.05)  # the processes' exit is still being accounted
