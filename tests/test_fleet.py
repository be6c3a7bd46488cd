"""`--all` (targets/fleet.py): local targets run in worker processes (a concurrent.futures pool),
at most one per CPU; an error stays that target's one line; a target whose run raised, or whose
worker died, is reported as its line, never lost; nothing the command had buffered for stdout is
written twice; no worker outlives the command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from patchkeeper import workspace
from patchkeeper.errors import Refused
from patchkeeper.host.disk import cpus
from patchkeeper.targets import fleet

CONTROLLER = os.getpid()  # the pytest process (a worker that imports this module has its own)


def _workspace(root: Path, names: list[str]) -> workspace.Workspace:
    (root / "patchkeeper.toml").write_text(
        "".join(f'[targets.{n}]\npython = "/nonexistent/{n}/bin/python"\npackage = "sglang"\n' for n in names)
    )
    return workspace.load(root)


def _where(ws: workspace.Workspace, name: str) -> tuple[str, int]:
    if name == "refused":
        raise Refused("target refused\nsecond line", "a hint")
    return name, os.getpid()


def _raises_on_t1(ws: workspace.Workspace, name: str) -> tuple[str, int]:
    if name == "t1":
        raise RuntimeError("a bug\nits second line")
    return name, os.getpid()


def _dies_on_t1(ws: workspace.Workspace, name: str) -> tuple[str, int]:
    if name == "t1":
        os._exit(9)  # as a worker killed mid-target would
    return name, os.getpid()


def _children() -> set[int]:
    """This process's children but multiprocessing's resource tracker (which ends with it)."""
    children = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = f.read().rpartition(")")[2].split()[1]
            with open(f"/proc/{pid}/cmdline") as f:
                cmdline = f.read()
        except OSError:  # gone meanwhile
            continue
        if ppid == str(os.getpid()) and "resource_tracker" not in cmdline:
            children.add(int(pid))
    return children


@pytest.fixture
def no_child_left():
    """After the test, no child of this process that it started still runs (another test's session
    fixture, the suite's sshd in this worker, may)."""
    before = _children()
    return lambda: _children() <= before


def test_local_targets_run_in_at_most_one_process_per_cpu_and_an_error_stays_its_line(
    tmp_path, no_child_left
):
    names = [f"t{i}" for i in range(6)] + ["refused"]
    got = fleet.each(_workspace(tmp_path, names), _where, "test", progress=False)
    assert list(got) == sorted(names)
    assert got["refused"] == fleet.Failed("target refused", "a hint", 2)
    answers = [got[n] for n in names if n != "refused"]
    assert [a[0] for a in answers] == names[:-1]
    pids = {a[1] for a in answers}
    assert CONTROLLER not in pids and 1 <= len(pids) <= cpus()
    assert no_child_left()


def test_a_target_whose_run_raised_is_reported_and_the_others_finish(tmp_path, no_child_left):
    got = fleet.each(_workspace(tmp_path, ["t0", "t1", "t2", "t3"]), _raises_on_t1, "test", progress=False)
    assert str(got["t1"]) == "internal error: RuntimeError: a bug" and isinstance(got["t1"], fleet.Failed)
    assert all(got[n][0] == n and got[n][1] != CONTROLLER for n in ("t0", "t2", "t3"))
    assert no_child_left()


def test_a_target_whose_worker_died_is_reported_not_lost(tmp_path, no_child_left):
    """A worker that dies takes the pool with it: its target, and any other the pool had not
    answered yet, is reported as such; every target has its line."""
    names = ["t0", "t1", "t2", "t3"]
    got = fleet.each(_workspace(tmp_path, names), _dies_on_t1, "test", progress=False)
    died = "its worker process ended before it answered"
    assert list(got) == names and str(got["t1"]) == died
    assert all(str(got[n]) == died or got[n][0] == n for n in names)
    assert no_child_left()


_BUFFERED = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import test_fleet
from patchkeeper import workspace
from patchkeeper.targets import fleet
sys.stdout.write("before\\n")  # block-buffered: stdout is a pipe
got = fleet.each(workspace.load(Path(sys.argv[1])), test_fleet._where, "test", progress=False)
print(sorted(got))
"""


def test_what_was_buffered_for_stdout_is_written_once(tmp_path):
    _workspace(tmp_path, ["a", "b", "c"])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # or nothing would be buffered
    proc = subprocess.run(
        [sys.executable, "-c", _BUFFERED, str(tmp_path), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    assert proc.stdout == "before\n['a', 'b', 'c']\n"
