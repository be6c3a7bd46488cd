"""The journal: back up, stage, commit, rename into place; recover after a crash.

Order of a transaction (each step survives SIGKILL):
1. every old and new file content is in the store (old bytes verified against the plan);
2. the journal is written with status "prepared" — a crash until step 4 undoes the transaction;
3. new contents are staged beside their destinations (.pk-stage-<id>-<name>);
4. the journal is rewritten with status "committed" — the commit point; from here recovery
   finishes the transaction, re-staging from the store whatever a crash lost;
5. stage files are renamed over their destinations, deleted files unlinked, bytecode removed;
6. the ledger entry is written, then the journal removed.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass

from . import faults
from .host.disk import STAGE_PREFIX
from .host.errors import AgentError
from .errors import PatchkeeperError, Refused, StoreError
from .host.contract import ScanRequest
from .ledger import Ledger, LedgerEntry
from .manifest import Entry


@dataclass(frozen=True)
class FileOp:
    key: str  # manifest key
    path: str  # absolute path on the target
    old: Entry | None  # what is there now (None: absent)
    new: Entry | None  # what will be there (None: removed)

    def stage_path(self, tx_id: str) -> str:
        head, tail = posixpath.split(self.path)
        return posixpath.join(head, f"{STAGE_PREFIX}{tx_id}-{tail}")

    def to_dict(self) -> dict:
        return {"key": self.key, "path": self.path,
                "old": [self.old.digest, self.old.size, self.old.mode] if self.old else None,
                "new": [self.new.digest, self.new.size, self.new.mode] if self.new else None}

    @classmethod
    def from_dict(cls, d: dict) -> "FileOp":
        return cls(d["key"], d["path"], Entry.of(d["old"]) if d["old"] else None,
                   Entry.of(d["new"]) if d["new"] else None)


def carry_out(ledger: Ledger, ops: list[FileOp], contents: dict[str, bytes], entry: LedgerEntry) -> None:
    """Carry out `ops` as one transaction and record `entry`. `contents` maps new digests to bytes."""
    target = ledger.target
    agent, store = target.agent, target.info.store
    _backup(ledger, ops)
    for digest, data in contents.items():
        agent.store_put(store, data, digest)
    faults.point("stored")
    journal = {"id": entry.id, "status": "prepared", "ops": [op.to_dict() for op in ops],
               "entry": entry.to_dict()}
    agent.write_atomic(ledger.journal_path, json.dumps(journal).encode())
    faults.point("journal-prepared")
    try:
        for op in ops:
            if op.new is not None:
                agent.stage(store, op.new.digest, op.stage_path(entry.id), op.new.mode)
                faults.point(f"staged {op.key}")
        journal["status"] = "committed"
        agent.write_atomic(ledger.journal_path, json.dumps(journal).encode())
    except Exception as exc:  # before the commit point: undo, so the target stays as it was
        _undo(ledger, ops, entry.id)
        if isinstance(exc, AgentError):
            raise StoreError(f"{exc}; nothing was changed", "see `patchkeeper log`; the store may need repair") from None
        if isinstance(exc, OSError):
            raise Refused(f"cannot stage the new files: {exc.strerror or exc}"
                          f"{' (' + exc.filename + ')' if getattr(exc, 'filename', None) else ''}; nothing was changed",
                          "check that the target's directories exist and are writable") from None
        raise
    faults.point("journal-committed")
    _finish(ledger, ops, entry)


def _backup(ledger: Ledger, ops: list[FileOp]) -> None:
    """Put the current bytes of every file about to change into the store, verified."""
    target = ledger.target
    olds = {op.old.digest: op.path for op in ops if op.old is not None}
    missing = target.agent.store_missing(target.info.store, list(olds))
    if missing:
        bad = target.agent.store_put_files(target.info.store, {d: olds[d] for d in missing})
        if bad:
            names = ", ".join(olds[d] for d in bad)
            raise Refused(f"files changed while patchkeeper was reading them: {names}",
                          "make sure nothing else writes to the package, then retry")


def _undo(ledger: Ledger, ops: list[FileOp], tx: str) -> None:
    """Remove whatever was staged, then the journal: a transaction that never committed is gone."""
    for op in ops:
        try:
            ledger.target.agent.unlink(op.stage_path(tx))
        except OSError:
            pass  # a stage that cannot be removed is inert: it is never renamed into place
    ledger.target.agent.unlink(ledger.journal_path)


def _finish(ledger: Ledger, ops: list[FileOp], entry: LedgerEntry) -> None:
    agent = ledger.target.agent
    for op in ops:
        if op.new is not None:
            agent.rename(op.stage_path(entry.id), op.path)
        else:
            agent.unlink(op.path)
        faults.point(f"placed {op.key}")
    agent.remove_bytecode([op.path for op in ops])
    faults.point("bytecode")
    if not ledger.has(entry.id):
        ledger.append(entry)
    faults.point("ledger")
    agent.unlink(ledger.journal_path)
    faults.point("done")


def recover(ledger: Ledger) -> str | None:
    """Finish or undo an interrupted transaction; return what was done, None if nothing was pending."""
    target = ledger.target
    agent = target.agent
    try:
        raw = agent.read(ledger.journal_path)
    except FileNotFoundError:
        return None
    journal = json.loads(raw)
    ops = [FileOp.from_dict(d) for d in journal["ops"]]
    entry = LedgerEntry.from_dict(journal["entry"])
    tx = journal["id"]
    if journal["status"] == "prepared":
        _undo(ledger, ops, tx)
        return f"undid transaction {tx} ({entry.command}): it had not committed; the target is as before it"
    for op in ops:
        if op.new is None:
            continue
        stage = op.stage_path(tx)
        if agent.lstat(stage) is not None:
            continue
        current = agent.scan(ScanRequest("/", absolute={op.key: op.path})).get(op.key)
        if current is None or Entry.of(current) != op.new:
            try:  # the stage was lost (or already renamed and then disturbed): re-stage from the store
                agent.stage(target.info.store, op.new.digest, stage, op.new.mode)
            except (PatchkeeperError, OSError) as exc:  # a missing or corrupt object, locally or on a host
                raise StoreError(f"cannot finish transaction {tx}: {exc}",
                                 "the store is damaged; restore the file by hand") from None
    pending = [op for op in ops if op.new is None or agent.lstat(op.stage_path(tx)) is not None]
    _finish(ledger, pending, entry)
    agent.remove_bytecode([op.path for op in ops])
    return f"finished transaction {tx} ({entry.command}): it had committed; the target is in its new state"
