"""The target's record: ledger entries (one write-once file each), states and their manifests."""

from __future__ import annotations

import json
import os
import pwd
import posixpath
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict, Union

from .host.disk import hash_bytes
from .errors import BadInput, Refused
from .manifest import Manifest
from .targets import Target


class PatchSetRef(TypedDict, total=False):
    """An applied patch set as the ledger names it (`group` since it was written; older refs lack it)."""

    name: str
    version: str
    digest: str
    group: str | None
    vars: dict[str, str]  # the values its role-file templates were rendered with (only when they use any)


# ---- what each kind of entry adds (LedgerEntry.extra), typed per kind; written as JSON as is ----
class RecordExtra(TypedDict):
    """baseline | snapshot: the files recorded and the package version they were recorded at."""

    files: int
    package_version: str


class ApplyExtra(TypedDict, total=False):
    """apply | switch: the refs a switch replaced ([] for an apply), and the workspace commit that
    held the patch sets (absent outside a git workspace)."""

    removed: list[PatchSetRef]
    workspace: dict[str, Any]  # history.workspace_ref: the commit, and whether each patch set is as committed


class RollbackExtra(TypedDict, total=False):
    """rollback: nothing for one asked for; an automatic one names what it undid and why."""

    automatic: bool
    undoes: str
    reason: str | None


class VerifyExtra(TypedDict):
    """verify: the phase (verify, apply, switch, rollback, automatic rollback), the entry it
    verified (None for `patchkeeper verify`) and the report (verify.Verification.to_dict())."""

    phase: str
    of: str | None
    verify: dict[str, Any]


Extra = Union[RecordExtra, ApplyExtra, RollbackExtra, VerifyExtra]
KINDS = ("baseline", "snapshot", "apply", "switch", "rollback", "verify")


@dataclass(frozen=True)
class State:
    """A recorded code state: a manifest, the patch sets that made it, whether its bytes are kept."""

    id: str
    manifest: str  # digest of the manifest object in the store
    stack: tuple[PatchSetRef, ...] = ()  # the applied patch sets, in apply order
    name: str | None = None
    bytes_kept: bool = True

    @classmethod
    def make(cls, manifest: str, stack, name: str | None = None, bytes_kept: bool = True) -> "State":
        stack = tuple(stack)
        sid = hash_bytes(json.dumps([manifest, list(stack)], sort_keys=True).encode()).partition(":")[2][:12]
        return cls(sid, manifest, stack, name, bytes_kept)

    @classmethod
    def from_dict(cls, d: dict) -> "State":
        return cls(d["id"], d["manifest"], tuple(d.get("stack", ())), d.get("name"), d.get("bytes_kept", True))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stack"] = list(self.stack)
        return d

    def stack_text(self) -> str:
        return " + ".join(f"{p['name']}@{p['version']}" for p in self.stack) or "(no patch sets)"


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

    def to_dict(self) -> dict:
        return {"id": self.id, "seq": self.seq, "time": self.time, "who": self.who,
                "command": self.command, "kind": self.kind, "patchsets": list(self.patchsets),
                "before": self.before.to_dict() if self.before else None, "after": self.after.to_dict(),
                "changed": self.changed, "hand_edits": list(self.hand_edits), "extra": self.extra}

    @classmethod
    def from_dict(cls, d: dict) -> "LedgerEntry":
        return cls(id=d["id"], seq=d["seq"], time=d["time"], who=d["who"], command=d["command"],
                   kind=d["kind"], after=State.from_dict(d["after"]),
                   before=State.from_dict(d["before"]) if d.get("before") else None,
                   patchsets=tuple(d.get("patchsets", ())), changed=d.get("changed", {}),
                   hand_edits=tuple(d.get("hand_edits", ())), extra=d.get("extra", {}))

    def file_name(self) -> str:
        return f"{self.seq:06d}-{self.id}.json"


def new_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + os.urandom(3).hex()


def who() -> str:
    try:
        user = os.environ.get("USER") or os.environ.get("LOGNAME") or pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()}"


class Ledger:
    """Read and append the ledger of one target, in its state dir."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.dir = posixpath.join(target.info.state_dir, "ledger")
        self._entries: list[LedgerEntry] | None = None

    @property
    def journal_path(self) -> str:
        return posixpath.join(self.target.info.state_dir, "journal.json")

    @property
    def lock_path(self) -> str:
        return posixpath.join(self.target.info.state_dir, "lock")

    def entries(self) -> list[LedgerEntry]:
        if self._entries is None:
            raw = self.target.agent.read_all(self.dir, ".json")
            self._entries = sorted((LedgerEntry.from_dict(json.loads(b)) for b in raw.values()),
                                   key=lambda e: e.seq)
        return self._entries

    def current(self) -> State | None:
        entries = self.entries()
        return entries[-1].after if entries else None

    def baseline(self) -> State | None:
        for e in self.entries():
            if e.kind == "baseline":
                return e.after
        return None

    def has(self, entry_id: str) -> bool:
        return any(e.id == entry_id for e in self.entries())

    def next_seq(self) -> int:
        entries = self.entries()
        return entries[-1].seq + 1 if entries else 1

    def append(self, entry: LedgerEntry) -> None:
        self.target.agent.write_atomic(posixpath.join(self.dir, entry.file_name()),
                                       json.dumps(entry.to_dict(), indent=1).encode())
        self._entries = None

    def save_manifest(self, manifest: Manifest) -> str:
        return self.target.agent.store_put(self.target.info.store, manifest.to_text())

    def load_manifest(self, state: State) -> Manifest:
        return Manifest.from_text(self.target.agent.store_get(self.target.info.store, state.manifest))

    def find_state(self, spec: str) -> State:
        """baseline | previous | a state name | a state id (prefix) | a ledger entry id."""
        entries = self.entries()
        if not entries:
            raise Refused(f"target {self.target.name} has no recorded states yet",
                          "nothing has been changed by patchkeeper here")
        if spec == "previous":
            current = entries[-1].after
            for e in reversed(entries):
                if e.after.id != current.id:
                    return e.after
            raise Refused("there is no previous state: the target has only ever been in one state")
        for e in reversed(entries):
            if e.after.name == spec or e.id == spec:
                return e.after
        matches = {e.after.id: e.after for e in entries if e.after.id.startswith(spec)}
        if len(matches) == 1:
            return next(iter(matches.values()))
        if len(matches) > 1:
            raise BadInput(f"state id {spec!r} is ambiguous: {', '.join(sorted(matches))}")
        raise BadInput(f"no state {spec!r} on target {self.target.name}",
                       "run `patchkeeper log` to see its states")
