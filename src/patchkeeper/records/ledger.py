"""The target's record: ledger entries (one write-once file each), states and their manifests."""

from __future__ import annotations

import json
import marshal
import posixpath
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any, overload

from ..errors import AgentError, BadInput, Refused, StoreError
from ..host.disk import install_records
from ..host.filekeys import keys_problem
from ..host.manifest_text import values_problem
from ..host.manifests import DAMAGED, DAMAGED_HINT
from ..targets import Target
from . import ledger_index
from .installed import Installed

# the entry's values and typed parts, in ledger_entry.py: re-exported, where their users import them from
from .ledger_entry import (
    KINDS as KINDS,
    ORIGIN as ORIGIN,
    AdoptExtra as AdoptExtra,
    ApplyExtra as ApplyExtra,
    EnvChange as EnvChange,
    Extra as Extra,
    LedgerEntry as LedgerEntry,
    PatchSetRef as PatchSetRef,
    RecordExtra as RecordExtra,
    RepairExtra as RepairExtra,
    RollbackExtra as RollbackExtra,
    State as State,
    VerifyExtra as VerifyExtra,
    describe_origin as describe_origin,
    new_id as new_id,
    warn_untrusted as warn_untrusted,
    who as who,
)
from .ledger_index import Slot
from .manifest import Manifest

MIN_PREFIX = 4  # a shorter state id prefix is refused: `--to 1` is a typo, not a state


class Entries(Sequence[LedgerEntry]):
    """A ledger's entries in seq order, each built from its slot (ledger_index.py) when first asked
    for: a command that needs the newest entry alone (status, audit) builds only that one."""

    def __init__(self, slots: Iterable[Slot]) -> None:
        self._slots = list(slots)
        self._built: list[LedgerEntry | None] = [None] * len(self._slots)

    def __len__(self) -> int:
        return len(self._slots)

    @overload
    def __getitem__(self, i: int) -> LedgerEntry: ...

    @overload
    def __getitem__(self, i: slice) -> list[LedgerEntry]: ...

    def __getitem__(self, i: int | slice) -> LedgerEntry | list[LedgerEntry]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        entry = self._built[i]
        if entry is None:
            doc = self._slots[i].doc
            try:
                entry = self._built[i] = LedgerEntry.from_dict(
                    doc if isinstance(doc, dict) else marshal.loads(doc)
                )
            except (ValueError, KeyError, TypeError, AttributeError, IndexError, EOFError) as exc:
                raise StoreError(
                    f"the ledger index's copy of entry {self._slots[i].name} is damaged ({exc})"[:300],
                    "remove ~/.cache/patchkeeper/ledgers/ (it is rebuilt from the ledger)",
                ) from None
        return entry

    @property
    def slots(self) -> list[Slot]:
        """Each entry's file name, seq, id and facts (ledger_index.Slot), read without building it."""
        return self._slots

    def newest(self, after: str, kind: str | None = None) -> Iterator[LedgerEntry]:
        """The entries that left the state `after` (of `kind`, if given), newest first, each built
        only when the caller goes on to it."""
        for i in reversed(range(len(self._slots))):
            slot = self._slots[i]
            if slot.after == after and (kind is None or slot.kind == kind):
                yield self[i]

    def ids(self) -> list[str]:
        return [slot.id for slot in self._slots]

    def last_seq(self) -> int:
        return self._slots[-1].seq if self._slots else 0

    def add(self, name: str, doc: dict[str, Any]) -> None:
        """An entry just written, in its place by seq (the newest: at the end)."""
        entry = LedgerEntry.from_dict(doc)
        at = len(self._slots)
        while at and self._slots[at - 1].seq > entry.seq:
            at -= 1
        self._slots.insert(at, Slot(name, entry.seq, entry.id, ledger_index.facts_of(doc), doc))
        self._built.insert(at, entry)


