"""Helpers shared by test files: the fake service, ledger readers, wheels, waiting on processes, a
command in the background stopped mid-transaction, asking the controller of held connections, the
corpus of hostile paths, a state dir whose stored manifests are rewritten (a hostile one's)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from patchkeeper.host import wire
from patchkeeper.host.disk import algorithm_of, hash_bytes
from patchkeeper.targets.persist import Holder, socket_path

FAKE = Path(__file__).with_name("fake_openai.py")  # the OpenAI-compatible stand-in server
WHEELS = Path(os.environ.get("PK_WHEELS", Path(__file__).resolve().parents[1] / ".cache" / "wheels"))
NO_INDEX = {"PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull}  # pip download never leaves this machine
HEAVY = ("paramiko", "invoke", "git", "gitdb", "packaging", "http", "urllib.request", "ssl", "email")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Service:
    """A fake_openai.py server on 127.0.0.1: where it listens, its pid file and log."""

    port: int
    pidfile: Path
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        subprocess.run(
            [sys.executable, str(FAKE), "stop", "--pidfile", str(self.pidfile), "--port", str(self.port)],
            check=True,
        )


def hostile_paths() -> list[str]:
    """Values an attacker would put where a relative path is read: climbing, absolute, empty parts,
    NUL, newline, backslash, .git in any case, over-long, and combinations of them."""
    seeds = ["..", "../x", "a/../../x", "/etc/passwd", "//x", "a//b", "a/./b", ".", "", "x/", "a/..",
             ".git", ".git/config", "a/.GIT/hooks/x", ".Git", "a\\..\\b", "nul\0x", "a/\0", "x" * 256,
             "/".join(["d"] * 2100), "\udcff"]  # fmt: skip
    prefixed = [f"sglang/{s}" for s in seeds if s and not s.startswith("/")]
    return seeds + prefixed


def ledger(env) -> list[dict]:
    """The target's ledger entries, oldest first, read from its state dir."""
    return [json.loads(p.read_text()) for p in sorted((env.state_dir / "ledger").glob("*.json"))]


def stack(env) -> list[str]:
    """The names of the patch sets applied in the target's last recorded state, bottom first."""
    return [p["name"] for p in ledger(env)[-1]["after"]["stack"]]


def wheel(pattern: str) -> Path:
    """The one wheel of the test cache that matches `pattern` (`make test` downloads them)."""
    found = sorted(WHEELS.glob(pattern))
    if not found:
        pytest.fail(f"{pattern} is missing from {WHEELS}: run `make test`, which downloads it")
    return found[0]


def imported(env, *args: str, code: int = 0) -> set[str]:
    """Every module the CLI imports for `args`, as -X importtime lists them."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "patchkeeper", "--workspace", str(env.root), *args],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == code, proc.stderr[-2000:]
    return {
        line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")
    }


_LOADED = (
    "import atexit, os, sys\n"
    "atexit.register(lambda: os.write(2, ('loaded: ' + ' '.join(sorted(sys.modules)) + '\\n').encode()))\n"
    "from patchkeeper.cli import main\n"
    "main(prog_name='patchkeeper')\n"
)


def loaded(
    env, *args: str, code: int | None = 0, environ: dict[str, str] | None = None
) -> tuple[set[str], str]:
    """Every module in sys.modules when the CLI exits after `args` (those importlib loads by name
    too, which -X importtime does not list), and its stdout; `code` None: any exit code."""
    proc = subprocess.run(
        [sys.executable, "-c", _LOADED, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PATCHKEEPER_WORKSPACE": str(env.root), **(environ or {})},
    )
    assert code is None or proc.returncode == code, proc.stderr[-2000:]
    line = next(x for x in proc.stderr.splitlines() if x.startswith("loaded: "))
    return set(line.split()[1:]), proc.stdout


def heavy(modules: set[str]) -> list[str]:
    """The heavy third-party (or slow stdlib) modules among `modules`."""
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def wait_for(predicate: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    """Poll `predicate` until it holds; fail naming `what` after `limit` seconds (a hang, not a speed bound)."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def proc_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat ("Z", "S", ...), or "gone"."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # ESRCH: it ended between the open and the read
        return "gone"
    return stat[stat.rindex(")") + 2]


def pk_background(
    root: Path, *args: str, crash_at: str | None = None, signal: str = "STOP", text: bool = False
) -> subprocess.Popen:
    """The CLI on the workspace `root` with `args`, in the background, its stdout and stderr piped; with
    `crash_at`, stopped there (SIGSTOP, faults.point: a step of its transaction) or sent `signal`."""
    env = {**os.environ}
    if crash_at:
        env.update(PATCHKEEPER_CRASH_AT=crash_at, PATCHKEEPER_CRASH_SIGNAL=signal)
    return subprocess.Popen(
        [sys.executable, "-m", "patchkeeper", "--workspace", str(root), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=text,
        env=env,
    )


def ping(venv: Path, host: str) -> dict:
    """The controller's answer to a ping for the SSH alias `host` with `venv`'s interpreter (the target's
    held key): its pid, the pid of the target's spare agent (or None), how many targets it holds."""
    spec = Holder(host, host, f"{venv}/bin/python", 60).spec
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(socket_path())
        s.settimeout(30)
        s.sendall(wire.encode({"op": "ping", "target": spec}))
        read = s.makefile("rb").read
        assert "ack" in wire.decode(read)[0]
        return wire.decode(read)[1]


# ---- a hostile state dir: its stored manifests rewritten --------------------------------------------
def plant_manifests(state_dir: Path, ledger: dict[str, bytes], rewrite: Callable[[bytes], bytes]) -> None:
    """Every ledger entry as it was (`ledger`: name -> bytes), but each state's manifest rewritten
    (`rewrite` of its text): a new object in the store, which the entries point to."""
    planted: dict[str, str] = {}
    for name, data in ledger.items():
        doc = json.loads(data)
        for side in ("before", "after"):
            state = doc.get(side) or {}
            old = state.get("manifest")
            if not old:
                continue
            if old not in planted:
                text = rewrite(store_object(state_dir, old).read_bytes())
                planted[old] = hash_bytes(text, algorithm_of(old))
                path = store_object(state_dir, planted[old])
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(text)
            state["manifest"] = planted[old]
        path = state_dir / "ledger" / name
        path.chmod(0o644)
        path.write_text(json.dumps(doc, indent=1))
        path.chmod(0o444)


def put_back_ledger(state_dir: Path, ledger: dict[str, bytes]) -> None:
    """The ledger entries' bytes as `ledger` (name -> bytes) holds them."""
    for name, data in ledger.items():
        path = state_dir / "ledger" / name
        path.chmod(0o644)
        path.write_bytes(data)
        path.chmod(0o444)


def store_object(state_dir: Path, digest: str) -> Path:
    algo, _, hexd = digest.partition(":")
    return state_dir / "store" / "objects" / algo / hexd[:2] / hexd[2:]


def stat_identities(root: Path, skip: Path) -> dict[str, tuple[int, int, int, int, int]]:
    """(mode, size, mtime, ctime, inode) of every path below `root` but those below `skip`: any write
    moves an entry's mtime, ctime or inode."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) != str(skip)]
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.join(dirpath, name)] = (
                st.st_mode,
                st.st_size,
                st.st_mtime_ns,
                st.st_ctime_ns,
                st.st_ino,
            )
    return out
