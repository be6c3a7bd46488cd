"""Fixtures: a real sglang venv per test (hardlinked from a pristine one), a workspace, the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import FAKE, Service, free_port, wheel
from installed import install_without_pip
from livesystemd import LiveManager, below_root, why_not as live_systemd_missing
from made_wheels import pip_install
from sshd import sshd, write_client_config  # noqa: F401 (sshd is a fixture the `fleet` fixture uses)

from patchkeeper.workspace import SYSTEMD_UNIT_PATH

REPO = Path(__file__).resolve().parents[1]
PRISTINE = Path(os.environ.get("PK_SGLANG_VENV", REPO / ".cache" / "sglang-venv"))
DRAFT = "/root/models/Qwen3.6-27B-DFlash"  # the draft model path the shipped dflash/ddtree units need
SITE_REL = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"

# The Ctrl-C tests send SIGINT to the CLI as a terminal would. A suite started in the background of a
# shell without job control inherits SIGINT ignored, and so would every CLI it starts (an ignored
# signal stays ignored across exec): a handled one is reset to the default there instead.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


_PASSED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.stash[_PASSED] = report.passed
    return report


@pytest.fixture(autouse=True)
def _tmp_path_removed(request, tmp_path):
    """A passed test's tmp dir removed by `rm -rf`, before pytest's own cleanup (retention "failed")
    would walk it with shutil.rmtree: most tmp dirs hold a 13,000-entry venv and a baseline pack,
    which rm takes in 0.09 s of CPU and shutil.rmtree in 0.22 s, a minute of the suite's time.
    Set up before the test's other fixtures, so torn down after them (their servers stopped), but before
    the test's monkeypatch is undone: rm is started by os.posix_spawnp, which no test replaces (one sets
    subprocess.Popen to None to prove nothing is compiled)."""
    yield
    if request.node.stash.get(_PASSED, False):
        _rm(tmp_path)


def _runs_patchkeeper(args) -> bool:
    argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else str(args).split()
    return any(argv[i : i + 2] == ["-m", "patchkeeper"] for i in range(len(argv))) or any(
        a.endswith("/patchkeeper") for a in argv[:1]
    )


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
    suite's time in the kernel. The copy is made once per worker, with modes and mtimes kept, on
    the same file system as the cache's too: a test's venv hardlinks it, and a link made by a test
    on another worker moves the ctime of every inode they share, which a test of the stat cache or
    a seal reads as a change (they failed so, with the tmp dirs on the disk of .cache)."""
    if not (PRISTINE / ".done").exists():
        pytest.fail(f"{PRISTINE} is missing: run the tests with `make test`, which builds it")
    damaged = _damaged(PRISTINE)
    if damaged:
        pytest.fail(
            f"{PRISTINE} was written through a hardlink ({', '.join(damaged[:5])}): "
            f"a test changed a file in place; `rm -rf {PRISTINE}` and fix the test to use edit_file/chmod_file"
        )
    local = tmp_path_factory.getbasetemp() / "pristine-venv"
    subprocess.run(["cp", "-a", str(PRISTINE), str(local)], check=True)
    yield local
    damaged = _damaged(local)  # the copy is shared by this worker's tests: none may have written through it
    if damaged:
        pytest.fail(
            f"a test wrote through a hardlink into the pristine venv ({', '.join(damaged[:5])}): "
            "fix the test to use edit_file/chmod_file"
        )


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
        if (f"{stat.S_IMODE(st.st_mode):o}", st.st_size) != (mode, int(size)) or abs(
            st.st_mtime - float(mtime)
        ) > 1e-3:
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