class Ledger:
    """Read and append the ledger of one target, in its state dir."""

    def __init__(self, target: Target, indexed: bool = True) -> None:
        self.target = target
        self.indexed = indexed  # False: every entry file read and parsed again (audit --rehash)
        self.dir = posixpath.join(target.info.state_dir, "ledger")
        self._entries: Entries | None = None
        self.files_read = 0  # entry files whose bytes the last read of the ledger took (ledger_index.py)

    @property
    def journal_path(self) -> str:
        return posixpath.join(self.target.info.state_dir, "journal.json")

    @property
    def lock_path(self) -> str:
        return posixpath.join(self.target.info.state_dir, "lock")

    def entries(self) -> Entries:
        """Every entry, in seq order: the files unchanged since an earlier command read them come
        from the ledger index, the others are read and parsed (a damaged one is a StoreError)."""
        if self._entries is None:
            found = ledger_index.read(self.target, self.dir, self._parse, self.indexed)
            self._entries, self.files_read = Entries(found.slots), found.files_read
            if found.untrusted:
                warn_untrusted(
                    self.target.name,
                    "ledger entr" + ("y" if len(found.untrusted) == 1 else "ies"),
                    found.untrusted,
                )
        return self._entries

    def _parse(self, name: str, data: bytes) -> dict[str, Any]:
        """An entry file's document, checked to make a LedgerEntry."""
        try:
            doc = json.loads(data)
            LedgerEntry.from_dict(doc)
            return doc  # type: ignore[no-any-return]
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            path = posixpath.join(self.dir, name)
            raise StoreError(
                f"ledger entry {path} of target {self.target.name} is damaged ({type(exc).__name__}: "
                f"{str(exc)[:120]})",
                f"put back the workspace's copy (snapshots/{self.target.name}/ledger/{name}) if it has one, "
                "else move the file aside; nothing was changed",
            ) from None

    def current(self) -> State | None:
        entries = self.entries()
        return entries[-1].after if entries else None

    def baseline(self, release: str | None = None) -> State | None:
        """The baseline: of the installed release (or of `release`), the newest recorded for it (a
        target whose package was upgraded outside patchkeeper records a baseline of each release it
        changes); else the first one."""
        entries = self.entries()
        found = [i for i, slot in enumerate(entries.slots) if slot.kind == "baseline"]
        if not found:
            return None
        if len(found) > 1:
            release = release or self.target.info.version
            for i in reversed(found):
                entry = entries[i]
                if (entry.installed or {}).get(
                    "version", dict(entry.extra).get("package_version")
                ) == release:
                    return entry.after
        return entries[found[0]].after

    def has(self, entry_id: str) -> bool:
        return entry_id in self.entries().ids()

    def next_seq(self) -> int:
        return self.entries().last_seq() + 1

    def stamped(self, entry: LedgerEntry) -> LedgerEntry:
        """An entry that records a state (every kind but verify) with the managed distribution's
        installation as it is now, unless it has one (installation.py: what pip, uv or a person did to
        it since is told by comparing with it). A transaction's entry gets it before its journal is
        written, so a recovery after a later reinstall does not take that one for the state's."""
        if entry.kind == "verify" or entry.installed is not None:
            return entry
        return replace(entry, installed=Installed.of(self.target.info).to_dict())

    def append(self, entry: LedgerEntry) -> None:
        """Write an entry (stamped, see `stamped`)."""
        entry = self.stamped(entry)
        data = json.dumps(entry.to_dict(), indent=1).encode()
        self.target.agent.write_atomic(posixpath.join(self.dir, entry.file_name()), data)
        if self._entries is not None:  # the entries read already, and this one as a read gives it back
            self._entries.add(entry.file_name(), json.loads(data))

    def save_manifest(self, manifest: Manifest) -> str:
        """Store a state's manifest, once `check_recordable` lets it be recorded."""
        self.check_recordable(manifest)
        return self.target.agent.store_put(self.target.info.store, manifest.to_text())

    def check_recordable(self, manifest: Manifest) -> None:
        """Refuse (BadInput) a manifest its reader would refuse, so that no state is recorded that
        could not be read back: a key that is not a file key (host/filekeys.py: a file in site-packages
        named with a backslash, a .git part, bytes that are not UTF-8), or a file whose mode has a
        setuid, setgid or sticky bit (host/manifest_text.py: a recorded mode is permission bits only)."""
        problem = keys_problem(manifest)
        if problem:
            raise BadInput(
                f"target {self.target.name}: patchkeeper cannot record the file: {problem}",
                "rename or remove that file in site-packages (a file key is a plain relative path), then retry",
            )
        problem = values_problem(manifest.rows())
        if problem:
            raise BadInput(
                f"target {self.target.name}: patchkeeper cannot record the {problem}",
                "clear the setuid, setgid and sticky bits of that file (`chmod u-s,g-s,-t FILE`) or remove it "
                "from site-packages, then retry",
            )

    def load_manifest(self, state: State) -> Manifest:
        """The state's manifest, from the target's store; one whose lines or keys are not a manifest's
        (a damaged or hostile state dir: host/manifest_text.parse) is refused naming the state."""
        try:
            rows = self.target.agent.manifest_rows(self.target.info.store, state.manifest)
        except AgentError as exc:
            if exc.kind != DAMAGED:
                raise
            raise StoreError(
                f"state {state.id} ({state.name or 'unnamed'}) of target {self.target.name}: {exc.message}",
                DAMAGED_HINT.replace("<target>", self.target.name),
            ) from None
        manifest = Manifest.from_scan(rows)
        old = install_records(manifest)
        return manifest.replace(dict.fromkeys(old)) if old else manifest  # recorded before they were left out

    def find_state(self, spec: str) -> State:
        """baseline | previous | a state name | a state id (prefix) | a ledger entry id."""
        entries = self.entries()
        if not entries:
            raise Refused(
                f"target {self.target.name} has no recorded states yet",
                "nothing has been changed by patchkeeper here",
            )
        slots = entries.slots
        if spec == "baseline":  # the installed release's (see baseline)
            found = self.baseline()
            if found is not None:
                return found
        if spec == "previous":
            current = slots[-1].after
            for i in reversed(range(len(slots))):
                if slots[i].after != current:
                    return entries[i].after
            raise Refused("there is no previous state: the target has only ever been in one state")
        for i in reversed(range(len(slots))):
            if slots[i].after_name == spec or slots[i].id == spec:
                return entries[i].after
        if len(spec) < MIN_PREFIX:
            raise BadInput(
                f"no state named {spec!r} on target {self.target.name}, and a state id prefix "
                f"needs at least {MIN_PREFIX} characters",
                "give more of the id (`patchkeeper log` shows them), or baseline | previous | a name",
            )
        matches = {
            slot.after: entries[i].after for i, slot in enumerate(slots) if slot.after.startswith(spec)
        }
        if len(matches) == 1:
            return next(iter(matches.values()))
        if len(matches) > 1:
            listed = "; ".join(
                f"{sid} ({state.name or state.stack_text()})" for sid, state in sorted(matches.items())
            )
            raise BadInput(
                f"state id prefix {spec!r} is ambiguous: {len(matches)} states start with it",
                f"give more characters; the candidates: {listed}",
            )
        raise BadInput(
            f"no state {spec!r} on target {self.target.name}", "run `patchkeeper log` to see its states"
        )
