"""The journal: back up, stage, commit, rename into place; recover after a crash.

Order of a transaction (each step survives SIGKILL):
0. every destination is checked (type, directory, flags): what would make a rename or unlink fail
   after the commit point refuses the transaction while nothing has changed;
1. every old and new file content is in the store (old bytes verified against the plan);
2. the journal is written with status "prepared" — a crash until step 4 undoes the transaction;
3. new contents are staged beside their destinations (.pk-stage-<id>-<name>);
4. the journal is rewritten with status "committed" — the commit point; from here recovery
   finishes the transaction, re-staging from the store whatever a crash lost;
5. stage files are renamed over their destinations, deleted files unlinked, bytecode removed;
6. the ledger entry is written, then the journal removed.
A failure after the commit point is `Unfinished` (exit 4), naming what stands in the way; `recover`
finishes the transaction once it is gone, backing up first any file changed by hand meanwhile.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

from .. import faults
from ..errors import PatchkeeperError, Refused, StoreError, Unfinished
from ..host.contract import AgentContract, ScanRequest
from ..host.disk import STAGE_PREFIX
from ..host.errors import AgentError
from ..host.manifest_text import values_problem
from ..records.ledger import ApplyExtra, Extra, Ledger, LedgerEntry, RollbackExtra, warn_untrusted
from ..records.ledger_index import CREATED_DIRS
from ..records.manifest import Entry
from ..targets import shapes
from ..targets.shapes import ENV as ENV_PREFIX

NAME_MAX = 255  # bytes in one file name (Linux, every common file system)


class JournalDamaged(StoreError):
    """The journal of an interrupted transaction cannot be read."""


@dataclass(frozen=True)
class FileOp:
    """One file of a transaction: what is there now and what will be there."""

    key: str  # manifest key
    path: str  # absolute path on the target
    old: Entry | None  # what is there now (None: absent)
    new: Entry | None  # what will be there (None: removed)

    @property
    def kind(self) -> str:
        """added, removed, mode (the same bytes, another mode) or changed."""
        if self.old is None:
            return "added"
        if self.new is None:
            return "removed"
        return "mode" if self.old.digest == self.new.digest else "changed"

    def stage_path(self, tx_id: str) -> str:
        """Where the new bytes wait beside the file: .pk-stage-<tx id>-<its name>, or, where that would
        pass NAME_MAX (255 bytes), a digest of its name in its place (the same for every reader)."""
        head, tail = posixpath.split(self.path)
        name = f"{STAGE_PREFIX}{tx_id}-{tail}"
        if len(name.encode("utf-8", "surrogateescape")) > NAME_MAX:
            short = hashlib.sha256(tail.encode("utf-8", "surrogateescape")).hexdigest()[:32]
            name = f"{STAGE_PREFIX}{tx_id}-{short}"
        return posixpath.join(head, name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "path": self.path,
            "old": [self.old.digest, self.old.size, self.old.mode] if self.old else None,
            "new": [self.new.digest, self.new.size, self.new.mode] if self.new else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FileOp:
        """An op as the journal holds it, its key, path, digests, sizes and modes checked
        (shapes.Malformed; a mode is a recorded file's: host/manifest_text.mode_problem)."""
        shapes.key(d["key"], "an op's key")
        shapes.absolute(d["path"], "an op's path")
        for side in ("old", "new"):
            if d[side]:
                shapes.digest(d[side][0], f"an op's {side} digest")
                problem = values_problem({d["key"]: d[side]})
                if problem or len(d[side]) != 3:
                    raise shapes.Malformed(f"an op's {side} entry: {problem or 'not (digest, size, mode)'}")
        return cls(
            d["key"],
            d["path"],
            Entry.of(d["old"]) if d["old"] else None,
            Entry.of(d["new"]) if d["new"] else None,
        )


def carry_out(
    ledger: Ledger,
    ops: list[FileOp],
    contents: dict[str, bytes],
    entry: LedgerEntry,
    complete: Callable[[LedgerEntry], LedgerEntry] | None = None,
) -> None:
    """Carry out `ops` as one transaction and record `entry`. `contents` maps new digests to bytes.
    `complete` gives the entry its last fields (the environment fingerprint, taken meanwhile) before
    the commit point; the journal of a transaction that never committed holds the entry without them."""
    target = ledger.target
    agent, store = target.agent, target.info.store
    entry = ledger.stamped(entry)  # the installation it is made over, in the journal too
    found = obstacles(ledger, ops)
    if found:
        raise Refused(
            f"{len(found)} file(s) cannot be replaced or removed, so nothing was changed: "
            + "; ".join(f"{path} {why}" for path, why in found.items()),
            "deal with each as it says, then run the command again",
        )
    _backup(ledger, ops)
    added = [op.path for op in ops if op.new is not None and op.old is None]
    created = agent.missing_dirs(added) if added else []
    if created:  # named in the entry, so a later removal of their files removes them too
        entry = replace(entry, extra=cast(Extra, {**entry.extra, CREATED_DIRS: created}))
    for digest, data in contents.items():
        agent.store_put(store, data, digest)
    faults.point("stored")
    journal = {
        "id": entry.id,
        "status": "prepared",
        "ops": [op.to_dict() for op in ops],
        "entry": entry.to_dict(),
    }
    agent.write_atomic(ledger.journal_path, json.dumps(journal).encode())
    faults.point("journal-prepared")
    try:
        for op in ops:  # synced together below, before the commit point
            if op.new is not None:
                agent.stage(store, op.new.digest, op.stage_path(entry.id), op.new.mode, durable=False)
                faults.point(f"staged {op.key}")
        agent.sync_files([op.stage_path(entry.id) for op in ops if op.new is not None])
        if complete is not None:
            entry = complete(entry)
            journal["entry"] = entry.to_dict()
        journal["status"] = "committed"
        agent.write_atomic(ledger.journal_path, json.dumps(journal).encode())
    except Exception as exc:  # before the commit point: undo, so the target stays as it was
        _undo(ledger, ops, entry)
        if isinstance(exc, AgentError):
            raise StoreError(
                f"{exc}; nothing was changed", "see `patchkeeper log`; the store may need repair"
            ) from None
        if isinstance(exc, OSError):
            raise Refused(
                f"cannot stage the new files: {exc.strerror or exc}"
                f"{' (' + exc.filename + ')' if getattr(exc, 'filename', None) else ''}; nothing was changed",
                "check that the target's directories exist and are writable",
            ) from None
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
            raise Refused(
                f"files changed while patchkeeper was reading them: {names}",
                "make sure nothing else writes to the package, then retry",
            )


def _undo(ledger: Ledger, ops: list[FileOp], entry: LedgerEntry) -> None:
    """Remove whatever was staged (and the directories staging created), then the journal: a
    transaction that never committed is gone."""
    for op in ops:
        try:
            ledger.target.agent.unlink(op.stage_path(entry.id))
        except OSError:
            pass  # a stage that cannot be removed is inert: it is never renamed into place
    if created_dirs(entry):
        ledger.target.agent.remove_empty_dirs(created_dirs(entry))
    ledger.target.agent.unlink(ledger.journal_path)


def obstacles(ledger: Ledger, ops: list[FileOp]) -> dict[str, str]:
    """path -> what would make placing or removing it fail (a directory, a symlink, a device, an
    immutable file, a read-only directory...), for every op's destination and bytecode."""
    return ledger.target.agent.obstacles(
        [op.path for op in ops if op.new is not None], [op.path for op in ops if op.new is None]
    )


def _finish(ledger: Ledger, ops: list[FileOp], entry: LedgerEntry) -> None:
    agent = ledger.target.agent
    rest: list[FileOp] = ops
    try:
        rest, failure = _place(agent, ops, entry.id)  # each directory is synced once, below
        if failure is not None:
            raise failure
        agent.sync_dirs([op.path for op in ops])
        agent.remove_bytecode([op.path for op in ops])
        _remove_created_dirs(ledger, ops, entry)
        faults.point("bytecode")
        if not ledger.has(entry.id):
            ledger.append(entry)
        faults.point("ledger")
        agent.unlink(ledger.journal_path)
    except (
        PatchkeeperError,
        OSError,
    ) as exc:  # after the commit point nothing is undone: say what is left and why
        raise _unfinished(ledger, entry, rest, exc) from None
    faults.point("done")


def _place_one(agent: AgentContract, op: FileOp, tx_id: str) -> None:
    if op.new is not None:
        agent.rename(op.stage_path(tx_id), op.path, durable=False)
    else:
        agent.unlink(op.path, durable=False)


def _place(agent: AgentContract, ops: list[FileOp], tx_id: str) -> tuple[list[FileOp], Exception | None]:
    """Rename each stage over its destination and unlink each removed file, in order (each op's
    fault point passed as it is done); the ops not done, and why."""
    for i, op in enumerate(ops):
        try:
            _place_one(agent, op, tx_id)
        except (PatchkeeperError, OSError) as exc:
            return ops[i:], exc
        faults.point(f"placed {op.key}")
    return [], None


def _unfinished(ledger: Ledger, entry: LedgerEntry, rest: list[FileOp], exc: Exception) -> Unfinished:
    try:
        found = obstacles(ledger, rest)
    except (
        PatchkeeperError,
        OSError,
    ):  # the target may be out of reach; the error itself is all there is to say
        found = {}
    if found:
        what = "; ".join(f"{path} {why}" for path, why in found.items())
    else:
        where = f"placing {rest[0].path}" if rest else "recording it"
        what = f"{where} failed: {getattr(exc, 'strerror', None) or exc}"
    return unfinished(ledger, entry, what, len(rest))


def unfinished(ledger: Ledger, entry: LedgerEntry, what: str, left: int) -> Unfinished:
    name = ledger.target.name
    state = f"{left} file(s) are not in place yet" if left else "it is not recorded yet"
    return Unfinished(
        f"transaction {entry.id} (`{entry.command}`) passed its commit point, but {state}: {what}",
        f"fix that, then run `patchkeeper recover -t {name}`, which finishes the transaction "
        "(the new files wait in the store); until then the target is between two states",
    )


def _remove_created_dirs(ledger: Ledger, ops: list[FileOp], entry: LedgerEntry) -> None:
    """Remove the directories a transaction of patchkeeper created once they are empty again
    (a directory that was there before any of them, or holds anything else, stays)."""
    gone = [op.path for op in ops if op.new is None]
    if not gone:
        return
    created = set(created_dirs(entry))
    for slot in ledger.entries().slots:
        created.update(slot.created_dirs)
    candidates: set[str] = set()
    for path in gone:
        parent = posixpath.dirname(path)
        while parent in created:
            candidates.add(parent)
            parent = posixpath.dirname(parent)
    if candidates:
        ledger.target.agent.remove_empty_dirs(sorted(candidates))


def created_dirs(entry: LedgerEntry) -> list[str]:
    """The directories the transaction of `entry` created (ApplyExtra/RollbackExtra.created_dirs)."""
    return list(cast(dict[str, Any], entry.extra).get(CREATED_DIRS) or ())


def recover(ledger: Ledger) -> str | None:
    """Finish or undo an interrupted transaction; return what was done, None if nothing was pending."""
    target = ledger.target
    agent = target.agent
    try:
        raw = agent.read(ledger.journal_path, owned=True)
    except FileNotFoundError:
        return None
    except AgentError as exc:
        if exc.kind != "untrusted":
            raise

        warn_untrusted(target.name, "journal", {ledger.journal_path: exc.message.rpartition(": ")[2]})
        return None
    try:
        journal = json.loads(raw)
        ops = [FileOp.from_dict(d) for d in journal["ops"]]
        entry = LedgerEntry.from_dict(journal["entry"])
        tx = journal["id"]
        if tx != entry.id:
            raise ValueError(f"its id {tx!r} is not its entry's ({entry.id})")
        if journal["status"] not in ("prepared", "committed"):
            raise ValueError(f"unknown status {journal['status']!r}")
        for op in ops:  # only the files of this target's package, role files and repairs
            if op.path != _path_of(target, op.key):
                raise ValueError(
                    f"its op for {op.key!r} names another path than that file's on the target: {op.path!r}"
                )
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise JournalDamaged(
            f"the journal of target {target.name} ({ledger.journal_path}) is damaged "
            f"({type(exc).__name__}: {str(exc)[:240]}): the interrupted transaction it describes can be "
            "neither finished nor undone from it",
            f"move it aside (mv {ledger.journal_path} {ledger.journal_path}.damaged); then `patchkeeper status` "
            "lists the files that differ from the recorded state, and `patchkeeper rollback --to "
            "<that state's id>` puts them back",
        ) from None
    if journal["status"] == "prepared":
        _undo(ledger, ops, entry)
        return f"undid transaction {tx} ({entry.command}): it had not committed; the target is as before it"
    entry, edits = _back_up_hand_edits(ledger, ops, entry)
    for op in ops:
        if op.new is None:
            continue
        stage = op.stage_path(tx)
        if agent.lstat(stage) is not None:
            continue
        current = agent.scan(ScanRequest("/", absolute={op.key: op.path})).rows.get(op.key)
        if current is None or Entry.of(current) != op.new:
            try:  # the stage was lost (or already renamed and then disturbed): re-stage from the store
                agent.stage(target.info.store, op.new.digest, stage, op.new.mode)
            except (PatchkeeperError, OSError) as exc:  # a missing or corrupt object, or an obstacle
                found = obstacles(ledger, [op])
                if found:
                    raise unfinished(ledger, entry, f"{op.path} {found[op.path]}", 1) from None
                raise StoreError(
                    f"cannot finish transaction {tx}: {exc}", "the store is damaged; restore the file by hand"
                ) from None
    pending = [op for op in ops if op.new is None or agent.lstat(op.stage_path(tx)) is not None]
    found = obstacles(ledger, pending)
    if found:
        raise unfinished(
            ledger, entry, "; ".join(f"{path} {why}" for path, why in found.items()), len(pending)
        )
    _finish(ledger, pending, entry)
    agent.remove_bytecode([op.path for op in ops])
    saved = (
        (
            "; changed by hand since it was interrupted, backed up first: "
            + ", ".join(f"{key} ({digest})" for key, digest in edits.items())
        )
        if edits
        else ""
    )
    return f"finished transaction {tx} ({entry.command}): it had committed; the target is in its new state{saved}"


def _path_of(target: Any, key: str) -> str | None:
    """Where the file of a journal's op key is on the target (None: a role this target lacks)."""
    info = target.info
    if key.startswith(ENV_PREFIX):  # a file outside the package that a repair changed (repair.env_key)
        return posixpath.normpath(posixpath.join(info.site, key[len(ENV_PREFIX) :]))
    try:
        return str(info.path_of(key))
    except KeyError:
        return None


def _back_up_hand_edits(
    ledger: Ledger, ops: list[FileOp], entry: LedgerEntry
) -> tuple[LedgerEntry, dict[str, str]]:
    """Files of an interrupted transaction that hold neither its old nor its new bytes were changed by
    hand since: put their bytes in the store before they are replaced; name them in the entry."""
    target = ledger.target
    now = target.agent.scan(ScanRequest("/", absolute={op.key: op.path for op in ops})).rows
    edits = {
        op.key: Entry.of(now[op.key])
        for op in ops
        if op.key in now and Entry.of(now[op.key]) not in (op.old, op.new)
    }
    if not edits:
        return entry, {}
    where = {op.key: op.path for op in ops}
    paths = {e.digest: where[k] for k, e in edits.items()}
    missing = target.agent.store_missing(target.info.store, list(paths))
    if missing and target.agent.store_put_files(target.info.store, {d: paths[d] for d in missing}):
        raise Refused(
            f"files changed while patchkeeper was backing them up: {', '.join(edits)}",
            "make sure nothing else writes to the package, then run `patchkeeper recover` again",
        )
    digests = {k: e.digest for k, e in edits.items()}
    extra = cast("ApplyExtra | RollbackExtra", dict(entry.extra))
    extra["backed_up_at_recovery"] = digests
    entry = replace(entry, hand_edits=tuple(dict.fromkeys([*entry.hand_edits, *edits])), extra=extra)
    return entry, digests
