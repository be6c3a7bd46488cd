"""One pass over the tree (host/agent.py scan, host/distcheck.py): the scan's walk also yields the
bytecode, so the bytecode check walks none of the package's directories again and judges each pyc
by the stat the scan took; and recorded manifests come from a versioned cache beside the store,
never believed over the stored object it was made from."""

from __future__ import annotations

import json
import os
import py_compile
import sys

import pytest

from patchkeeper.host import agent as agent_module
from patchkeeper.host.agent import Agent
from patchkeeper.host.contract import ScanRequest
from patchkeeper.host.errors import AgentError

TAG = f"cpython-{sys.version_info.major}{sys.version_info.minor}"


def _bytecode_cases(site):
    """A pyc running other code (unchecked hash) inside the package and outside it, and a legacy one."""
    other = site / "other_source.py"
    other.write_text("print('not the real module')\n")
    inside = site / "sglang" / "__pycache__" / f"version.{TAG}.pyc"
    inside.parent.mkdir(exist_ok=True)
    py_compile.compile(str(other), cfile=str(inside), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    py_compile.compile(str(other), cfile=str(site / "sglang" / "legacy.pyc"))
    (site / "outside").mkdir()
    (site / "outside" / "mod.py").write_text("X = 1\n")
    outside = site / "outside" / "__pycache__" / f"mod.{TAG}.pyc"
    outside.parent.mkdir()
    py_compile.compile(str(other), cfile=str(outside), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    other.unlink()


def test_bytecode_check_reuses_the_scan_walk_and_finds_the_same(env, monkeypatch):
    site = str(env.site)
    _bytecode_cases(env.site)
    full = Agent().audit_bytecode(site, TAG, [], None)  # no scan before it: walks everything itself
    kinds = {rel: kind for rel, kind, _ in full.findings}
    assert kinds == {f"sglang/__pycache__/version.{TAG}.pyc": "mismatch", "sglang/legacy.pyc": "sourceless",
                     f"outside/__pycache__/mod.{TAG}.pyc": "mismatch"}

    agent = Agent()
    agent.scan(ScanRequest(root=site, walk=("sglang",), bytecode=True))
    listed: list[str] = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(str(path)) or real_scandir(path))
    again = agent.audit_bytecode(site, TAG, [], None)
    monkeypatch.undo()
    assert again == full
    assert listed and not [p for p in listed if p.startswith(f"{site}/sglang")], "the package was walked twice"
    assert any(p.startswith(f"{site}/outside") for p in listed)  # the rest of site-packages still is


def test_manifests_come_from_their_cache_and_never_over_the_stored_object(env, monkeypatch):
    env.pk("snapshot", "--name", "s0")
    digest = json.loads(env.pk("status", "--json").stdout)["state"]["manifest"]
    store = str(env.state_dir / "store")
    rows = Agent().manifest_rows(store, digest)
    assert len(rows) > 5000 and list((env.state_dir / "manifest-cache").iterdir())

    def no_parsing(data: bytes) -> dict:
        raise AssertionError("manifest text parsed")

    monkeypatch.setattr(agent_module, "manifest_rows", no_parsing)
    assert Agent().manifest_rows(store, digest) == rows  # a warm read parses no text
    env.pk("audit", "-q")

    # the stored object is rewritten (same bytes, new file): the cache no longer describes it
    algo, _, hexd = digest.partition(":")
    obj = env.state_dir / "store" / "objects" / algo / hexd[:2] / hexd[2:]
    data = obj.read_bytes()
    obj.unlink()
    obj.write_bytes(data)
    with pytest.raises(AssertionError, match="manifest text parsed"):
        Agent().manifest_rows(store, digest)
    monkeypatch.undo()
    assert Agent().manifest_rows(store, digest) == rows  # parsed again, and cached again

    obj.unlink()
    obj.write_bytes(data.replace(b"sglang/", b"sglanX/", 1))  # a corrupt object is an error, cache or not
    with pytest.raises(AgentError) as exc:
        Agent().manifest_rows(store, digest)
    assert exc.value.kind == "corrupt-object"
