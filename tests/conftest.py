"""Fixtures: a real sglang venv per test (hardlinked from a pristine one), a workspace, the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]
PRISTINE = Path(os.environ.get("PK_SGLANG_VENV", REPO / ".cache" / "sglang-venv"))
DRAFT = "/root/models/Qwen3.6-27B-DFlash"  # the draft model path the shipped dflash/ddtree units need
SITE_REL = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """No test may write to the real home directory or pick up a workspace from the environment."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("PATCHKEEPER_WORKSPACE", raising=False)
    monkeypatch.delenv("PATCHKEEPER_CRASH_AT", raising=False)
    runtime = home / "run"  # held SSH connections put their sockets here (targets/persist.py)
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    yield
    end_holders(runtime / "patchkeeper")


def _runs_patchkeeper(args) -> bool:
    argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else str(args).split()
    return any(argv[i:i + 2] == ["-m", "patchkeeper"] for i in range(len(argv))) or \
        any(a.endswith("/patchkeeper") for a in argv[:1])


def _scan_for_traceback(args, stderr) -> None:
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr or ""
    if "Traceback (most recent call last)" in text:
        pytest.fail(f"a traceback reached the user of `{' '.join(map(str, args))}`:\n{text}")


@pytest.fixture(autouse=True)
def _no_traceback(monkeypatch):
    """No command the suite runs may show its user a traceback: the stderr of every patchkeeper
    command whose output a test takes (subprocess.run, as Env.pk and every helper does, or
    Popen.communicate) is scanned for one."""
    real_communicate = subprocess.Popen.communicate

    def communicate(self, *a, **kw):
        out, err = real_communicate(self, *a, **kw)
        if _runs_patchkeeper(self.args):
            _scan_for_traceback(self.args, err)
        return out, err

    monkeypatch.setattr(subprocess.Popen, "communicate", communicate)


def end_holders(directory: Path) -> None:
    """No test leaves a held connection running: ask each holder to stop, SIGKILL what remains."""
    import signal
    import socket
    import struct

    if not directory.is_dir():
        return
    for sock_path in directory.glob("*.sock"):
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(str(sock_path))
            pid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        finally:
            s.close()


@pytest.fixture(scope="session")
def pristine_venv(tmp_path_factory) -> Iterator[Path]:
    """The pristine venv, on the tmp dirs' file system so that tests can hardlink it.

    `make test` puts the tmp dirs on a tmpfs where there is one (TMPDIR): every test copies a
    13,000-entry venv and packs a 120 MB baseline, which costs a disk file system most of the
    suite's time in the kernel. The copy is made once per worker, with modes and mtimes kept."""
    if not (PRISTINE / ".done").exists():
        pytest.fail(f"{PRISTINE} is missing: run the tests with `make test`, which builds it")
    damaged = _damaged(PRISTINE)
    if damaged:
        pytest.fail(f"{PRISTINE} was written through a hardlink ({', '.join(damaged[:5])}): "
                    f"a test changed a file in place; `rm -rf {PRISTINE}` and fix the test to use edit_file/chmod_file")
    base = tmp_path_factory.getbasetemp()
    if base.stat().st_dev == PRISTINE.stat().st_dev:
        yield PRISTINE
        return
    local = base / "pristine-venv"
    subprocess.run(["cp", "-a", str(PRISTINE), str(local)], check=True)
    yield local
    damaged = _damaged(local)  # the copy is shared by this worker's tests: none may have written through it
    if damaged:
        pytest.fail(f"a test wrote through a hardlink into the pristine venv ({', '.join(damaged[:5])}): "
                    "fix the test to use edit_file/chmod_file")


def _damaged(venv: Path) -> list[str]:
    """Files of the pristine venv whose mode, size or mtime changed since the Makefile built it."""
    bad = []
    for line in (venv / ".files").read_text().splitlines():
        rel, mode, size, mtime = line.split("\t")
        try:
            st = (venv / rel).stat()
        except FileNotFoundError:
            bad.append(rel)
            continue
        if (f"{stat.S_IMODE(st.st_mode):o}", st.st_size) != (mode, int(size)) or abs(st.st_mtime - float(mtime)) > 1e-3:
            bad.append(rel)
    return bad


def copy_venv(pristine: Path, dest: Path) -> Path:
    """A venv of our own: hardlinks, which patchkeeper must never write through."""
    subprocess.run(["cp", "-al", str(pristine), str(dest)], check=True)
    return dest


def drop_bytecode(site: Path, keep: str = "") -> int:
    """Unlink every __pycache__ below `site` but the one of directory `keep` (a venv of our own: the
    links go, the pristine venv's files stay); for tests of `audit --rehash`, which recompiles every
    pyc there is (6,000 of sglang's: most of such a test's time, and not what it is about)."""
    gone = 0
    for cache in sorted(site.rglob("__pycache__")):
        if keep and cache.parent == site / keep:
            continue
        gone += sum(1 for _ in cache.iterdir())
        shutil.rmtree(cache)
    return gone


