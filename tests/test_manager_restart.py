"""The restart path against a live systemd 252 manager (tests/livesystemd.py): `apply` and `rollback`
with a [service] whose unit the manager runs (the stand-in sglang of tests/standin), daemon-reload and
restart by the manager, then the check of the new main pid, its argv and environment, and NeedDaemonReload;
a restart without the daemon-reload is caught and not claimed as effective.

patchkeeper runs inside the manager's pid and mount namespace (nsenter), as it runs on a host whose init
is systemd: /run/systemd/system is there, MainPID is a pid of its /proc, and `systemctl --user` finds the
manager through $XDG_RUNTIME_DIR. The target's `systemd = "user"` says which manager to ask. (Asking the
manager from outside would not be honest: systemd refuses a private-bus client whose pid it cannot see,
and a MainPID of the namespace names another process, or none, in this machine's /proc.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DRAFT, HERE, REPO, STANDIN, Env, copy_venv
from helpers import free_port, ledger, stack
from livesystemd import LiveManager, below_root

from patchkeeper.workspace import SYSTEMD_UNIT_PATH

UNIT = "sglang-qwen.service"
RELOAD_AND_RESTART = f"systemctl --user daemon-reload && systemctl --user restart {UNIT}"
RESTART_ONLY = f"systemctl --user restart {UNIT}"


class Live:
    """A workspace whose target `local` has its unit in the live manager's search path."""

    def __init__(self, tmp_path: Path, venv: Path, m: LiveManager) -> None:
        assert m.root is not None
        self.m, self.port = m, free_port()
        self.unit = m.root / "etc/systemd/system" / UNIT
        self.log = tmp_path / "server.log"
        self.rules = tmp_path / "rules.json"
        self.rules.write_text("{}")
        self.unit.parent.mkdir(parents=True, exist_ok=True)
        self.unit.write_text(
            "[Unit]\nDescription=the stand-in sglang\n\n[Service]\nType=simple\n"
            f'Environment=PYTHONUNBUFFERED=1 "PYTHONPATH={STANDIN}:{HERE}" STANDIN_RULES={self.rules}\n'
            f"StandardOutput=append:{self.log}\nStandardError=append:{self.log}\n"
            f"ExecStart={sys.executable} -m sglang.launch_server --model-path /srv/models/Qwen3.6-27B "
            f"--port {self.port} --host 127.0.0.1 --tp-size 1\n"
        )
        root = tmp_path / "ws"
        root.mkdir()
        shutil.copytree(REPO / "patchsets", root / "patchsets")
        self.env = Env(root, venv, self.unit)
        self.unit_path = [str(p) for p in below_root(m.root, SYSTEMD_UNIT_PATH)]

    def configure(self, restart: str) -> None:
        (self.env.root / "patchkeeper.toml").write_text(
            f'default_target = "local"\n\n[targets.local]\npython = "{self.env.venv}/bin/python"\n'
            f'package = "sglang"\nsystemd = "user"\nunit_path = {json.dumps(self.unit_path)}\n\n'
            f'[targets.local.vars]\ndraft_model_path = "{DRAFT}"\npython = "{sys.executable}"\n'
            f'host = "127.0.0.1"\nport = {self.port}\nmodel_path = "/srv/models/Qwen3.6-27B"\ntp_size = 1\n\n'
            f'[targets.local.files]\nunit = "{self.unit}"\n\n'
            f"[targets.local.service]\nrestart = {json.dumps(restart)}\n"
            f"logs = {json.dumps(f'tail -n 40 {self.log}')}\n"
            f'base_url = "http://127.0.0.1:{self.port}"\nready_timeout = 30\nrestart_timeout = 30\n'
            "[targets.local.service.smoke]\nmax_tokens = 24\ntimeout = 10\nmin_tokens = 16\n"
            "min_tokens_per_s = 1\n"
        )

    def pk(self, *args: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
        """The real CLI, inside the manager's namespaces, with its $XDG_RUNTIME_DIR."""
        proc = subprocess.run(
            ["nsenter", "-t", str(self.m.init), "-p", "-m", sys.executable, "-m", "patchkeeper"]
            + ["--workspace", str(self.env.root), *args],
            capture_output=True,
            text=True,
            env={**os.environ, "XDG_RUNTIME_DIR": str(self.m.runtime)},
        )
        if check is not None:
            assert proc.returncode == check, (
                f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}\n{self.m.log()}"
            )
        return proc

    def main(self) -> tuple[int, list[str], float]:
        """The manager's main pid of the unit, its argv (/proc inside the namespace) and start time."""
        shown = self.m.show(UNIT, "MainPID", "ExecMainStartTimestampMonotonic", "NeedDaemonReload")
        pid = int(shown["MainPID"])
        assert pid > 0, shown
        cmdline = subprocess.run(
            ["nsenter", "-t", str(self.m.init), "-p", "-m", "cat", f"/proc/{pid}/cmdline"],
            capture_output=True,
            check=True,
        ).stdout
        return pid, cmdline.decode().split("\0")[:-1], float(shown["ExecMainStartTimestampMonotonic"])


