"""The target's record: ledger entries (one write-once file each), states and their manifests."""

from __future__ import annotations

import json
import marshal
import os
import posixpath
import pwd
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast, overload

from ..errors import BadInput, Refused, StoreError
from ..host.disk import hash_bytes, install_records
from ..printable import one_line
from ..targets import Target, shapes
from . import ledger_index
from .installed import Installed
from .ledger_index import Slot
from .manifest import Manifest

if TYPE_CHECKING:  # the typed parts of entries (ledger_types.py); at run time, as their instances are, dicts
    from .ledger_types import (
        AdoptExtra as AdoptExtra,
    )
    from .ledger_types import (
        ApplyExtra as ApplyExtra,
    )
    from .ledger_types import (
        EnvChange as EnvChange,
    )
    from .ledger_types import (
        Extra as Extra,
    )
    from .ledger_types import (
        PatchSetRef as PatchSetRef,
    )
    from .ledger_types import (
        RecordExtra as RecordExtra,
    )
    from .ledger_types import (
        RepairExtra as RepairExtra,
    )
    from .ledger_types import (
        RollbackExtra as RollbackExtra,
    )
    from .ledger_types import (
        VerifyExtra as VerifyExtra,
    )
else:
    PatchSetRef = RecordExtra = ApplyExtra = RollbackExtra = VerifyExtra = EnvChange = AdoptExtra = (
        RepairExtra
    ) = dict
    Extra = dict


KINDS = ("baseline", "snapshot", "apply", "switch", "rollback", "verify", "repair")


def _copy_ref(ref: PatchSetRef) -> PatchSetRef:
    return cast(PatchSetRef, {k: dict(v) if isinstance(v, dict) else v for k, v in ref.items()})


@dataclass(frozen=True)
class State:
    """A recorded code state: a manifest, the patch sets that made it, whether its bytes are kept."""

    id: str
    manifest: str  # digest of the manifest object in the store
    stack: tuple[PatchSetRef, ...] = ()  # the applied patch sets, in apply order
    name: str | None = None
    bytes_kept: bool = True

    @classmethod
    def make(
        cls, manifest: str, stack: Iterable[PatchSetRef], name: str | None = None, bytes_kept: bool = True
    ) -> State:
        stack = tuple(stack)
        sid = hash_bytes(json.dumps([manifest, list(stack)], sort_keys=True).encode()).partition(":")[2][:12]
        return cls(sid, manifest, stack, name, bytes_kept)

    @classmethod
    def from_dict(cls, d: dict[str, Any], what: str = "state") -> State:
        """A state as a ledger entry holds it, checked (shapes.Malformed): a file's name is made of its id."""
        shapes.state_id(d["id"], f"{what}.id")
        shapes.digest(d["manifest"], f"{what}.manifest")
        stack = tuple(d.get("stack", ()))
        for ref in stack:
            _check_ref(ref, f"a patch set of {what}.stack")
        name = d.get("name")
        if name is not None:
            shapes.text(name, f"{what}.name")
        return cls(d["id"], d["manifest"], stack, name, d.get("bytes_kept", True) is not False)

    def to_dict(self) -> dict[str, Any]:
        """Its fields as plain data; each ref a copy (asdict's deep recursion, at a fraction of its cost)."""
        return {
            "id": self.id,
            "manifest": self.manifest,
            "stack": [_copy_ref(p) for p in self.stack],
            "name": self.name,
            "bytes_kept": self.bytes_kept,
        }

    def stack_text(self) -> str:
        """The applied patch sets, for a line of output (control characters escaped)."""
        return one_line(" + ".join(f"{p['name']}@{p['version']}" for p in self.stack) or "(no patch sets)")


