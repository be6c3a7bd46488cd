"""One ledger entry and the code state it names: frozen values, read from JSON and checked."""

from __future__ import annotations

import json
import os
import pwd
import sys
import time
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from .. import names
from ..host.disk import hash_bytes
from ..printable import one_line
from ..targets import shapes
from . import ledger_index

if TYPE_CHECKING:  # the typed parts of entries (ledger_types.py); at run time, as their instances are, dicts
    from .ledger_types import (
        AdoptExtra as AdoptExtra,
        ApplyExtra as ApplyExtra,
        EnvChange as EnvChange,
        Extra as Extra,
        PatchSetRef as PatchSetRef,
        RecordExtra as RecordExtra,
        RepairExtra as RepairExtra,
        RollbackExtra as RollbackExtra,
        VerifyExtra as VerifyExtra,
    )
else:
    PatchSetRef = RecordExtra = ApplyExtra = RollbackExtra = VerifyExtra = EnvChange = AdoptExtra = (
        RepairExtra
    ) = dict
    Extra = dict


KINDS = ("baseline", "snapshot", "apply", "switch", "rollback", "verify", "repair")
MAX_SEQ = 10**12 - 1  # an entry's number: its file's name starts with it (ledger_index.file_name)


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
        shapes.count(d["seq"], "seq", 1, MAX_SEQ)  # it names the entry's file, and its copy's in snapshots/
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
    problem = names.name_problem(ref["name"]) or names.version_problem(ref["version"])
    if problem:  # both name directories of the workspace (patchsets/<name>, .history/<name>/<version>)
        raise shapes.Malformed(f"{what}: {problem}")
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
    """One warning for the state files of a target that were not read: another user's, or writable by
    others; or not regular files (a FIFO, a directory) or over the size a state file may hold."""

    listed = "; ".join(f"{one_line(name)}: {why}" for name, why in sorted(files.items())[:5])
    more = f" and {len(files) - 5} more" if len(files) > 5 else ""
    sys.stderr.write(
        f"patchkeeper: warning: target {target}: {len(files)} {what} ignored ({listed}{more}): only "
        "regular files of this user or root that no one else may write are read\n  hint: if they are "
        "yours, `chown` them and `chmod go-w` them; else move them aside\n"
    )