@pytest.fixture
def live(tmp_path, pristine_venv, live_systemd) -> Live:
    """The live manager runs the host's unit (the stand-in on a port of its own) before any change."""
    venv = copy_venv(pristine_venv, tmp_path / "venv")
    live = Live(tmp_path, venv, live_systemd)
    live_systemd.daemon_reload()
    started = live_systemd.start_unit(UNIT)
    assert started.returncode == 0, (started.stderr, live_systemd.log())
    return live


def checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def test_apply_and_rollback_restart_through_the_manager_and_check_the_new_main_pid(live):
    live.configure(RELOAD_AND_RESTART)
    pid0, argv0, _ = live.main()
    assert "--speculative-algorithm" not in argv0

    proc = live.pk("apply", "ddtree")
    pid1, argv1, _ = live.main()
    assert pid1 != pid0 and argv1[argv1.index("--speculative-algorithm") + 1] == "DDTREE"
    assert f"--port {live.port}" in " ".join(argv1) and argv1[0] == sys.executable
    report = ledger(live.env)[-1]["extra"]["verify"]
    got = checks(report)
    assert report["ok"] and [c["name"] for c in report["checks"]][:4] == [
        "restart",
        "ready",
        "systemd",
        "server",
    ]
    assert got["systemd"]["ok"] and not got["systemd"]["warned"], got["systemd"]
    detail = got["systemd"]["detail"]
    assert (
        f"pid {pid1} started after the restart (at " in detail
        and f"pid {pid0} before it" in detail
        and f"pid {pid1} runs the ExecStart= systemd loaded" in detail
    )
    assert "NeedDaemonReload=no" in detail and "Environment= assignment(s)" in detail
    assert (
        f"pid {pid1} runs the unit's effective ExecStart (from systemd (user manager))"
        in got["server"]["detail"]
    )
    assert got["algorithm"]["ok"] and "DDTREE" in got["algorithm"]["detail"]
    assert "systemd  ok" in proc.stdout.replace("  ok  ", "  ok") or "systemd" in proc.stdout

    status = json.loads(live.pk("status", "--json").stdout)
    seen = status["manager"]
    assert seen["asked"] and seen["scope"] == "user" and seen["main_pid"] == pid1
    assert seen["need_daemon_reload"] is False and seen["runs"] == argv1 and seen["runs_loaded"] is True
    assert seen["dropins"] == [str(live.env.dropin)] and seen["disagreement"] is None
    assert status["exec_start"]["argv"] == argv1  # the files' reading agrees

    live.pk("rollback", "--to", "baseline")
    pid2, argv2, _ = live.main()
    assert pid2 not in (pid0, pid1) and argv2 == argv0 and not live.env.dropin.exists()
    report = ledger(live.env)[-1]["extra"]["verify"]
    assert (
        report["ok"] and f"pid {pid2} started after the restart (at " in checks(report)["systemd"]["detail"]
    )
    assert stack(live.env) == []


