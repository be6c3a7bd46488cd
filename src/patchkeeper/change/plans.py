"""What every plan shares: the recorded state it starts from, the files as they are, and the entries
and bytes it ends with (engine.py plans apply and rollback, reapply.py a reinstalled state's files;
new_entry makes the ledger entries of snapshot, adopt and verify too)."""

from __future__ import annotations

import posixpath
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..checks.scan import compare, scan_all
from ..errors import BadInput, PatchkeeperError, StoreError
from ..host.contract import ScanRequest
from ..printable import one_line
from ..records.ledger import ApplyExtra, Extra, LedgerEntry, PatchSetRef, RollbackExtra, State, new_id, who
from ..records.manifest import ROLE_PREFIX, Entry, Manifest, differences
from ..targets import Target
from .session import Session
from .transaction import FileOp

if TYPE_CHECKING:
    from .stacks import FileCheck, Misfit


@dataclass(frozen=True)
class Plan:
    """A change worked out in full before anything changes: its file operations, new contents and ledger entry."""

    ops: tuple[FileOp, ...]
    contents: dict[str, bytes]
    entry: LedgerEntry
    drift: tuple[str, ...] = ()  # keys that differ from the recorded state before the change
    notes: tuple[str, ...] = field(default_factory=tuple)
    checks: tuple[FileCheck, ...] = ()  # a trial's report of every file patch of the sets applied
    misfits: tuple[Misfit, ...] = ()  # a trial's misfits of those sets for the target


@dataclass(frozen=True)
class Changed:
    """A plan carried out (or, on a dry run, the plan that would be); `exec_start` is the unit's
    effective ExecStart after it (units.Command, or why it is not known) when it changed a role file."""

    plan: Plan
    dry_run: bool
    exec_start: Any = None


def scan_keys(target: Target, keys: Iterable[str]) -> dict[str, Entry]:
    info = target.info
    roles = info.role_keys()
    paths = tuple(k for k in keys if not k.startswith(ROLE_PREFIX))
    extra = {k: roles[k] for k in keys if k in roles}
    rows = target.agent.scan(ScanRequest(info.site, paths, (), None, extra)).rows
    return {k: Entry.of(v) for k, v in rows.items()}


def drift(target: Target, manifest_digest: str) -> dict[str, str]:
    """key -> changed | added | removed | mode for every file that differs from a recorded manifest."""
    (pairs,) = compare(target, manifest_digest)
    return kinds(pairs)


def kinds(pairs: dict[str, tuple[Entry | None, Entry | None]]) -> dict[str, str]:
    return differences(
        {k: old for k, (old, _) in pairs.items() if old}, {k: new for k, (_, new) in pairs.items() if new}
    )


def backups(ops: Sequence[FileOp], hand: tuple[str, ...]) -> dict[str, str]:
    """key -> digest of the hand-edited files the change overwrites (their bytes are put in the store
    before anything changes, and `patchkeeper show-backup DIGEST` gives them back)."""
    return {op.key: op.old.digest for op in ops if op.key in hand and op.old is not None}


def changed_by(ops: Iterable[FileOp]) -> dict[str, str]:
    """key -> changed | added | removed | mode for each file `ops` change (an entry's `changed`)."""
    ops = list(ops)
    return differences({op.key: op.old for op in ops if op.old}, {op.key: op.new for op in ops if op.new})


def new_entry(
    s: Session,
    kind: str,
    before: State | None,
    after: State,
    extra: Extra,
    ops: Sequence[FileOp] = (),
    hand_edits: tuple[str, ...] = (),
    patchsets: tuple[PatchSetRef, ...] = (),
) -> LedgerEntry:
    """A ledger entry of the session's command, numbered after the ledger's last and made now: from
    state `before` to `after` by `ops` (its `changed`)."""
    return LedgerEntry(
        id=new_id(),
        seq=s.ledger.next_seq(),
        time=time.time(),
        who=who(),
        command=s.command,
        kind=kind,
        before=before,
        after=after,
        patchsets=patchsets,
        changed=changed_by(ops),
        hand_edits=hand_edits,
        extra=extra,
    )


