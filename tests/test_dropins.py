"""The systemd way: the patch sets' drop-in beside the host's unit, whose own lines (WorkingDirectory,
User, Environment=) patchkeeper reads and never writes; the ExecStart in effect as systemd computes it,
shown wherever the unit was; and a workspace of the old style, whose patch sets write the whole unit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import edit_file
from helpers import ledger, stack

OLD_STYLE = (
    Path(__file__).parent / "data" / "old-style-patchsets"
)  # nextn and dflash 2.0.0: they write `unit`


def _host_lines(env, srv: Path) -> bytes:
    """The host's own unit lines, as an operator has them: a working directory, a user, GPUs, NCCL."""
    srv.mkdir()
    text = (
        env.unit.read_text()
        .replace("WorkingDirectory=/root\n", f"WorkingDirectory={srv}\n")
        .replace("User=root\n", "User=svc-qwen\n")
        .replace(
            "Environment=PYTHONUNBUFFERED=1\n",
            "Environment=PYTHONUNBUFFERED=1\nEnvironment=CUDA_VISIBLE_DEVICES=0,1 NCCL_P2P_DISABLE=1\n",
        )
    )
    edit_file(env.unit, text.encode())
    return env.unit.read_bytes()


def test_the_host_units_own_lines_stay_and_the_dropin_sets_what_runs(env, deployment, tmp_path):
    deployment.configure()
    host = _host_lines(env, tmp_path / "srv")
    (env.dropin.parent).mkdir()
    (env.dropin.parent / "10-host.conf").write_text(
        "[Service]\nEnvironment=NCCL_DEBUG=INFO\n"
    )  # the host's own

    dry = env.pk("apply", "dflash", "--dry-run").stdout
    assert "  A @dropin  " in dry and f"({env.dropin})" in dry and "      | ExecStart=\n" in dry
    effective = next(ln for ln in dry.splitlines() if ln.startswith("the unit's ExecStart (effective, from "))
    assert str(env.dropin) in effective and effective.endswith("as set there (shown above)")  # not twice
    assert dry.count("--speculative-algorithm DFLASH") == 1
    assert f"  read: {env.unit}, then {env.dropin.parent / '10-host.conf'}, then {env.dropin}" in dry

    proc = env.pk("apply", "dflash")
    assert env.unit.read_bytes() == host  # the host's unit is read, never written
    assert "pid " in proc.stdout and "runs the unit's effective ExecStart" in proc.stdout
    started = deployment.journal.read_text()
    assert (
        f"CUDA_VISIBLE_DEVICES=0,1 NCCL_P2P_DISABLE=1 cwd={tmp_path / 'srv'}" in started
    )  # its lines reached it

    status = env.pk("status").stdout
    assert f"unit     {env.unit} (the host's: read, not written)" in status
    assert f"drop-in  {env.dropin} (present)" in status and "--speculative-algorithm DFLASH" in status
    assert json.loads(env.pk("status", "--json").stdout)["exec_start"]["source"] == str(env.dropin)
    shown = env.pk("show", "dflash").stdout
    assert "role      @dropin: " in shown and "a systemd drop-in beside the target's unit" in shown
    assert "ExecStart (@dropin, with the defaults): {{ python }} -m sglang.launch_server" in shown
    assert (
        "# role dropin: a systemd drop-in, written beside the target's unit"
        in env.pk("export", "dflash").stdout
    )
    against = env.pk("diff", "--against", "baseline", check=1).stdout
    assert "  added    @dropin  [dflash@3.1.0]" in against
    assert f"the unit's ExecStart (effective, from {env.unit}): " in against and "(in state " in against
    assert f"the unit's ExecStart (effective, from {env.dropin}): " in against and "(now)" in against

    # the operator changes the host's unit: a rollback undoes patchkeeper's changes, not the host's
    edit_file(env.unit, host.replace(b"User=svc-qwen\n", b"User=svc-qwen2\n"))
    back = env.pk("rollback", "--to", "baseline").stdout
    assert (
        f"note: the host's unit {env.unit} differs from the recorded state (edited on the host); left as it is"
        in back
    )
    assert b"User=svc-qwen2\n" in env.unit.read_bytes() and not env.dropin.exists()
    assert (env.dropin.parent / "10-host.conf").exists() and stack(env) == []


def test_an_old_style_workspace_whose_patch_sets_write_the_unit_keeps_working(env, deployment):
    shutil.rmtree(env.root / "patchsets")
    shutil.copytree(OLD_STYLE, env.root / "patchsets")  # its toml maps `unit` only, as before drop-ins
    deployment.configure()
    baseline_unit = env.unit.read_bytes()
    proc = env.pk("apply", "nextn")
    assert (
        "M @unit" in proc.stdout
        and not env.dropin.exists()
        and "--speculative-algo NEXTN" in env.unit.read_text()
    )
    assert "the server runs EAGLE, as the unit asks (--speculative-algorithm NEXTN)" in proc.stdout
    assert "pid " in proc.stdout and f"(from {env.unit})" in proc.stdout
    assert f"ExecStart (effective, from {env.unit}): " in env.pk("status").stdout
    assert "the whole unit (the old style" in env.pk("show", "nextn").stdout
    # a rollback gives back the unit it wrote, byte for byte: that change was a transaction's
    env.pk("rollback", "--to", "baseline")
    assert env.unit.read_bytes() == baseline_unit and stack(env) == []
    assert [e["kind"] for e in ledger(env)] == ["baseline", "apply", "verify", "rollback", "verify"]
