"""host/contract.py: the in-process Agent and the AgentProxy over the wire return the same answer values."""

from __future__ import annotations

import base64
import hashlib
import os
import py_compile
import sys
from dataclasses import is_dataclass

import pytest

from patchkeeper.errors import TargetError
from patchkeeper.host import contract
from patchkeeper.host.agent import Agent
from patchkeeper.host.contract import CompareRequest, ScanRequest, TreeRequest
from patchkeeper.records.manifest import Entry, Manifest
from patchkeeper.targets.remote_agent import AgentProxy


@pytest.fixture
def site(tmp_path):
    """A small site-packages: a package, its dist-info with a RECORD (one line that no longer
    matches), a pyc of other code than its source, and a temporary file an interrupted command left."""
    site = tmp_path / "site"
    pkg = site / "demo"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n")
    (pkg / "util.py").write_text("def f():\n    return 2\n")
    (pkg / "util.py").chmod(0o640)
    dist = site / "demo-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")

    def line(rel: str, data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"{rel},sha256={digest},{len(data)}\n"

    (dist / "RECORD").write_text(
        line("demo/__init__.py", b"X = 1\n")
        + line("demo/util.py", b"other\n")
        + "demo-1.0.dist-info/RECORD,,\n"
    )
    tag = sys.implementation.cache_tag
    other = tmp_path / "other.py"
    other.write_text("X = 2\n")
    py_compile.compile(
        str(other),
        cfile=str(pkg / "__pycache__" / f"__init__.{tag}.pyc"),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    return site


def _answers(agent, site, tmp_path) -> dict:
    s = str(site)
    state = tmp_path / "state"
    (state / "ledger").mkdir(parents=True, exist_ok=True)
    scan = ScanRequest(s, ("demo-1.0.dist-info/RECORD",), ("demo",))
    rows = agent.scan(scan)
    manifest = agent.store_put(str(state / "store"), Manifest.from_scan(rows.rows).to_text())
    (state / "ledger" / "000001-a.json").write_bytes(b"{}")
    (state / "ledger" / "000001-a.json.tmp").write_bytes(b"other")
    out = {
        "interpreter": agent.interpreter(),
        "lstat": agent.lstat(str(site / "demo" / "util.py")),
        "lstat missing": agent.lstat(str(site / "nothing")),
        "dist_info": agent.dist_info([s], "Demo"),
        "scan": rows,
        "bytecode": agent.audit_bytecode(s, sys.implementation.cache_tag, [], None),
        "compare": agent.compare_many(CompareRequest(str(state / "store"), (manifest, manifest), scan)),
        "tree": agent.audit_tree(
            TreeRequest(str(state / "store"), manifest, scan, sys.implementation.cache_tag)
        ),
        "manifest_rows": agent.manifest_rows(str(state / "store"), manifest),
        # just written: its identity too fresh to be remembered
        "read_changed": agent.read_changed(
            str(state / "ledger"), ".json", {"000000-gone.json": (1, 2, 3, 4)}
        ),
        "record": agent.audit_record(s, ["demo-1.0.dist-info"], None),
        "owner": agent.state_dir_owner(str(tmp_path / "venv"), str(state), s, False),
        "lock": agent.lock(str(state / "lock"), {"command": "test"}),
        "clean_temps": agent.clean_temps(str(state), str(state / "store")),
        "facts": agent.interpreter_facts(),
        "fingerprint": agent.fingerprint([s], None, s, ["distributions"], None),
        "dir_entries": agent.dir_entries([str(site / "demo"), str(site / "nothing")], [".py"]),
    }
    agent.unlock(str(state / "lock"))
    return out


def test_the_agent_in_process_and_over_the_wire_give_the_same_values(site, tmp_path):
    here = _answers(Agent(), site, tmp_path / "here")
    proxy = AgentProxy.in_subprocess("t", sys.executable)  # the same interpreter, over the wire
    try:
        there = _answers(proxy, site, tmp_path / "there")
        held = proxy.lock(str(tmp_path / "here" / "state" / "lock"), {"command": "other"})
        assert proxy.lock(str(tmp_path / "there" / "state" / "lock"), {"command": "again"}) is None
        taken = Agent().lock(str(tmp_path / "there" / "state" / "lock"), {"command": "late"})
    finally:
        proxy.close()
    assert held is None  # unlocked above
    assert (
        isinstance(taken, contract.LockHolder)
        and taken.command == "again"
        and taken.pid == proxy.hello["pid"]
    )

    here["owner"], there["owner"] = here["owner"].owner, there["owner"].owner  # the state dirs differ by name
    assert here == there
    for name, value in here.items():  # typed values, not dicts, on both sides
        assert (
            value is None
            or is_dataclass(value)
            or name in ("manifest_rows", "clean_temps", "record", "owner", "compare", "dir_entries")
        ), name
    assert [type(c) for c in there["compare"]] == [contract.Comparison] * 2 and not there["compare"][0].pairs
    assert isinstance(there["record"]["demo-1.0.dist-info"], contract.RecordCheck)
    assert there["record"]["demo-1.0.dist-info"].findings == (
        ("demo/util.py", "changed", there["record"]["demo-1.0.dist-info"].findings[0][2]),
    )
    assert [(p, k) for p, k, _ in there["bytecode"].findings] == [
        (f"demo/__pycache__/__init__.{sys.implementation.cache_tag}.pyc", "mismatch")
    ]
    assert there["lstat"].mode == 0o640 and there["lstat"].is_file and there["lstat missing"] is None
    assert [e[:3] for e in there["dir_entries"][str(site / "demo")]["entries"]] == [
        ["__init__.py", "file", "file"],
        ["util.py", "file", "file"],
    ] and there["dir_entries"][str(site / "nothing")] is None
    assert there["dist_info"].record == ("demo/__init__.py", "demo/util.py", "demo-1.0.dist-info/RECORD")
    assert Entry.of(there["scan"].rows["demo/util.py"]).mode == 0o640
    assert there["read_changed"] == contract.ChangedFiles(
        {"000001-a.json": b"{}"}, {"000001-a.json": None}, ("000000-gone.json",)
    )
    assert there["manifest_rows"] == there["scan"].rows  # rows are (digest, size, mode) tuples on both sides
    tree = there["tree"]  # the scan and the bytecode check in one pass, typed to the leaves
    assert isinstance(tree.comparison, contract.Comparison) and isinstance(
        tree.bytecode, contract.BytecodeCheck
    )
    assert (
        tree.files == len(there["scan"].rows)
        and not tree.comparison.pairs
        and tree.bytecode == there["bytecode"]
    )


def test_a_frame_carries_bytes_nested_anywhere_as_payloads():
    import io

    from patchkeeper.host import wire

    value = {
        "rows": [("a.py", b"\x00\xff", 3)],
        "deep": {"x": [bytearray(b"y"), memoryview(b"zz")]},
        "s": "\udc80",
    }
    frame = wire.encode({"ok": 1}, value)
    assert b"\x00\xff" in frame and b"\\u0000b" in frame  # the bytes travel raw, referred to from the header
    header, back = wire.decode(io.BytesIO(frame).read)
    assert header == {"ok": 1}
    assert back == {"rows": [["a.py", b"\x00\xff", 3]], "deep": {"x": [b"y", b"zz"]}, "s": "\udc80"}
    with pytest.raises(TypeError, match="cannot cross the wire"):
        wire.encode({"ok": 1}, {1, 2})


def test_a_kept_agent_answers_dist_info_again_only_while_its_files_are_unchanged(site, monkeypatch):
    from patchkeeper.host.statcache import StatCache

    monkeypatch.setattr(
        StatCache, "GRANULARITY_NS", -(10**12)
    )  # the files were just written: trust them anyway
    agent = Agent()
    first = agent.dist_info([str(site)], "demo")
    agent.park()  # the next command's agent: the same process
    assert agent.dist_info([str(site)], "demo") is first  # answered from memory
    assert agent.dist_info([str(site)], "demo", False).record == () and first.tops == (
        "demo",
        "demo-1.0.dist-info",
    )

    record = site / "demo-1.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + "demo/extra.py,,\n")  # a reinstall rewrites RECORD
    again = agent.dist_info([str(site)], "demo")
    assert again is not first and "demo/extra.py" in again.record
    (site / "demo-1.0.dist-info").rename(site / "demo-2.0.dist-info")  # an upgrade: the site dir changes
    assert agent.dist_info([str(site)], "demo").dist_info == "demo-2.0.dist-info"


def test_reading_a_fifo_is_refused_without_waiting_on_it(tmp_path):
    """A FIFO where a file was expected (a drop-in named *.conf) never blocks the agent: no writer comes."""
    fifo = tmp_path / "a.conf"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        Agent().read(str(fifo))
    proxy = AgentProxy.in_subprocess("t", sys.executable)
    try:
        with pytest.raises(TargetError, match="not a regular file"):
            proxy.read(str(fifo))
    finally:
        proxy.close()
