"""Crash matrix: SIGKILL at every step of apply, switch and rollback; recovery gives old or new bytes."""

from __future__ import annotations

import signal

import pytest

from conftest import copy_venv, make_workspace


def _prepare(tmp_path, pristine, op):
    """A template target in the state before `op`, and the trees before and after it."""
    env = make_workspace(tmp_path / "tmpl-ws", copy_venv(pristine, tmp_path / "tmpl-venv"))
    if op in ("switch", "rollback"):
        env.pk("apply", "ddtree")
    return env


def _args(op):
    return {"apply": ["apply", "ddtree"], "switch": ["apply", "nextn"], "rollback": ["rollback", "--to", "baseline"]}[op]


def _clone(tmp_path, template, n):
    venv = copy_venv(template.venv, tmp_path / f"venv-{n}")
    env = make_workspace(tmp_path / f"ws-{n}", venv)
    env.unit.write_bytes(template.unit.read_bytes())
    return env


@pytest.mark.parametrize("op", ["apply", "switch", "rollback"])
def test_kill_at_every_step_then_recover(op, tmp_path, pristine_venv):
    template = _prepare(tmp_path, pristine_venv, op)
    old = template.snapshot()
    done = _clone(tmp_path, template, "done")
    done.pk(*_args(op))
    new = done.snapshot()
    assert old != new

    crashed_before_commit = crashed_after_commit = 0
    n = 0
    while True:
        n += 1
        env = _clone(tmp_path, template, n)
        trace = tmp_path / f"trace-{n}"
        proc = env.pk(*_args(op), check=None, env={"PATCHKEEPER_CRASH_AT": str(n), "PATCHKEEPER_CRASH_TRACE": str(trace)})
        if proc.returncode == 0:
            assert n > 5, "the transaction should pass through several fault points"
            break
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        step = trace.read_text().splitlines()[-1].split(" ", 1)[1]
        rec = env.pk("recover")
        state = env.snapshot()
        names = [l.split(" ", 1)[1] for l in trace.read_text().splitlines()]
        committed = "journal-committed" in names
        if committed:
            assert state == new, f"crash at {step}: not the new state after recovery"
            assert "finished transaction" in rec.stdout or names[-1] == "done"
            crashed_after_commit += 1
        else:
            assert state == old, f"crash at {step}: not the old state after recovery"
            crashed_before_commit += 1
        # the target is consistent with its record afterwards, and a second recover has nothing to do
        status = env.pk("status").stdout
        assert "files match the recorded state" in status or "no recorded state" in status
        assert "nothing to recover" in env.pk("recover").stdout
    assert crashed_before_commit >= 3 and crashed_after_commit >= 3
