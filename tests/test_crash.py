"""Crash matrix: SIGKILL at every step of apply, switch and rollback; recovery gives old or new bytes."""

from __future__ import annotations

import shutil
import signal

import pytest
from conftest import copy_venv, make_workspace


def _workspace(root, venv):
    """A workspace whose drop-in runs one interpreter for every clone (by default each runs its own venv's,
    and a clone keeps the template's recorded drop-in)."""
    env = make_workspace(root, venv)
    config = env.root / "patchkeeper.toml"
    config.write_text(
        config.read_text().replace(
            "[targets.local.vars]\n", '[targets.local.vars]\npython = "/opt/sglang/bin/python3"\n'
        )
    )
    return env


def _prepare(tmp_path, pristine, op):
    """A template target in the state before `op`, and the trees before and after it."""
    env = _workspace(tmp_path / "tmpl-ws", copy_venv(pristine, tmp_path / "tmpl-venv"))
    if op in ("switch", "rollback"):
        env.pk("apply", "ddtree")
    return env


def _args(op):
    return {
        "apply": ["apply", "ddtree"],
        "switch": ["apply", "nextn"],
        "rollback": ["rollback", "--to", "baseline"],
    }[op]


def _clone(tmp_path, template, n):
    venv = copy_venv(template.venv, tmp_path / f"venv-{n}")
    env = _workspace(tmp_path / f"ws-{n}", venv)
    env.unit.write_bytes(template.unit.read_bytes())
    if template.dropin.exists():
        env.dropin.parent.mkdir(exist_ok=True)
        env.dropin.write_bytes(template.dropin.read_bytes())
    return env


def _fault_points(tmp_path, template, op) -> tuple[list[tuple[int, str]], dict]:
    """Every step the transaction passes, numbered as PATCHKEEPER_CRASH_AT counts them, and the tree
    after it: a run that never dies is the uninterrupted change too."""
    env = _clone(tmp_path, template, "trace")
    trace = tmp_path / "trace-all"
    env.pk(*_args(op), env={"PATCHKEEPER_CRASH_AT": "no such step", "PATCHKEEPER_CRASH_TRACE": str(trace)})
    new = env.snapshot()
    _discard(env)
    return [
        (int(n), name) for n, name in (line.split(" ", 1) for line in trace.read_text().splitlines())
    ], new


def _chosen(points: list[tuple[int, str]]) -> list[int]:
    """Each kind of step at its first occurrence, and "placed" at its last too (the 1st and the 18th
    file: a tree half placed, and one wholly placed with no ledger entry yet): every boundary of the
    journal is crossed, without dying once per file in between. (The last "staged" was dropped: like
    the first, it dies before the commit with files staged, and recovery undoes both the same way.)"""
    by_kind: dict[str, list[int]] = {}
    for n, name in points:
        by_kind.setdefault(name.split(" ", 1)[0], []).append(n)
    return sorted({ns[0] for ns in by_kind.values()} | {by_kind["placed"][-1]})


def _discard(env) -> None:
    """A finished iteration's venv and workspace (a baseline pack each: ~130 MB) go at once."""
    shutil.rmtree(env.venv)
    shutil.rmtree(env.root)


@pytest.mark.parametrize("op", ["apply", "switch", "rollback"])
def test_kill_at_every_step_then_recover(op, tmp_path, pristine_venv):
    template = _prepare(tmp_path, pristine_venv, op)
    old = template.snapshot()
    points, new = _fault_points(tmp_path, template, op)
    assert old != new
    kinds = {name.split(" ", 1)[0] for _, name in points}
    assert {
        "stored",
        "journal-prepared",
        "staged",
        "journal-committed",
        "placed",
        "ledger",
        "done",
    } <= kinds, kinds

    crashed_before_commit = crashed_after_commit = 0
    chosen = _chosen(points)
    for n in chosen:
        env = _clone(tmp_path, template, n)
        trace = tmp_path / f"trace-{n}"
        proc = env.pk(
            *_args(op),
            check=None,
            env={"PATCHKEEPER_CRASH_AT": str(n), "PATCHKEEPER_CRASH_TRACE": str(trace)},
        )
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        step = trace.read_text().splitlines()[-1].split(" ", 1)[1]
        assert step == dict(points)[n], "the run took another path than the traced one"
        rec = env.pk("recover")
        state = env.snapshot()
        names = [l.split(" ", 1)[1] for l in trace.read_text().splitlines()]
        committed = "journal-committed" in names
        if committed:
            assert state == new, f"crash at {step}: not the new state after recovery"
            assert "finished transaction" in rec.stdout or names[-1] in ("done", "reported")  # after it
            crashed_after_commit += 1
        else:
            assert state == old, f"crash at {step}: not the old state after recovery"
            crashed_before_commit += 1
        # the target is consistent with its record afterwards, and a second recover has nothing to do
        status = env.pk("status").stdout
        assert "files match the recorded state" in status or "no recorded state" in status
        if n == chosen[-1] or n == chosen[0]:
            assert "nothing to recover" in env.pk("recover").stdout
        _discard(env)
    assert crashed_before_commit >= 3 and crashed_after_commit >= 3