def every_path(*roots: Path) -> dict[str, tuple]:
    """Every path below the roots, state dirs and bytecode caches included: kind, mode, size, mtime and
    the bytes' sha256 (a symlink: its target), for a test that nothing at all was written."""
    out: dict[str, tuple] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                st = p.lstat()
                if stat.S_ISLNK(st.st_mode):
                    body: object = os.readlink(p)
                elif stat.S_ISREG(st.st_mode):
                    body = _sha256(p, st)
                else:
                    body = None
                out[str(p)] = (
                    stat.S_IFMT(st.st_mode),
                    stat.S_IMODE(st.st_mode),
                    st.st_size,
                    st.st_mtime_ns,
                    body,
                )
    return out


class _InVenv:
    """The site-packages and the state dir of a target's venv (`self.venv`)."""

    venv: Path

    @property
    def site(self) -> Path:
        return self.venv / SITE_REL

    @property
    def state_dir(self) -> Path:
        return self.venv / ".patchkeeper"


@dataclass
class Env(_InVenv):
    """A workspace in a tmp dir with one local target, `local`, over a real sglang venv."""

    root: Path
    venv: Path
    unit: Path

    @property
    def dropin(self) -> Path:
        """The patch sets' systemd drop-in: <unit>.d/50-patchkeeper.conf beside the host's unit."""
        return self.unit.with_name(self.unit.name + ".d") / "50-patchkeeper.conf"

    def running(self) -> str:
        """What the unit runs: the host's unit, then its drop-in (the patch sets' ExecStart)."""
        return self.unit.read_text() + (self.dropin.read_text() if self.dropin.exists() else "")

    def pk(self, *args: str, check: int | None = 0, env: dict | None = None) -> subprocess.CompletedProcess:
        """Run the real CLI in a subprocess; assert its exit code unless check is None."""
        proc = subprocess.run(
            [sys.executable, "-m", "patchkeeper", "--workspace", str(self.root), *args],
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
        )
        if check is not None:
            assert proc.returncode == check, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc

    def pk_bytes(self, *args: str) -> bytes:
        """Run the real CLI; its stdout as bytes (a patch may hold CRs that text mode would turn into newlines)."""
        proc = subprocess.run(
            [sys.executable, "-m", "patchkeeper", "--workspace", str(self.root), *args], capture_output=True
        )
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        return proc.stdout

    def snapshot(self) -> dict:
        """Every file of the venv, the unit and the drop-in (whose {{ python }} is this venv's own interpreter,
        named PYTHON, so that clones of one workspace in other venvs compare equal)."""
        files = tree(self.venv)
        for key, path in (("@unit", self.unit), ("@dropin", self.dropin)):
            data = (
                path.read_bytes().replace(f"{self.venv}/bin/python".encode(), b"PYTHON")
                if path.exists()
                else b""
            )
            files[key] = (
                (hashlib.sha256(data).hexdigest(), stat.S_IMODE(path.stat().st_mode))
                if path.exists()
                else None
            )
        return files


def fingerprinted(env: Env) -> list[tuple[str, bool]]:
    """Each ledger entry's kind, and whether it keeps an environment fingerprint that reads back
    from the target's store (issue 9: every recorded state and transaction carries one)."""
    out = []
    for path in sorted((env.state_dir / "ledger").glob("*.json")):
        entry = json.loads(path.read_text())
        algo, _, hexd = entry.get("env", "").partition(":")
        obj = env.state_dir / "store" / "objects" / algo / hexd[:2] / hexd[2:]
        out.append(
            (entry["kind"], bool(hexd) and obj.is_file() and "distributions" in json.loads(obj.read_bytes()))
        )
    return out


