"""ledger.py: entries written by patchkeeper before per-kind typing read back and write out unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkeeper.records.ledger import KINDS, LedgerEntry
from patchkeeper.records.ledger_types import (
    AdoptExtra,
    ApplyExtra,
    RecordExtra,
    RepairExtra,
    RollbackExtra,
    VerifyExtra,
)

# Written by `main` at ddc636b+changes.py (a six venv: snapshot, apply, switch, rollback, verify, and an
# apply whose verification failed and was rolled back automatically).
WRITTEN_BY_MAIN = sorted((Path(__file__).parent / "data" / "ledger-main").glob("*.json"))
# Written by branch h6 (repair): a repair, the rollback that undid it, a --restore-pristine baseline.
WRITTEN_BY_MAIN += sorted((Path(__file__).parent / "data" / "ledger-repair").glob("*.json"))
EXTRA_OF_KIND = {
    "baseline": AdoptExtra,
    "snapshot": RecordExtra,
    "apply": ApplyExtra,
    "switch": ApplyExtra,
    "rollback": RollbackExtra,
    "verify": VerifyExtra,
    "repair": RepairExtra,
}


@pytest.mark.parametrize("path", WRITTEN_BY_MAIN, ids=lambda p: p.name.split("-")[0])
def test_an_entry_written_by_main_reads_back_unchanged(path):
    doc = json.loads(path.read_text())
    entry = LedgerEntry.from_dict(doc)
    assert entry.to_dict() == doc
    assert entry.kind in KINDS
    typed = EXTRA_OF_KIND[entry.kind]
    assert set(entry.extra) <= set(typed.__annotations__), (entry.kind, set(entry.extra))
    assert set(typed.__required_keys__) <= set(entry.extra)


def test_every_kind_is_in_the_fixture():
    assert {json.loads(p.read_text())["kind"] for p in WRITTEN_BY_MAIN} == set(KINDS)