def test_a_restart_without_daemon_reload_is_not_taken_for_the_change(live):
    live.configure(RESTART_ONLY)
    pid0, argv0, _ = live.main()
    proc = live.pk("apply", "nextn", check=3)
    assert "verification FAILED (not-effective)" in proc.stdout
    # the drop-in's directory is new: systemd's NeedDaemonReload does not see it (its cache of the search
    # path lacks the directory), so the manager's DropInPaths are what tell
    assert live.m.show(UNIT, "NeedDaemonReload")["NeedDaemonReload"] == "no"
    assert f"systemd has not loaded {live.env.dropin} (not among the unit's DropInPaths)" in proc.stdout
    assert "the service runs the command line systemd loaded before" in proc.stdout
    verifications = [e["extra"]["verify"] for e in ledger(live.env) if e["kind"] == "verify"]
    assert [v["reason"] for v in verifications] == ["not-effective", None]  # the automatic rollback verifies
    assert not checks(verifications[0])["systemd"]["ok"]
    assert "FAILED and rolled back" in proc.stdout and stack(live.env) == []
    pid, argv, _ = live.main()
    assert pid != pid0 and argv == argv0  # restarted twice, the host's command line both times


def test_status_diff_and_verify_say_the_manager_runs_the_old_command_line(live):
    live.env.dropin.parent.mkdir()  # the drop-in directory is there when systemd loads the unit
    live.m.daemon_reload()
    live.configure(RESTART_ONLY)
    live.pk("apply", "nextn", "--no-verify")  # the drop-in is written; systemd is not told
    _, argv0, _ = live.main()
    proc = live.pk("status", check=1)
    assert live.m.show(UNIT, "NeedDaemonReload")["NeedDaemonReload"] == "yes"
    assert (
        "files match the recorded state, but not what systemd runs: systemd has not reloaded" in proc.stdout
    )
    assert "NeedDaemonReload=yes" in proc.stdout
    runs = next(line for line in proc.stdout.splitlines() if line.startswith("  runs (main pid"))
    assert runs.endswith(" ".join(argv0)) and "NEXTN" not in runs  # the manager's: the old command line
    assert "ExecStart (effective, from" in proc.stdout and "NEXTN" in proc.stdout  # the files' reading
    doc = json.loads(live.pk("status", "--json", check=1).stdout)
    assert doc["manager"]["need_daemon_reload"] is True and doc["manager"]["owed"]
    assert "systemd has not reloaded" in live.pk("diff", check=1).stdout
    verified = live.pk("verify", check=1)
    assert "verification FAILED (not-effective)" in verified.stdout

    live.m.daemon_reload()  # what the restart command lacked; the service is not restarted yet
    proc = live.pk("status", check=1)
    assert "systemd has not reloaded" not in proc.stdout and "NeedDaemonReload=yes" not in proc.stdout
    runs = next(line for line in proc.stdout.splitlines() if line.startswith("  runs (main pid"))
    assert runs.endswith(" ".join(argv0))  # what runs: the process's own argv, not what systemd loaded
    assert "  loaded (not running): " in proc.stdout and "a restart makes the loaded one run" in proc.stdout
    differs = next(
        line for line in proc.stdout.splitlines() if "the files' reading and systemd disagree" in line
    )
    assert "systemd's is taken" in differs and differs.endswith(f"systemd runs {' '.join(argv0)}")
    assert "files match the recorded state, but not what systemd runs: the main process" in proc.stdout
    assert "verification FAILED (not-effective)" in live.pk("verify", check=1).stdout
    again = live.pk("verify", "--restart")
    _, argv, _ = live.main()
    assert argv[argv.index("--speculative-algo") + 1] == "NEXTN" and "verification passed" in again.stdout


def test_the_manager_scope_is_checked_with_the_other_keys(tmp_path):
    (tmp_path / "patchkeeper.toml").write_text(
        '[targets.a]\npython = "/usr/bin/python3"\npackage = "sglang"\nsystemd = "session"\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "patchkeeper", "--workspace", str(tmp_path), "status"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert "[targets.a] has a bad systemd (one of 'system', 'user', 'off')" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2 and "Traceback" not in proc.stderr