def make_workspace(root: Path, venv: Path, extra_toml: str = "", systemd: str = "off") -> Env:
    """A workspace of one target, local, with the demo unit in the workspace. `systemd`: which manager
    its commands ask what runs; "off" unless a test asks for one, so that a machine booted with systemd
    never has a test ask its real manager (tests/livesystemd.py gives a test a manager of its own)."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "patchsets", root / "patchsets")
    unit = root / "systemd" / "sglang-qwen.service"
    unit.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "demo" / "sglang-qwen.service", unit)
    (root / "patchkeeper.toml").write_text(
        f'default_target = "local"\n\n[targets.local]\npython = "{venv}/bin/python"\npackage = "sglang"\n'
        f'systemd = "{systemd}"\n\n'
        f'[targets.local.vars]\ndraft_model_path = "{DRAFT}"\n\n'
        f'[targets.local.files]\nunit = "{unit}"\n{extra_toml}'
    )
    return Env(root, venv, unit)


@pytest.fixture(scope="session")
def installed_bin(tmp_path_factory) -> Path:
    """The bin directory of patchkeeper installed as `uv tool install` does: its own venv, no pip."""
    return install_without_pip(tmp_path_factory.mktemp("installed"))


WHEELS = Path(os.environ.get("PK_WHEELS", REPO / ".cache" / "wheels"))


def release_wheel(version: str) -> Path:
    """The real sglang wheel of `version` that `make test` downloads (0.5.22, 0.5.23)."""
    found = sorted((WHEELS / "port").glob(f"sglang-{version}-*.whl"))
    if not found:
        pytest.fail(f"no sglang {version} wheel in {WHEELS / 'port'}: run `make test`, which downloads it")
    return found[-1]


def install_release(venv: Path, version: str) -> None:
    """pip of the venv itself installs that release over what is there, offline, without compiling."""
    proc = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "install",
            "--no-index",
            "--no-compile",
            "--no-deps",
            "--force-reinstall",
            str(release_wheel(version)),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


@dataclass
class Remote(_InVenv):
    """A workspace whose target `far` is a venv reached over the suite's sshd."""

    env: Env
    venv: Path

    def pk(self, *args: str, check: int | None = 0) -> subprocess.CompletedProcess:
        return self.env.pk(*args, "-t", "far", check=check)


@pytest.fixture
def remote(tmp_path, pristine_venv, sshd) -> Remote:  # noqa: F811
    write_client_config(Path(os.environ["HOME"]), sshd, ["far"])
    venv = copy_venv(pristine_venv, tmp_path / "venv-far")
    unit = tmp_path / "unit-far" / "sglang-qwen.service"
    unit.parent.mkdir()
    shutil.copy(REPO / "demo" / "sglang-qwen.service", unit)
    toml = (
        f'\n[targets.far]\nssh = "far"\npython = "{venv}/bin/python"\npackage = "sglang"\n'
        f'[targets.far.vars]\ndraft_model_path = "{DRAFT}"\n[targets.far.files]\nunit = "{unit}"\n'
    )
    return Remote(make_workspace(tmp_path / "ws", tmp_path / "venv-local", toml), venv)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace as `patchkeeper init` makes it: no target yet (test_port.py has a `ws` of its own)."""
    root = tmp_path / "ws"
    subprocess.run(
        [sys.executable, "-m", "patchkeeper", "init", "-w", str(root)], check=True, capture_output=True
    )
    return root


@pytest.fixture
def env(tmp_path, pristine_venv) -> Env:
    venv = copy_venv(pristine_venv, tmp_path / "venv")
    return make_workspace(tmp_path / "ws", venv)


_RECORD_BASELINE = """\
import sys
from pathlib import Path
from patchkeeper import workspace
from patchkeeper.change import adopt
from patchkeeper.change.mirror import try_mirror
from patchkeeper.change.session import Session
ws = workspace.load(Path(sys.argv[1]))
with Session(ws, None, "apply") as s:
    entry = adopt.ensure_baseline(s)
    assert entry is not None and try_mirror(ws, s, "the baseline was recorded") is None