@dataclass(frozen=True)
class LedgerEntry:
    """One write-once record of the ledger; `extra` is typed by `kind` (RecordExtra for baseline and
    snapshot, ApplyExtra for apply and switch, RollbackExtra for rollback, VerifyExtra for verify)."""

    id: str
    seq: int
    time: float
    who: str
    command: str
    kind: str  # one of KINDS
    after: State
    before: State | None = None
    patchsets: tuple[PatchSetRef, ...] = ()  # the patch sets an apply or switch added
    changed: dict[str, str] = field(default_factory=dict)  # key -> changed | added | removed | mode
    hand_edits: tuple[str, ...] = ()  # keys found changed by hand, backed up before the change
    extra: Extra = field(default_factory=lambda: RollbackExtra())
    env: str | None = None  # digest of the environment fingerprint in the store (None: not kept)
    env_error: str | None = None  # why no fingerprint could be taken
    installed: dict[str, Any] | None = None  # the managed distribution's installation (installation.py)
    origin: dict[str, str] = field(default_factory=lambda: dict(ORIGIN.get()))  # where the change came from

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "seq": self.seq,
            "time": self.time,
            "who": self.who,
            "command": self.command,
            "kind": self.kind,
            "patchsets": list(self.patchsets),
            "before": self.before.to_dict() if self.before else None,
            "after": self.after.to_dict(),
            "changed": self.changed,
            "hand_edits": list(self.hand_edits),
            "extra": self.extra,
            **({"env": self.env} if self.env else {}),
            **({"env_error": self.env_error} if self.env_error else {}),
            **({"installed": self.installed} if self.installed else {}),
            **({"origin": self.origin} if self.origin else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LedgerEntry:
        """An entry as its file holds it, checked: every id, digest, key and number that comes from the
        target is what it must be (shapes.py), or shapes.Malformed names the field."""
        shapes.entry_id(d["id"], "id")
        shapes.count(d["seq"], "seq", 1)
        shapes.number(d["time"], "time")
        shapes.text(d["who"], "who")
        shapes.text(d["command"], "command")
        if d["kind"] not in KINDS:
            raise shapes.fail("kind", d["kind"], " | ".join(KINDS))
        patchsets = tuple(d.get("patchsets", ()))
        for ref in patchsets:
            _check_ref(ref, "a patch set of patchsets")
        changed = d.get("changed", {})
        shapes.keys(changed, "changed")
        hand_edits = tuple(d.get("hand_edits", ()))
        shapes.keys(hand_edits, "hand_edits")
        extra = d.get("extra", {})
        _check_extra(extra)
        env, env_error = d.get("env"), d.get("env_error")
        if env is not None:
            shapes.digest(env, "env")
        installed = d.get("installed")
        if installed is not None:
            _check_installed(installed)
        return cls(
            id=d["id"],
            seq=d["seq"],
            time=d["time"],
            who=d["who"],
            command=d["command"],
            kind=d["kind"],
            after=State.from_dict(d["after"], "after"),
            before=State.from_dict(d["before"], "before") if d.get("before") else None,
            patchsets=patchsets,
            changed=changed,
            hand_edits=hand_edits,
            extra=extra,
            env=env,
            env_error=None if env_error is None else shapes.text(env_error, "env_error"),
            installed=installed,
            origin=_origin(d.get("origin")),
        )

    @property
    def backups(self) -> dict[str, str]:
        """Hand-edited key -> digest of the bytes backed up before the change (apply --force, rollback)."""
        found = dict(self.extra).get("backups")
        return dict(found) if isinstance(found, dict) else {}

    @property
    def backed_up(self) -> dict[str, str]:
        """Key -> digest of every backup the entry names: the hand edits a change backed up
        (`backups`), files changed by hand before `recover` finished, and the files a
        --restore-pristine baseline replaced (`replaced`; a file it added back has no backup)."""
        extra = dict(self.extra)
        found: dict[str, str] = {}
        replaced = extra.get("replaced")
        if isinstance(replaced, dict):
            found.update((k, row[0]) for k, row in replaced.items() if isinstance(row, list) and row)
        for name in ("backed_up_at_recovery", "backups"):
            table = extra.get(name)
            if isinstance(table, dict):
                found.update((k, d) for k, d in table.items() if isinstance(d, str))
        return found

    def file_name(self) -> str:
        return ledger_index.file_name(self.seq, self.id)


def _check_ref(ref: Any, what: str) -> None:
    if not isinstance(ref, dict):
        raise shapes.fail(what, ref, "a patch set's name, version and digest")
    shapes.name(ref.get("name"), f"{what}: name")
    shapes.text(ref.get("version"), f"{what}: version")
    shapes.digest(ref.get("digest"), f"{what}: digest")


def _check_installed(installed: Any) -> None:
    """An entry's record of the managed distribution's installation (records/installed.py; checks/installation.py compares it)."""
    if not isinstance(installed, dict):
        raise shapes.fail("installed", installed, "a mapping")
    shapes.name(installed.get("dist_info"), "installed.dist_info")
    shapes.text(installed.get("version"), "installed.version")
    shapes.text(installed.get("installer") or "", "installed.installer")
    if installed.get("files") is not None:
        shapes.digest(installed["files"], "installed.files")
    shapes.count(installed.get("rows") or 0, "installed.rows")
    record = installed.get("record")
    if record is not None:
        if not isinstance(record, list) or len(record) != 2:
            raise shapes.fail("installed.record", record, "[size, mtime_ns]")
        for value in record:
            shapes.count(value, "installed.record")


def _check_extra(extra: Any) -> None:
    """The parts of an entry's `extra` that name files and backups: their keys and digests."""
    if not isinstance(extra, dict):
        raise shapes.fail("extra", extra, "a mapping")
    for table in ("backups", "backed_up_at_recovery"):
        found = extra.get(table)
        if found is not None:
            shapes.keys(found, f"extra.{table}")
            shapes.digests(found.values(), f"extra.{table}")
    for table in ("replaced", "env"):
        found = extra.get(table)
        if found is None:
            continue
        shapes.keys(found, f"extra.{table}")
        for key, value in found.items():
            rows = [value] if table == "replaced" else [value.get("old"), value.get("new")]
            if table == "env":
                shapes.absolute(value.get("path"), f"extra.env[{key!r}].path")
            for row in rows:
                if row is not None:
                    shapes.digest(row[0], f"a digest of extra.{table}[{key!r}]")
    for path in extra.get(ledger_index.CREATED_DIRS) or ():
        shapes.absolute(path, f"extra.{ledger_index.CREATED_DIRS}")


def new_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + os.urandom(3).hex()


# Where the changes of this command come from: the CLI, an Ansible task (ansible_task.py
# sets {"via": "ansible", "playbook": FILE:LINE, "play": NAME, "task": NAME} while it runs), or the
# MCP server (mcpserver/verbs.py: {"via": "mcp", "client": the name its client gave at initialize}).
ORIGIN: ContextVar[dict[str, str]] = ContextVar("origin", default={"via": "cli"})  # noqa: B039
_ORIGIN_KEYS = ("via", "playbook", "play", "task", "client")


def _origin(value: Any) -> dict[str, str]:
    """An entry's origin as its file holds it (entries written before origins were kept have none)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        k in _ORIGIN_KEYS and isinstance(v, str) for k, v in value.items()
    ):
        raise shapes.fail("origin", value, "{via, playbook, play, task} strings")
    return value


def describe_origin(origin: dict[str, str]) -> str:
    """`cli`, `ansible site.yml:12 task 'apply ddtree'`, `mcp client 'claude-code'`, or `?` for an
    entry that did not keep one."""
    if origin.get("via") == "mcp":
        return one_line("mcp" + (f" client {origin['client']!r}" if origin.get("client") else ""))
    if origin.get("via") != "ansible":
        return one_line(origin.get("via") or "?")
    return one_line(
        " ".join(
            ["ansible", origin.get("playbook") or "?"]
            + ([f"task {origin['task']!r}"] if origin.get("task") else [])
        )
    )


def who() -> str:
    try:
        user = os.environ.get("USER") or os.environ.get("LOGNAME") or pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{os.uname().nodename}"  # gethostname(2), without loading the socket module


def warn_untrusted(target: str, what: str, files: dict[str, str]) -> None:
    """One warning for the state files of a target that were not read: another user's, or writable by others."""

    listed = "; ".join(f"{one_line(name)}: {why}" for name, why in sorted(files.items())[:5])
    more = f" and {len(files) - 5} more" if len(files) > 5 else ""
    sys.stderr.write(
        f"patchkeeper: warning: target {target}: {len(files)} {what} ignored ({listed}{more}): only "
        "files of this user or root that no one else may write are read\n  hint: if they are "
        "yours, `chown` them and `chmod go-w` them; else move them aside\n"
    )


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
        return self.target.agent.store_put(self.target.info.store, manifest.to_text())

    def load_manifest(self, state: State) -> Manifest:
        manifest = Manifest.from_scan(self.target.agent.manifest_rows(self.target.info.store, state.manifest))
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
