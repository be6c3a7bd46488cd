"""When a host stops answering (targets/remote_agent.py, targets/ssh.py, targets/holder.py, host/wire.py):
a whole host frozen is given up within the target's `timeout`, in patchkeeper's words; an agent that
beats but makes no progress is given up too; a FIFO is never read; Ctrl-C mid-call over SSH ends as
"interrupted", exit 130, every time. Through the real test sshd."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import copy_venv
from helpers import ping, pk_background, proc_state, wait_for


def _descendants(root: int) -> list[int]:
    """`root` and every process under it."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents.setdefault(int(stat[stat.rindex(")") + 2 :].split()[1]), []).append(int(entry))
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(parents.get(pid, []))
    return found


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _set(fleet, top: str = "", ct129: str = "") -> None:
    toml = fleet.env.root / "patchkeeper.toml"
    text = toml.read_text().replace("[targets.ct129]\n", f"[targets.ct129]\n{ct129}")
    toml.write_text(top + text)


@pytest.mark.parametrize("persist", [60, 0])
def test_a_frozen_host_is_given_up_within_its_timeout_in_patchkeepers_words(fleet, persist):
    _set(fleet, top=f"persist = {persist}\n", ct129="timeout = 3\n")
    fleet.pk("status", "-t", "ct129")  # with persist: the connection and a spare agent are held
    frozen = _descendants(fleet.sshd.proc.pid)  # its listener, every session, their agents
    _signal(frozen, signal.SIGSTOP)
    try:
        proc = fleet.pk("status", "-t", "ct129", check=2)  # it finished, with its own words
    finally:
        _signal(frozen, signal.SIGCONT)
    err = proc.stderr
    assert "Timeout opening channel" not in err and "Traceback" not in err, err
    if persist:
        assert "gave up: its agent went silent mid-call (no answer, no heartbeat for 3 s" in err, err
    else:
        assert "the SSH handshake did not finish within 3 s (the host or its sshd is frozen" in err, err
    assert "no recorded state" in fleet.pk("status", "-t", "ct129").stdout  # the host answers again


def test_an_agent_that_beats_without_progress_is_given_up(fleet):
    """A call that waits for good (here on the state lock's guard, held by this test as a hung mount or
    another process would hold it) keeps its heartbeats going but does nothing: given up after `timeout`."""
    _set(fleet, ct129="timeout = 3\n")
    fleet.pk("apply", "ddtree", "-t", "ct129", "--no-verify")
    applied = fleet.state("ct129")
    guard = fleet.venvs["ct129"] / ".patchkeeper" / "lock.guard"
    with open(guard, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = fleet.pk("rollback", "-t", "ct129", "--to", "baseline", check=2)
    assert "gave up: its agent made no progress for 3 s in lock" in proc.stderr, proc.stderr
    assert "recover -t ct129" in proc.stderr
    assert fleet.state("ct129") == applied  # nothing was done
    fleet.pk("rollback", "-t", "ct129", "--to", "baseline")  # the host works once the guard is free


@pytest.mark.parametrize("where", ["local", "ct129"])
def test_a_fifo_in_place_of_a_file_is_refused_not_read(fleet, pristine_venv, where):
    """Opening a FIFO for reading waits for a writer, for ever: the unit file a FIFO, `status` says so in
    `apply --dry-run` says so and finishes (a local target has no heartbeat to be given up by)."""
    if where == "local":
        copy_venv(pristine_venv, fleet.env.venv)
    unit = fleet.env.unit if where == "local" else fleet.units[where]
    unit.unlink()
    os.mkfifo(unit)
    proc = fleet.pk("apply", "ddtree", "-t", where, "--dry-run", check=None)
    said = proc.stdout + proc.stderr  # the agent's read ("(a FIFO)") or the unit listing's ("(fifo)")
    assert "not a regular file" in said and "fifo" in said.lower(), proc


def _apply(fleet, step: str | None) -> subprocess.Popen:
    return pk_background(
        fleet.env.root, "apply", "ddtree", "-t", "ct129", "--no-verify", crash_at=step, text=True
    )


def _spare(fleet) -> int | None:
    """The pid of ct129's spare agent in the controller (the next command's agent), if it has one."""
    return ping(fleet.venvs["ct129"], "ct129")["spare"]


@pytest.mark.parametrize("step", ["first call", "stored", "journal-prepared", "5"])
def test_ctrl_c_mid_call_over_ssh_is_an_interruption_every_time(fleet, step):
    """The command stops at `step` (or before its first call), its agent on the host is frozen, the
    command goes on into a call that gets no answer, and Ctrl-C arrives: "interrupted", 130, never
    "the answer ... is malformed"; the next command undoes what had begun."""
    fleet.pk("status", "-t", "ct129")  # the held connection and its spare
    old = fleet.state("ct129")
    agent = _spare(fleet)
    assert agent is not None
    if step == "first call":
        os.kill(agent, signal.SIGSTOP)
        proc = _apply(fleet, None)
    else:
        proc = _apply(fleet, step)
        wait_for(lambda: proc_state(proc.pid) in ("T", "gone"), f"the command to stop at {step}")
        assert proc.poll() is None, proc.communicate()
        os.kill(agent, signal.SIGSTOP)
        os.kill(proc.pid, signal.SIGCONT)
    try:
        wait_for(lambda: _spare(fleet) is None, "the command to take its agent")
        wait_for(lambda: proc_state(proc.pid) in ("S", "gone"), "the command to wait for its agent")
        time.sleep(0.3)  # (it is then in its call: the frozen agent keeps it there for `timeout`)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        os.kill(agent, signal.SIGCONT)
    assert proc.returncode == 130, (out, err)
    assert "interrupted (Ctrl-C)" in err and "malformed" not in err, err
    lock = fleet.venvs["ct129"] / ".patchkeeper" / "lock"
    if lock.exists():  # the agent reads the end of its input and exits: its lock is then stale
        wait_for(
            lambda: proc_state(json.loads(lock.read_text())["pid"]) in ("gone", "Z"), "the agent to exit"
        )
    fleet.pk("recover", "-t", "ct129")
    assert fleet.state("ct129") == old
