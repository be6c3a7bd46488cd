"""ledger_index.py: an unchanged ledger is read from its index, never believed over the files."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest
from sshd import sshd  # noqa: F401 (a fixture)

from patchkeeper.errors import StoreError
from patchkeeper.records import ledger_index
from patchkeeper.records.ledger import Ledger
from patchkeeper.targets import open_target
from patchkeeper.workspace import load


def _history(pk) -> None:
    """A real history: a baseline, two applies and a rollback between them."""
    pk("apply", "ddtree")
    pk("rollback", "--to", "baseline")
    pk("apply", "ddtree")
    time.sleep(2.1)  # past the clock's granularity: the entries' identities may now be remembered


def _read(root: Path, target: str | None = None) -> tuple[int, list[str]]:
    """Read the ledger as a command does: how many entry files the agent had to send, and the ids."""
    t = open_target(load(root).target(target))
    try:
        ledger = Ledger(t)
        ids = [e.id for e in ledger.entries()]
        return ledger.files_read, ids
    finally:
        t.close()


def _edit_in_place(path: Path, data: bytes) -> None:
    """Rewrite a file's bytes in its own inode and put its mtime back: only its ctime tells."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


def test_an_unchanged_ledger_is_read_from_the_index_and_every_change_is_seen(baselined):
    env = baselined
    _history(env.pk)
    files = sorted((env.state_dir / "ledger").glob("*.json"))
    count, ids = _read(env.root)
    assert count >= 1 and len(ids) == len(files) == 4  # those written too recently to remember are read now
    log = env.pk("log").stdout
    assert _read(env.root) == (0, ids)  # (a) nothing changed: no entry's bytes read
    assert env.pk("log").stdout == log

    # (c) an entry added by hand is read; once removed, it is gone
    doc = json.loads(files[-1].read_text())
    doc.update(seq=doc["seq"] + 1, id=doc["id"][:-6] + "abcdef")
    added = files[-1].parent / f"{doc['seq']:06d}-{doc['id']}.json"
    added.write_text(json.dumps(doc, indent=1))
    assert _read(env.root) == (1, ids + [doc["id"]])
    assert doc["id"] in env.pk("log").stdout.splitlines()[0]
    added.unlink()
    assert _read(env.root) == (0, ids) and env.pk("log").stdout == log

    # (d) a damaged index is rebuilt and changes nothing
    t = open_target(load(env.root).target(None))
    index = Path(ledger_index.path_of(t))
    t.close()
    index.write_bytes(index.read_bytes()[: index.stat().st_size // 2])
    assert _read(env.root) == (len(ids), ids)
    assert _read(env.root) == (0, ids) and env.pk("log").stdout == log

    # (b) an entry edited in place, same size, its mtime put back: read again, its damage reported
    victim = files[2]
    whole = victim.read_bytes()
    _edit_in_place(victim, b"[" + whole[1:])
    with pytest.raises(StoreError, match=f"ledger entry .*{victim.name}.* is damaged"):
        _read(env.root)
    proc = env.pk("log", check=2)
    assert victim.name in proc.stderr and "is damaged" in proc.stderr and "hint:" in proc.stderr
    _edit_in_place(victim, whole)
    assert _read(env.root) == (1, ids) and env.pk("log").stdout == log

    # (f) the mirror still writes the copies that are missing, from one listing of each directory
    copies = env.root / "snapshots" / "local"
    gone_entry = copies / "ledger" / files[1].name
    gone_manifest = next((copies / "manifests").iterdir())
    kept = gone_entry.read_bytes(), gone_manifest.read_bytes()
    gone_entry.unlink()
    gone_manifest.unlink()
    env.pk("snapshot", "--name", "again")
    assert (gone_entry.read_bytes(), gone_manifest.read_bytes()) == kept


def test_over_ssh_an_unchanged_ledger_crosses_no_wire_and_an_edit_is_seen(fleet):  # noqa: F811
    _history(lambda *args: fleet.pk(*args, "-t", "ct129"))
    count, ids = _read(fleet.env.root, "ct129")
    assert count >= 1 and len(ids) == 4
    log = fleet.pk("log", "-t", "ct129").stdout
    assert _read(fleet.env.root, "ct129") == (0, ids)
    assert fleet.pk("log", "-t", "ct129").stdout == log

    victim = sorted((fleet.venvs["ct129"] / ".patchkeeper" / "ledger").glob("*.json"))[2]
    whole = victim.read_bytes()
    _edit_in_place(victim, b"[" + whole[1:])
    proc = fleet.pk("log", "-t", "ct129", check=2)
    assert victim.name in proc.stderr and "is damaged" in proc.stderr
    _edit_in_place(victim, whole)
    assert _read(fleet.env.root, "ct129") == (1, ids) and fleet.pk("log", "-t", "ct129").stdout == log
    victim.unlink()
    assert _read(fleet.env.root, "ct129") == (0, ids[:2] + ids[3:])


def test_loops_over_the_ledger_ask_the_facts_kept_in_the_index_and_build_only_what_they_answer(baselined):
    env = baselined
    from patchkeeper.change.repair import environment_ops, rollback_goal
    from patchkeeper.errors import BadInput
    from patchkeeper.records.ledger import LedgerEntry

    _history(env.pk)
    env.pk("snapshot", "--name", "mine")
    time.sleep(2.1)
    files = sorted((env.state_dir / "ledger").glob("*.json"))
    whole = [LedgerEntry.from_dict(json.loads(f.read_bytes())) for f in files]
    _read(env.root)  # the index holds every entry now

    t = open_target(load(env.root).target(None))
    try:
        ledger = Ledger(t)
        entries = ledger.entries()
        assert ledger.files_read == 0
        for slot, f in zip(entries.slots, files, strict=True):  # each slot's facts, from the index
            assert slot.facts == ledger_index.facts_of(json.loads(f.read_bytes()))
        assert ledger.find_state("previous") == next(
            e.after for e in reversed(whole) if e.after.id != whole[-1].after.id
        )
        assert ledger.find_state("mine") == whole[-1].after
        assert ledger.baseline() == whole[0].after
        goal, at, _undo = rollback_goal(ledger, "baseline")
        assert goal == whole[0].after and at == max(i for i, e in enumerate(whole) if e.after.id == goal.id)
        assert environment_ops(t, ledger, at) == []  # no entry changed a file outside the package
        built = [i for i, e in enumerate(entries._built) if e is not None]
        assert (
            built == [0, 2, 4] and len(whole) == 5
        )  # the answers themselves: the baseline, the previous, "mine"
        assert [entries[i] for i in range(len(entries))] == whole
    finally:
        t.close()

    # a fact edited in place (same size, mtime put back) is seen: the index is never believed over the file
    named = files[-1]
    _edit_in_place(named, named.read_bytes().replace(b'"mine"', b'"mime"'))
    t = open_target(load(env.root).target(None))
    try:
        ledger = Ledger(t)
        assert ledger.find_state("mime") == dataclasses.replace(whole[-1].after, name="mime")
        with pytest.raises(BadInput, match="no state 'mine'"):
            ledger.find_state("mine")
        assert ledger.files_read == 1
    finally:
        t.close()