"""


@pytest.fixture(scope="session")
def _baselined_template(tmp_path_factory, pristine_venv) -> tuple[Path, Path]:
    """The `env` fixture's target with the baseline a first change records (adopt.ensure_baseline and
    the mirror, the code `apply` runs, in a process of its own), made once per worker at `live`."""
    live = tmp_path_factory.getbasetemp() / "baselined"
    live.mkdir()
    env = make_workspace(live / "ws", copy_venv(pristine_venv, live / "venv"))
    proc = subprocess.run(
        [sys.executable, "-c", _RECORD_BASELINE, str(env.root)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    template = live.with_name("baselined-template")
    os.rename(live, template)
    return live, template


@pytest.fixture
def baselined(_baselined_template) -> Env:
    """An `env` whose baseline is recorded, as by its first change. A baseline hashes, checks against
    RECORD and packs every file (2 s of CPU: a quarter of the suite's when each test paid for its own),
    so it is made once per worker and copied for each test, to one path (a state records its paths):
    site-packages hardlinked as the `env` fixture's, the state dir and the workspace copied.

    The copy's ledger entries are written after its files, as a first change writes them: a hardlink
    moves a file's ctime, and a pyc changed after the baseline's entry was written is compared with its
    source by compiling it (host/bytecode._judge), 10 s of CPU for sglang's 4,719 pycs when the copied
    entries kept the template's older mtime (the template's pycs are the same inodes, vouched for by its
    baseline). The mtimes are set a clock tick after the last file was linked."""
    live, template = _baselined_template
    _rm(live)  # the previous test's
    live.mkdir()
    subprocess.run(["cp", "-al", str(template / "venv"), str(live / "venv")], check=True)
    state = live / "venv" / ".patchkeeper"
    _rm(state)
    subprocess.run(["cp", "-a", str(template / "venv" / ".patchkeeper"), str(state)], check=True)
    subprocess.run(["cp", "-a", str(template / "ws"), str(live / "ws")], check=True)
    time.sleep(0.02)  # a tick of the file systems' clock (at most 10 ms) after the last link
    for entry in (state / "ledger").glob("*.json"):
        os.utime(entry)
    return Env(live / "ws", live / "venv", live / "ws" / "systemd" / "sglang-qwen.service")


def _rm(path: Path) -> None:
    """rm -rf `path`, started by os.posix_spawnp: no test replaces it (one sets subprocess.Popen to None)."""
    argv = ["rm", "-rf", "--one-file-system", str(path)]
    quiet = [(os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)]
    os.waitpid(os.posix_spawnp("rm", argv, os.environ, file_actions=quiet), 0)


HERE = Path(__file__).parent
SYSTEMD = HERE / "fake_systemd.py"
STANDIN = HERE / "standin"
HOSTS = ("ct129", "ct200")  # the ssh aliases of the `fleet` fixture's two hosts


@pytest.fixture
def service(request, tmp_path):
    """`service(rules, ...)` adds a [service] table whose restart (re)starts the fake server: to the
    test's `baselined` target where it asks for one, else to its `env`."""
    env = request.getfixturevalue("baselined" if "baselined" in request.fixturenames else "env")
    started: list[Service] = []

    def add(
        *rules: str,
        default: str = "healthy",
        server_args: str = "",
        ready_timeout: float = 5,
        smoke: str = "",
    ) -> Service:
        svc = Service(free_port(), tmp_path / "fake.pid", tmp_path / "fake.log")
        args = [
            sys.executable,
            str(FAKE),
            "start",
            "--state",
            str(env.unit),
            "--state",
            str(env.dropin),
            "--port",
            str(svc.port),
            "--pidfile",
            str(svc.pidfile),
            "--log",
            str(svc.log),
            "--default",
            default,
        ]
        for rule in rules:
            args += ["--when", rule]
        restart = shlex.join(args) + (" " + server_args if server_args else "")
        with open(env.root / "patchkeeper.toml", "a") as f:
            f.write(
                f"\n[targets.local.service]\nrestart = {json.dumps(restart)}\n"
                f"logs = {json.dumps('tail -n 20 ' + shlex.quote(str(svc.log)))}\n"
                f'base_url = "{svc.base_url}"\nready_timeout = {ready_timeout}\nrestart_timeout = 20\n'
                "match_unit = false\n"  # this stand-in is not started from the unit's ExecStart
                f"[targets.local.service.smoke]\nmax_tokens = 24\ntimeout = 3\nmin_tokens = 16\n"
                f"min_tokens_per_s = 20\n{smoke}"
            )
        started.append(svc)
        return svc

    yield add
    for svc in started:
        svc.stop()


