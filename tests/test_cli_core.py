"""The core story through the real CLI: apply, status, switch, rollback, log, on real sglang."""

from __future__ import annotations

import json

from conftest import tree


def test_apply_switch_rollback_restores_exact_bytes(env, pristine_venv):
    before = env.snapshot()
    out = env.pk("apply", "ddtree").stdout
    assert "recorded baseline" in out and "A sglang/srt/speculative/ddtree_utils.py" in out
    spec = (env.site / "sglang/srt/speculative/spec_info.py").read_text()
    assert "DDTREE = auto()" in spec
    assert "DDTREE" in env.running()
    st = json.loads(env.pk("status", "--json").stdout)
    assert [p["name"] for p in st["state"]["stack"]] == ["ddtree"] and st["differences"] == {}

    out = env.pk("apply", "nextn").stdout
    assert "switch" in out
    assert not (env.site / "sglang/srt/speculative/ddtree_utils.py").exists()
    assert "DDTREE" not in (env.site / "sglang/srt/speculative/spec_info.py").read_text()
    assert "NEXTN" in env.running()

    env.pk("rollback", "--to", "baseline")
    assert env.snapshot() == before
    # the pristine venv shares inodes with the target: it must not have changed through them
    assert tree(pristine_venv) == tree(env.venv)

    log = json.loads(env.pk("log", "--json").stdout)
    assert [e["kind"] for e in log] == ["rollback", "switch", "apply", "baseline"]
    assert log[2]["patchsets"][0]["name"] == "ddtree"


def test_workspace_keeps_the_ledger_and_every_state_manifest(baselined):
    env = baselined
    env.pk("apply", "ddtree")
    env.pk("apply", "nextn")
    env.pk("rollback", "--to", "baseline")
    out = env.root / "snapshots" / "local"
    log = json.loads(env.pk("log", "--json").stdout)
    assert sorted(p.name for p in (out / "ledger").iterdir()) == sorted(
        f"{e['seq']:06d}-{e['id']}.json" for e in log
    )
    states = {e["after"]["id"] for e in log}
    assert {p.stem for p in (out / "manifests").iterdir()} == states and len(states) == 3
    baseline = next(e["after"]["id"] for e in log if e["kind"] == "baseline")
    assert (out / "manifest.txt").read_bytes() == (out / "manifests" / f"{baseline}.txt").read_bytes()
    assert b"sglang/srt/speculative/ddtree_utils.py" not in (out / "manifest.txt").read_bytes()
