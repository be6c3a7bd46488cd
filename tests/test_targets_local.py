"""LocalTarget.run: no shell, output captured, a daemon left behind does not hold it, timeouts kill the group."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from patchkeeper.errors import TargetError
from patchkeeper.targets.links import PipeLink, program
from patchkeeper.targets.local import LocalTarget
from patchkeeper.targets.remote_agent import AgentProxy, Patience
from patchkeeper.workspace import TargetConfig


def _target(tmp_path) -> LocalTarget:
    return LocalTarget(TargetConfig(name="t", python="/nonexistent/python", package="x"))


def test_a_background_child_holding_stdout_does_not_hold_the_command(tmp_path):
    pidfile = tmp_path / "pid"
    code, out, err = _target(tmp_path).run(
        ["sh", "-c", f"sleep 30 & echo $! > {pidfile}; echo started"], timeout=5
    )
    try:
        assert (code, out) == (0, b"started\n"), err  # before: the pipe stayed open until the timeout (124)
    finally:
        os.kill(int(pidfile.read_text()), 9)


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "pid"
    code, _, err = _target(tmp_path).run(
        ["sh", "-c", f"sleep 30 & echo $! > {pidfile}; sleep 30"], timeout=0.5
    )
    assert code == 124 and b"timed out" in err
    child = int(pidfile.read_text())

    def state() -> str:
        try:
            return open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return "gone"

    for _ in range(100):  # SIGKILL is delivered asynchronously: wait for the kernel to finish it
        if state() in ("gone", "Z"):
            break
        time.sleep(0.05)
    assert state() in ("gone", "Z")


def test_arguments_are_not_interpreted_by_a_shell(tmp_path):
    code, out, _ = _target(tmp_path).run(["printf", "%s", "$(touch /tmp/pk-never) `x` ; rm -rf /"], timeout=5)
    assert code == 0 and out == b"$(touch /tmp/pk-never) `x` ; rm -rf /"
    assert not os.path.exists("/tmp/pk-never")


def test_memo_computes_once_per_instance_and_lets_instances_compute_at_once():
    """functools.cached_property (Python < 3.12) holds one lock per class: two targets opening at
    once waited for each other. Each memo here waits until both are inside their computation."""

    from patchkeeper.targets.base import memo

    both = threading.Barrier(2, timeout=60)  # broken (an error) if the second cannot enter
    calls = []

    class Thing:
        @memo
        def info(self) -> int:
            calls.append(self)
            both.wait()
            return id(self)

    things = [Thing(), Thing()]
    threads = [threading.Thread(target=lambda t=t: t.info) for t in things]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not both.broken and len(calls) == 2
    assert [t.info for t in things] == [id(t) for t in things] and len(calls) == 2  # no second computation


# An agent with one more method: it computes for `seconds` (progress the heartbeat counts), then answers.
SPINNING = b"""
import time as _time
def spin(self, seconds):
    end, n = _time.monotonic() + seconds, 0
    while _time.monotonic() < end:
        n += 1
    return b"late"
pkg.agent.Agent.spin = spin
pkg.wire.serve(pkg.agent.Agent())
"""


def test_heartbeats_keep_a_long_call_alive_and_silence_gives_the_agent_up(tmp_path):
    """A call that runs for more than two timeouts (computing all along) is answered: the agent's
    heartbeats keep the wire from being silent. Frozen (SIGSTOP), the agent is given up after one
    timeout of silence, and every later call fails at once with the same line. (A call blocked on a
    FIFO is given up instead: tests/test_liveness.py.)"""
    link = PipeLink(sys.executable, program().replace(b"pkg.wire.serve(pkg.agent.Agent())", SPINNING))
    proxy = AgentProxy(link, "slow", sys.executable, Patience(3.0))
    try:
        assert proxy._call("spin", 7.0) == b"late"  # more than two timeouts
        agent = proxy.pid()
        os.kill(agent, signal.SIGSTOP)
        try:
            with pytest.raises(TargetError, match="gave up: its agent went silent mid-call"):
                proxy.lstat(str(tmp_path))
            with pytest.raises(TargetError, match="gave up: its agent went silent mid-call"):
                proxy.pid()  # at once: the wire is no longer used
        finally:
            os.kill(agent, signal.SIGCONT)
    finally:
        proxy.close()


# An agent with one more method: it finds `n` files to read, and stops after each third of them
# until the controller has been told that count (it opens a FIFO the test writes then).
COUNTING = b"""
def count(self, n, gates):
    pkg.progress.expect(n)
    for i in range(1, n + 1):
        pkg.progress.step()
        if i in (n // 3, 2 * n // 3):
            with open(gates.pop(0), "rb") as gate:
                gate.read()
            pkg.progress.phase("the second part")
    return n
pkg.agent.Agent.count = count
pkg.wire.serve(pkg.agent.Agent())
"""


def test_heartbeats_carry_how_many_files_the_running_call_has_read(tmp_path):
    """While a call runs, each heartbeat carries the agent's count (files read, files found to read)
    and its phase: the proxy tells them to its watcher at the count the agent is at, call after call
    (a count per call)."""
    gates = [tmp_path / "third", tmp_path / "two-thirds"]
    for gate in gates:
        os.mkfifo(gate)
    link = PipeLink(sys.executable, program().replace(b"pkg.wire.serve(pkg.agent.Agent())", COUNTING))
    proxy = AgentProxy(link, "counting", sys.executable, Patience(30.0))
    seen: list[tuple[int, int, str]] = []

    def watch(done: int, total: int, phase: str) -> None:
        seen.append((done, total, phase))
        if gates and done == 300 * (3 - len(gates)) // 3:  # the agent waits there: let it go on
            with open(gates.pop(0), "wb"):
                pass

    proxy.watch(watch)
    try:
        assert proxy._call("count", 300, [str(g) for g in gates]) == 300
        assert (100, 300, "") in seen and (200, 300, "the second part") in seen and not gates, seen
        assert all(total == 300 and 0 <= done <= 300 for done, total, _ in seen), seen
        seen.clear()
        proxy.watch(None)
        assert proxy.pid() > 0 and seen == []  # no watcher: nothing told
    finally:
        proxy.close()