def edit_file(path: Path, data: bytes) -> None:
    """Change a file by hand without writing through a hardlink into the pristine venv."""
    mode = path.stat().st_mode if path.exists() else 0o644
    path.unlink(missing_ok=True)
    path.write_bytes(data)
    path.chmod(stat.S_IMODE(mode))


_hashes: dict[tuple, str] = {}


def _sha256(p: Path, st: os.stat_result) -> str:
    """Hashes are reused per (inode, size, mtime): copies are hardlinks that nothing writes into."""
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _hashes:
        _hashes[key] = hashlib.sha256(p.read_bytes()).hexdigest()
    return _hashes[key]


def chmod_file(path: Path, mode: int) -> None:
    """Change a file's mode by hand on an inode of our own (chmod goes through hardlinks too)."""
    edit_file(path, path.read_bytes())
    path.chmod(mode)


def tree(root: Path, skip_state: bool = True) -> dict[str, tuple[str, int]]:
    """sha256 and mode of every file below root, without bytecode caches (and the state dir)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__" and not (skip_state and d == ".patchkeeper")]
        for name in filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                out[str(p.relative_to(root))] = (os.readlink(p), 0)
                continue
            st = p.stat()
            out[str(p.relative_to(root))] = (_sha256(p, st), stat.S_IMODE(st.st_mode))
    return out


@dataclass
class Env:
    """A workspace in a tmp dir with one local target, `local`, over a real sglang venv."""

    root: Path
    venv: Path
    unit: Path

    @property
    def site(self) -> Path:
        return self.venv / SITE_REL

    @property
    def state_dir(self) -> Path:
        return self.venv / ".patchkeeper"

    @property
    def dropin(self) -> Path:
        """The patch sets' systemd drop-in: <unit>.d/50-patchkeeper.conf beside the host's unit."""
        return self.unit.with_name(self.unit.name + ".d") / "50-patchkeeper.conf"

    def running(self) -> str:
        """What the unit runs: the host's unit, then its drop-in (the patch sets' ExecStart)."""
        return self.unit.read_text() + (self.dropin.read_text() if self.dropin.exists() else "")

    def pk(self, *args: str, check: int | None = 0, env: dict | None = None) -> subprocess.CompletedProcess:
        """Run the real CLI in a subprocess; assert its exit code unless check is None."""
        proc = subprocess.run([sys.executable, "-m", "patchkeeper", "--workspace", str(self.root), *args],
                              capture_output=True, text=True, env={**os.environ, **(env or {})})
        if check is not None:
            assert proc.returncode == check, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc

    def snapshot(self) -> dict:
        """Every file of the venv, the unit and the drop-in (whose {{ python }} is this venv's own interpreter,
        named PYTHON, so that clones of one workspace in other venvs compare equal)."""
        files = tree(self.venv)
        for key, path in (("@unit", self.unit), ("@dropin", self.dropin)):
            data = path.read_bytes().replace(f"{self.venv}/bin/python".encode(), b"PYTHON") if path.exists() else b""
            files[key] = (hashlib.sha256(data).hexdigest(), stat.S_IMODE(path.stat().st_mode)) \
                if path.exists() else None
        return files


def fingerprinted(env: Env) -> list[tuple[str, bool]]:
    """Each ledger entry's kind, and whether it keeps an environment fingerprint that reads back
    from the target's store (issue 9: every recorded state and transaction carries one)."""
    out = []
    for path in sorted((env.state_dir / "ledger").glob("*.json")):
        entry = json.loads(path.read_text())
        algo, _, hexd = entry.get("env", "").partition(":")
        obj = env.state_dir / "store" / "objects" / algo / hexd[:2] / hexd[2:]
        out.append((entry["kind"], bool(hexd) and obj.is_file() and "distributions" in json.loads(obj.read_bytes())))
    return out


def make_workspace(root: Path, venv: Path, extra_toml: str = "") -> Env:
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "patchsets", root / "patchsets")
    unit = root / "systemd" / "sglang-qwen.service"
    unit.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "demo" / "sglang-qwen.service", unit)
    (root / "patchkeeper.toml").write_text(
        f'default_target = "local"\n\n[targets.local]\npython = "{venv}/bin/python"\npackage = "sglang"\n\n'
        f'[targets.local.vars]\ndraft_model_path = "{DRAFT}"\n\n'
        f'[targets.local.files]\nunit = "{unit}"\n{extra_toml}')
    return Env(root, venv, unit)


@pytest.fixture
def env(tmp_path, pristine_venv) -> Env:
    venv = copy_venv(pristine_venv, tmp_path / "venv")
    return make_workspace(tmp_path / "ws", venv)