def change_entry(
    s: Session,
    kind: str,
    before: State,
    after: State,
    extra: ApplyExtra | RollbackExtra,
    ops: Sequence[FileOp],
    hand: tuple[str, ...],
    patchsets: tuple[PatchSetRef, ...] = (),
) -> LedgerEntry:
    """The entry of a plan that changes the package's files (apply, switch, a reapply, rollback): as
    `new_entry`, the hand edits `hand` among the files it overwrites named in extra["backups"]."""
    saved = backups(ops, hand)
    if saved:
        extra["backups"] = saved
    return new_entry(s, kind, before, after, extra, ops, hand, patchsets)


Restored = Mapping[str, "tuple[bytes, int] | None"]  # key -> the release's (bytes, mode), None: the file goes
# (what a first baseline with --restore-pristine puts back: its dry run plans on these, adopt.preview)


def restored_entries(target: Target, restored: Restored) -> dict[str, Entry | None]:
    return {
        k: None if v is None else Entry(target.hash_bytes(v[0]), len(v[0]), v[1]) for k, v in restored.items()
    }


class Recorded:
    """The last recorded state's manifest as a plan reads it (before any baseline: the files as
    they are, with the release's bytes where --restore-pristine would put them back), loaded when
    first asked for."""

    def __init__(self, s: Session, restored: Restored | None = None) -> None:
        self._ledger = s.ledger
        self._manifest: Manifest | None = None
        current = s.ledger.current()
        moved = s.installation() if current is not None else None
        if current is None or (moved is not None and moved.kind == "version"):  # (a dry run: no baseline yet)
            self._manifest = scan_all(s.target).replace(restored_entries(s.target, restored or {}))
            current = State.make(s.target.hash_bytes(self._manifest.to_text()), (), "baseline")
        self._scanned = self._manifest is not None
        self.state: State = current

    def manifest(self) -> Manifest:
        if self._manifest is None:
            self._manifest = self._ledger.load_manifest(self.state)
        return self._manifest

    def entries(self, keys: Iterable[str]) -> dict[str, Entry | None]:
        """The recorded entry of each key (None: not recorded)."""
        manifest = self.manifest()
        return {k: manifest.get(k) for k in keys}

    def changed(self, planned: Mapping[str, Entry | None]) -> bytes:
        """The text of the manifest with `planned`'s entries (None: the file is removed), once the
        ledger lets it be recorded (Ledger.check_recordable: no setuid file, say, that a later rollback
        would refuse to read back): the planned entries, or all where the files were scanned (a stored
        manifest was checked as it was parsed)."""
        manifest = self.manifest().replace(planned)
        changes = {k: e for k, e in planned.items() if e is not None}
        self._ledger.check_recordable(manifest if self._scanned else Manifest(changes))
        return manifest.to_text()


def baseline(s: Session) -> State:
    baseline = s.ledger.baseline()
    if baseline is None:  # every recorded state descends from a baseline
        raise StoreError(
            f"target {s.target.name} has recorded states but no baseline",
            "its ledger is damaged; see `patchkeeper log`",
        )
    return baseline


def baseline_bytes(target: Target, base: Manifest, actual: dict[str, Entry], key: str) -> bytes | None:
    entry = base.get(key)
    if entry is None:
        return None
    if actual.get(key) is not None and actual[key].digest == entry.digest:
        return target.agent.read(target.info.path_of(key))
    try:
        return target.agent.store_get(target.info.store, entry.digest)
    except (PatchkeeperError, OSError) as exc:  # AgentError (missing, corrupt), TargetError (remote)
        raise StoreError(
            f"baseline bytes of {key} are not available: {exc}",
            "the baseline was recorded by `patchkeeper snapshot --manifest-only`, without the bytes: "
            "restore the file first",
        ) from None


