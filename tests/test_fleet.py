"""`--all` (commands/fleet.py): local targets run in forked processes, at most one per CPU, each
claiming the next target from a shared pipe; a target whose process died before answering is run
again by the command itself; an error stays that target's one line; nothing the command had
buffered for stdout is written twice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from patchkeeper import workspace
from patchkeeper.commands import fleet
from patchkeeper.errors import Refused
from patchkeeper.host.disk import cpus

CONTROLLER = os.getpid()  # the pytest process: a forked worker inherits the value, not the pid


def _workspace(root: Path, names: list[str]) -> workspace.Workspace:
    (root / "patchkeeper.toml").write_text("".join(
        f'[targets.{n}]\npython = "/nonexistent/{n}/bin/python"\npackage = "sglang"\n' for n in names))
    return workspace.load(root)


def _where(ws: workspace.Workspace, name: str) -> tuple[str, int]:
    if name == "refused":
        raise Refused("target refused\nsecond line", "a hint")
    return name, os.getpid()


def _dies_on_t1(ws: workspace.Workspace, name: str) -> tuple[str, int]:
    if name == "t1" and os.getpid() != CONTROLLER:
        os._exit(9)  # as a worker killed mid-target would
    return name, os.getpid()


def _no_child_left() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_local_targets_run_in_at_most_one_process_per_cpu_and_an_error_stays_its_line(tmp_path):
    names = [f"t{i}" for i in range(6)] + ["refused"]
    got = fleet.each(_workspace(tmp_path, names), _where, "test", progress=False)
    assert list(got) == sorted(names)
    assert got["refused"] == "target refused"
    answers = [got[n] for n in names if n != "refused"]
    assert [a[0] for a in answers] == names[:-1]
    pids = {a[1] for a in answers}
    assert CONTROLLER not in pids and 1 <= len(pids) <= cpus()
    assert _no_child_left()


def test_a_target_whose_process_died_is_run_by_the_command(tmp_path):
    got = fleet.each(_workspace(tmp_path, ["t0", "t1", "t2", "t3"]), _dies_on_t1, "test", progress=False)
    assert got["t1"] == ("t1", CONTROLLER)
    assert all(got[n][0] == n and got[n][1] != CONTROLLER for n in ("t0", "t2", "t3"))
    assert _no_child_left()


_BUFFERED = '''
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import test_fleet
from patchkeeper import workspace
from patchkeeper.commands import fleet
sys.stdout.write("before\\n")  # block-buffered: stdout is a pipe
got = fleet.each(workspace.load(Path(sys.argv[1])), test_fleet._where, "test", progress=False)
print(sorted(got))
'''


def test_what_was_buffered_for_stdout_is_written_once(tmp_path):
    _workspace(tmp_path, ["a", "b", "c"])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # or nothing would be buffered
    proc = subprocess.run([sys.executable, "-c", _BUFFERED, str(tmp_path), str(Path(__file__).parent)],
                          capture_output=True, text=True, check=True, env=env)
    assert proc.stdout == "before\n['a', 'b', 'c']\n"
