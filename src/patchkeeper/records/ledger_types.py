"""The typed parts of ledger entries (the applied patch sets' refs, each kind's `extra`), as TypedDicts:
for the type checker, and for tests that check recorded entries against them. At run time the ledger
uses plain dicts (ledger.py), as a TypedDict's instances are: building these classes checks every
field's annotation, which every command would pay for."""

from __future__ import annotations

from typing import Any, TypedDict, Union


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
    backed_up_at_recovery: dict[str, str]  # key -> digest of a file changed by hand before `recover` finished
    backups: dict[str, str]  # hand-edited key -> digest of its bytes in the store (--force), for show-backup
    created_dirs: list[str]  # directories its transaction created (absent when none): see transaction.py
    restored: str  # an apply of patch sets already applied whose files were gone: why they were put back


class RollbackExtra(TypedDict, total=False):
    """rollback: nothing for one asked for; an automatic one names what it undid and why;
    `env` the files outside the package it gave back their bytes (see repair)."""

    automatic: bool
    undoes: str
    reason: str | None
    backed_up_at_recovery: dict[str, str]  # as for apply
    backups: dict[str, str]  # hand-edited key -> digest of its bytes in the store, for show-backup
    created_dirs: list[str]  # as ApplyExtra's
    env: dict[str, EnvChange]  # files outside the package it changed (files earlier repairs had changed)


class VerifyExtra(TypedDict):
    """verify: the phase (verify, apply, switch, rollback, automatic rollback), the entry it
    verified (None for `patchkeeper verify`) and the report (verify.Verification.to_dict())."""

    phase: str
    of: str | None
    verify: dict[str, Any]


class EnvChange(TypedDict):
    """A file outside the managed package that a transaction changed: its path and [digest, size,
    mode] before and after (None: absent). Rollback gives such files the bytes of the goal's time."""

    path: str
    old: list[Any] | None
    new: list[Any] | None


class AdoptExtra(RecordExtra, total=False):
    """A first baseline over hand edits: how they were adopted (accept-edits | restore-pristine),
    which files and how they differed; restore-pristine adds the wheel and each file's old entry."""

    adopted: str
    edits: dict[str, str]
    wheel: str
    source: str
    replaced: dict[str, list[Any] | None]


class RepairExtra(TypedDict):
    """repair: the distribution, the wheel its bytes came from, the files changed, those left (why)."""

    dist: str
    version: str
    wheel: str
    source: str
    env: dict[str, EnvChange]
    left: dict[str, str]


Extra = Union[RecordExtra, ApplyExtra, RollbackExtra, VerifyExtra, RepairExtra]  # noqa: UP007