def refuse_non_regular(target: Target, absent: list[str]) -> None:
    """Files a patch modifies or deletes that the scan did not find as regular files: refuse a symlink,
    directory or device there by name (a scan sees regular files only: they would read as "does not
    exist"). Added files and role files meet the transaction's check of destinations instead."""
    odd = []
    for key in absent:
        try:
            st = target.agent.lstat(target.info.path_of(key))
        except (OSError, PatchkeeperError):  # e.g. a parent that is no directory: the stage step says so
            continue
        if st is not None:
            odd.append(
                f"{key} ({'a symlink' if st.is_link else 'a directory' if st.is_dir else 'not a regular file'})"
            )
    if odd:
        raise BadInput(
            f"{len(odd)} path(s) the patch sets change are not regular files, so nothing was changed: "
            + ", ".join(odd),
            "patchkeeper manages regular files only; replace them with the files themselves",
        )


def refuse_escaping(target: Target, keys: Iterable[str], what: str) -> None:
    """Refuse keys whose directory is a symlink (or below one): out of site-packages, or to another
    directory in it (as git apply refuses a path beyond a symlink); and a role file whose own directory
    is a symlink (refuse_linked_role_dir). Nothing is written there."""
    keys = list(keys)
    for key in sorted({k for k in keys if k.startswith(ROLE_PREFIX)}):
        refuse_linked_role_dir(target, key, what)
    rels = [k for k in keys if not k.startswith(ROLE_PREFIX)]
    found = target.agent.escaping(target.info.site, rels) if rels else {}
    if not found:
        return
    site = target.info.site.rstrip("/") + "/"
    outside = {rel: where for rel, where in found.items() if not where.startswith(site)}
    shown = outside or found
    listed = ", ".join(f"{rel} -> {where}" for rel, where in list(shown.items())[:5])
    raise BadInput(
        f"{len(shown)} path(s) {what} lead outside site-packages (through a symlink): {listed}"
        if outside
        else f"{len(found)} path(s) {what} lead through a symlinked directory in site-packages: {listed}",
        "remove the symlink (or restore the directory it replaced), then retry",
    )


def refuse_linked_role_dir(target: Target, key: str, what: str) -> None:
    """Refuse a role file whose directory is a symlink (`<unit>.d` -> elsewhere). systemd follows it
    (it chases the symlinks of a drop-in directory: src/shared/dropin.c, unit_file_find_dir), so a
    drop-in written through it lands in, and applies from, the directory it points to, outside the one
    the target names, and maybe shared by other units; a removal would remove a file there."""
    path = target.info.path_of(key)
    directory = posixpath.dirname(path)
    try:
        found = target.agent.lstat(directory)
    except OSError:  # a file where a directory of the path is: the transaction's obstacle check says so
        return
    if found is None or not found.is_link:
        return
    role = key[len(ROLE_PREFIX) :]
    raise BadInput(
        f"target {target.name}: {what} the {role} file {one_line(path)}, but its directory is a symlink "
        f"(to {one_line(target.agent.realpath(directory))}): the file would be written there, outside {directory}",
        f"replace the symlink {directory} by a directory of its own, or set [targets.{target.name}.files] "
        f"{role} to the path it should have, then retry",
    )


def planned_entries(
    target: Target, files: dict[str, bytes | None], modes: dict[str, int]
) -> tuple[dict[str, Entry | None], dict[str, bytes]]:
    """The entry each key will have after the change (None: absent), and the new contents by digest."""
    planned: dict[str, Entry | None] = {}
    contents: dict[str, bytes] = {}
    for key, data in files.items():
        if data is None:
            planned[key] = None
        else:
            digest = target.hash_bytes(data)
            planned[key] = Entry(digest, len(data), modes.get(key, 0o644))
            contents[digest] = data
    return planned, contents