@pytest.fixture
def deployment(env, tmp_path):
    """A [service] whose restart does what systemd does with the target's unit and its drop-ins
    (`daemon-reload`, then `restart`): the process on the port runs the ExecStart in effect (with the
    stand-in sglang on its PYTHONPATH only). `systemctl` on `path` runs tests/fake_systemd.py's verbs
    (restart, stop, daemon-reload); `restart_only` restarts what the last daemon-reload loaded (no
    daemon-reload)."""
    port, journal, pidfile = free_port(), tmp_path / "journal.log", tmp_path / "server.pid"
    rules, delay, loaded = tmp_path / "rules.json", tmp_path / "delay", tmp_path / "systemd-loaded.json"
    rules.write_text("{}")
    unit = ["--unit", str(env.unit)]
    systemd = [
        sys.executable,
        str(SYSTEMD),
        "restart",
        *unit,
        "--pidfile",
        str(pidfile),
        "--journal",
        str(journal),
        "--port",
        str(port),
        "--setenv",
        f"PYTHONPATH={STANDIN}:{HERE}",
        "--setenv",
        f"STANDIN_RULES={rules}",
        "--setenv",
        f"STANDIN_DELAY_FILE={delay}",
    ]
    reload = [sys.executable, str(SYSTEMD), "daemon-reload", *unit, "--loaded", str(loaded)]
    restart_only = [*systemd, "--loaded", str(loaded)]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "systemctl"
    shim.write_text(
        f'#!/bin/sh\nverb=$1; shift\nexec {shlex.join([sys.executable, str(SYSTEMD)])} "$verb" '
        f'{shlex.join(unit)} --loaded {shlex.quote(str(loaded))} "$@"\n'
    )
    shim.chmod(0o755)
    # the baseline unit starts the same stand-in: its ExecStart with this test's python, host and port
    text = env.unit.read_text().replace("/root/ml-env/bin/python3", sys.executable)
    env.unit.write_text(
        text.replace("--port 30000", f"--port {port}").replace("--host 0.0.0.0", "--host 127.0.0.1")
    )
    logs = (
        f"awk -v s=\"$PATCHKEEPER_SINCE\" '/^-- restart at /{{p = ($4 >= s)}} p' {shlex.quote(str(journal))}"
    )

    def configure(restart: str | None = None, smoke: str = "") -> None:
        toml = env.root / "patchkeeper.toml"
        text = toml.read_text().replace(
            "[targets.local.vars]\n",
            f'[targets.local.vars]\npython = "{sys.executable}"\nhost = "127.0.0.1"\nport = {port}\n'
            'model_path = "/srv/models/Qwen3.6-27B"\ntp_size = 1\n',
        )
        toml.write_text(
            text
            + f"\n[targets.local.service]\nrestart = {json.dumps(restart or shlex.join(reload) + ' && ' + shlex.join(restart_only))}\n"
            f'logs = {json.dumps(logs)}\nbase_url = "http://127.0.0.1:{port}"\nready_timeout = 20\n'
            f"restart_timeout = 20\n[targets.local.service.smoke]\nmax_tokens = 24\ntimeout = 10\n"
            f"min_tokens = 16\nmin_tokens_per_s = 1\n{smoke}"
        )

    def rule(**by_algorithm) -> None:
        rules.write_text(json.dumps(by_algorithm))

    d = type(
        "Deployment",
        (),
        {
            "configure": staticmethod(configure),
            "rules": rules,
            "delay": delay,
            "journal": journal,
            "port": port,
            "systemd": systemd,
            "rule": staticmethod(rule),
            "reload": reload,
            "restart_only": restart_only,
            "path": {"PATH": f"{bindir}:{os.environ['PATH']}"},
        },
    )
    yield d
    subprocess.run([*systemd[:2], "stop", *systemd[3:11]], check=False)


