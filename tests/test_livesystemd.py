"""The live systemd manager fixture (tests/livesystemd.py): it loads a unit from the test root's search path,
starts it with the argv and environment systemd builds, answers `systemctl show`, and leaves nothing running
behind it, also when the test process dies."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import livesystemd
import pytest

HERE = Path(__file__).parent


def test_the_manager_loads_and_starts_a_unit_from_the_test_root(live_systemd):
    m, root = live_systemd, live_systemd.root
    assert root is not None
    m.write(
        root,
        {
            "usr/lib/systemd/system/probe@.service": (
                "[Service]\nType=oneshot\nEnvironment=A=1\n"
                f"ExecStart={m.recorder} --instance %i 'two words'\n"
            ),
            "run/systemd/system/probe@.service.d/10-more.conf": '[Service]\nEnvironment=B="x y"\n',
        },
    )
    m.daemon_reload()
    done = m.start_unit("probe@one.service")
    assert done.returncode == 0, (done.stderr, m.log())
    got = livesystemd.record(m.records, "probe@one.service")
    assert got is not None
    argv, env = got
    assert argv == [str(m.recorder), "--instance", "one", "two words"]
    assert env["A"] == "1" and env["B"] == "x y"
    shown = m.show("probe@one.service", "LoadState", "FragmentPath", "DropInPaths", "Result")
    assert shown == {
        "LoadState": "loaded",
        "FragmentPath": str(root / "usr/lib/systemd/system/probe@.service"),
        "DropInPaths": str(root / "run/systemd/system/probe@.service.d/10-more.conf"),
        "Result": "success",
    }


def test_a_unit_the_manager_refuses_says_why(live_systemd):
    m, root = live_systemd, live_systemd.root
    assert root is not None
    m.write(root, {"etc/systemd/system/bad.service": "[Service]\nExecStart=relative/path x\n"})
    m.daemon_reload()
    assert m.start_unit("bad.service").returncode != 0
    shown = m.show("bad.service", "LoadState", "LoadError")
    assert shown["LoadState"] == "bad-setting" and "BadUnitSetting" in shown["LoadError"]
    assert "relative/path" in m.log()  # its own log says which line


def test_the_namespace_is_private_and_dies_with_stop(live_systemd):
    m = live_systemd
    inside = Path(f"/proc/{m.init}/mountinfo").read_text()
    outside = Path("/proc/self/mountinfo").read_text()
    ours = [ln for ln in inside.splitlines() if " /run/systemd " in ln and " tmpfs " in ln]
    assert ours and ours[0].split()[0] not in {ln.split()[0] for ln in outside.splitlines()}
    manager_pids = [p for p in livesystemd._children(m.init)]
    assert manager_pids and Path(f"/proc/{manager_pids[0]}/cmdline").read_bytes().startswith(b"/lib/systemd")
    m.stop()
    assert _all_gone([m.init, *manager_pids])
    assert not any(cg.exists() for cg in m.cgroups)


def test_a_killed_test_process_leaves_no_manager_running(tmp_path):
    """The test process dies without a teardown (SIGKILL): its manager's namespace dies with it."""
    if livesystemd.why_not():
        pytest.skip(livesystemd.why_not() or "")
    script = (
        "import sys, os, time; sys.path.insert(0, sys.argv[1]); from pathlib import Path; import livesystemd\n"
        "m = livesystemd.LiveManager.start(Path(sys.argv[2]), [Path(sys.argv[2]) / 'units'])\n"
        "print(m.init, m.proc.pid, m.runtime, *m.cgroups, flush=True); time.sleep(3600)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(HERE), str(tmp_path / "m")], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    init, unshare, runtime, *cgroups = child.stdout.readline().split()
    assert Path(f"/proc/{init}").exists()
    child.kill()
    child.wait()
    assert _all_gone([int(init), int(unshare)])
    for cg in map(Path, cgroups):  # nobody removed its cgroups: they are empty, and removable
        livesystemd._remove_cgroup(cg)
        assert not cg.exists()
    shutil.rmtree(runtime)


def _all_gone(pids: list[int]) -> bool:
    """Whether every process of `pids` is gone (the kernel's SIGKILLs land asynchronously: it waits)."""
    for _ in range(1000):
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.01)
    return False


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and os.path.exists(f"/proc/{pid}")
