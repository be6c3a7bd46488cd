"""`patchkeeper mcp`'s plan rule at its edges: an inventory is part of what a plan saw, a plan refused
by another command's lock is not spent, and a read-only server finishes or undoes no transaction."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import SITE_REL, copy_venv
from helpers import stack
from mcpclient import Agent, serve

from patchkeeper import cli

DROPIN = "50-patchkeeper.conf"


def _inventory_workspace(root: Path, venv: Path, draft: str) -> Path:
    """A workspace whose one target, h1, an inventory named by patchkeeper.toml gives."""
    (root / "systemd").mkdir(parents=True)
    unit = root / "systemd" / "sglang-qwen.service"
    unit.write_text((Path(cli.__file__).parents[2] / "demo" / "sglang-qwen.service").read_text())
    subprocess.run(["cp", "-r", str(Path(cli.__file__).parents[2] / "patchsets"), str(root)], check=True)
    (root / "patchkeeper.toml").write_text('inventory = "hosts.yml"\ndefault_target = "h1"\n')
    _hosts(root, venv, unit, draft)
    return unit


def _hosts(root: Path, venv: Path, unit: Path, draft: str) -> None:
    (root / "hosts.yml").write_text(
        "gpus:\n  hosts:\n    h1:\n      ansible_connection: local\n      patchkeeper:\n"
        f"        python: {venv}/bin/python\n        package: sglang\n        systemd: 'off'\n"
        f"        files: {{unit: {unit}}}\n        vars: {{draft_model_path: {draft}}}\n"
    )


def _pk(root: Path, *args: str, check: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "patchkeeper", "-w", str(root), *args], capture_output=True, text=True
    )
    assert proc.returncode == check, proc.stderr
    return proc


def _tree(venv: Path) -> dict[str, bytes]:
    site = venv / SITE_REL
    return {str(p.relative_to(site)): p.read_bytes() for p in sorted(site.rglob("*")) if p.is_file()}


def test_an_inventory_changed_after_the_plan_makes_it_stale(tmp_path, pristine_venv):
    venv = copy_venv(pristine_venv, tmp_path / "venv")
    ws = tmp_path / "ws"
    unit = _inventory_workspace(ws, venv, "/models/planned")
    _pk(ws, "snapshot", "--name", "base")
    before = _tree(venv)

    async def body(agent: Agent) -> None:
        plan = await agent.ok("plan", action="apply", name="dflash")
        _hosts(ws, venv, unit, "/models/not-previewed")  # the same target, other vars: another drop-in
        doc = await agent.refused("apply_plan", plan_id=plan["plan"]["id"])
        assert "the workspace changed since plan" in doc["message"] and "inventory" in doc["message"]
        assert _tree(venv) == before and not (unit.parent / f"{unit.name}.d").exists()

        again = await agent.ok("plan", action="apply", name="dflash")  # what it would do now, previewed
        done = await agent.ok("apply_plan", plan_id=again["plan"]["id"])
        assert done["after"]["id"] == again["after"]["id"]
        assert "/models/not-previewed" in (unit.parent / f"{unit.name}.d" / DROPIN).read_text()

    serve(ws, body, errlog=tmp_path / "server.log")


def test_a_plan_refused_by_another_commands_lock_is_not_spent(baselined, tmp_path):
    env = baselined
    env.pk("snapshot", "--name", "start")

    async def body(agent: Agent) -> None:
        plan = await agent.ok("plan", action="apply", name="ddtree")
        holder = _hold_lock(env)
        try:
            failed, doc = await agent.call("apply_plan", plan_id=plan["plan"]["id"])
            assert failed and "is locked by pid" in doc["error"]["message"] and stack(env) == []
        finally:
            holder.kill()
            holder.wait()
        done = await agent.ok("apply_plan", plan_id=plan["plan"]["id"])  # the same plan, carried out now
        assert done["after"]["id"] == plan["after"]["id"] and stack(env) == ["ddtree"]
        doc = await agent.refused("apply_plan", plan_id=plan["plan"]["id"])
        assert "was carried out already" in doc["message"]

    serve(env.root, body, errlog=tmp_path / "server.log")


def _hold_lock(env) -> subprocess.Popen[str]:
    """Another process holding the target's lock as a change does, until killed."""
    path = env.state_dir / "lock"
    code = (
        "import sys, time\nfrom patchkeeper.host import statelock\n"
        f"assert statelock.take({str(path)!r}, {{'command': 'apply by hand'}}, {{}}) is None\n"
        "print('held', flush=True)\ntime.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_a_read_only_server_finishes_or_undoes_no_transaction(baselined, tmp_path):
    env = baselined
    env.pk("snapshot", "--name", "start")
    died = env.pk("apply", "ddtree", env={"PATCHKEEPER_CRASH_AT": "10"}, check=None)
    assert died.returncode != 0
    journal = env.state_dir / "journal.json"
    assert journal.exists()
    interrupted = env.snapshot()

    async def read_only(agent: Agent) -> None:
        for tool in ("status", "log", "audit", "diff"):
            doc = await agent.refused(tool)
            assert "under way or interrupted" in doc["message"] and "read-only" in doc["message"], doc
            assert "recover -t local" in doc["hint"]
        assert env.snapshot() == interrupted and journal.exists()

    serve(env.root, read_only, "--read-only", errlog=tmp_path / "server.log")
    assert env.snapshot() == interrupted and journal.exists()
    env.pk("recover")  # a shell's recover finishes or undoes it
    assert not journal.exists()