@pytest.fixture
def live_systemd(tmp_path) -> Iterator[LiveManager]:
    """A live systemd 252 user manager in a private pid and mount namespace (tests/livesystemd.py) whose
    unit search path is systemd's system search path (patchkeeper's default unit_path) below
    tmp_path/"root" (`manager.root`); killed with everything it started when the test ends, failed or not."""
    reason = live_systemd_missing()
    if reason:
        pytest.skip(reason)
    root = tmp_path / "root"
    manager = LiveManager.start(tmp_path / "live-manager", below_root(root, SYSTEMD_UNIT_PATH))
    manager.root = root
    try:
        yield manager
    finally:
        manager.stop()


@pytest.fixture(scope="session")
def repair_pristine(pristine_venv, tmp_path_factory) -> Path:
    """The sglang venv (hardlinked) with six and markupsafe installed from their real wheels."""
    venv = copy_venv(pristine_venv, tmp_path_factory.mktemp("repair-pristine") / "venv")
    pip_install(venv, wheel("six-1.17.0-*.whl"), wheel("markupsafe-3.0.4-*.whl"))
    return venv


@dataclass
class Fleet:
    """Two SSH hosts (venvs reached through the test sshd) and a workspace naming them."""

    env: Env  # the workspace; its `local` target is a third venv, copied on demand
    sshd: object
    venvs: dict[str, Path]
    units: dict[str, Path]

    def site(self, host: str) -> Path:
        return self.venvs[host] / SITE_REL

    def dropin(self, host: str) -> Path:
        """The host's drop-in beside its unit (the patch sets' role file)."""
        return self.units[host].with_name(self.units[host].name + ".d") / "50-patchkeeper.conf"

    def dropin_text(self, host: str) -> bytes:
        """A drop-in as every host has it: its {{ python }} is the host's own interpreter, named PYTHON here."""
        path, venv = (
            (self.env.dropin, self.env.venv) if host == "local" else (self.dropin(host), self.venvs[host])
        )
        return path.read_bytes().replace(f"{venv}/bin/python".encode(), b"PYTHON")

    def state(self, host: str) -> dict:
        """Every file of a host's venv (not its state dir), its unit file and drop-in (its interpreter
        named PYTHON): sha256 and mode."""
        files = tree(self.venvs[host])
        files["@unit"] = tree(self.units[host].parent)[self.units[host].name]
        if self.dropin(host).exists():
            files["@dropin"] = (
                hashlib.sha256(self.dropin_text(host)).hexdigest(),
                tree(self.dropin(host).parent)[self.dropin(host).name][1],
            )
        return files

    def pk(self, *args, **kw):
        return self.env.pk(*args, **kw)


@pytest.fixture
def fleet(tmp_path, pristine_venv, sshd) -> Fleet:  # noqa: F811
    write_client_config(Path(os.environ["HOME"]), sshd, list(HOSTS))
    toml, venvs, units = "", {}, {}
    for host in HOSTS:
        venvs[host] = copy_venv(pristine_venv, tmp_path / f"venv-{host}")
        units[host] = tmp_path / f"unit-{host}" / "sglang-qwen.service"
        units[host].parent.mkdir()
        shutil.copy(REPO / "demo" / "sglang-qwen.service", units[host])
        toml += (
            f'\n[targets.{host}]\nssh = "{host}"\npython = "{venvs[host]}/bin/python"\npackage = "sglang"\n'
            'systemd = "off"\n'
            f'[targets.{host}.vars]\ndraft_model_path = "{DRAFT}"\n[targets.{host}.files]\nunit = "{units[host]}"\n'
        )
    env = make_workspace(tmp_path / "ws", tmp_path / "venv-local", toml)
    return Fleet(env, sshd, venvs, units)
