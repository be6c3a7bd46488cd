"""Plan giving an installed distribution's damaged files their release bytes back (from its wheel),
and, for rollback, the bytes every repair left outside the managed package at each point of the ledger."""

from __future__ import annotations

import json
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ..checks import environment, wheels
from ..checks.audit import cache_dir
from ..errors import BadInput, PatchkeeperError, Refused
from ..host.contract import ScanRequest
from ..host.disk import hash_bytes, normalize_name
from ..host.distinfo import record_text_rows
from ..records.ledger import (
    EnvChange,
    Ledger,
    LedgerEntry,
    RepairExtra,
    State,
    new_id,
    who,
)
from ..records.manifest import Entry
from ..targets import Target
from ..targets.shapes import (
    ENV as ENV_PREFIX,
)  # keys of files outside the package ("%six.py"), never in a manifest
from .plans import changed_by
from .transaction import FileOp


@dataclass(frozen=True)
class Damage:
    """The files of one installed distribution that differ from its RECORD."""

    name: str
    version: str
    site: str
    dist_info: str
    files: dict[str, str]  # RECORD path -> changed | missing | not-a-file
    record: dict[str, str]  # RECORD path -> "algo:b64", for those files

    def path(self, rel: str) -> str:
        return posixpath.normpath(posixpath.join(self.site, rel))


@dataclass(frozen=True)
class Restoration:
    """The release bytes found for a Damage, every one checked against RECORD."""

    wheel: str  # the wheel's file name
    source: str  # --wheel | the workspace's wheels directory | pip download
    files: dict[str, tuple[bytes, int]]  # RECORD path -> (bytes, mode)
    left: dict[str, str]  # RECORD path -> why it is not restored


def find_damage(target: Target, dist: str, only_inside: bool = False) -> Damage:
    """Check an installed distribution against its RECORD, on the target (its stat cache keeps
    a repeated check cheap). `only_inside`: leave out paths outside site-packages."""

    info = target.info
    py = target.interpreter()
    sites = list(dict.fromkeys([info.site, py.purelib, py.platlib]))
    found = target.agent.dist_info(sites, dist)
    if found is None:
        raise BadInput(
            f"distribution {dist!r} is not installed on {target.name} ({' or '.join(sites)})",
            f"check the name with `{info.python} -m pip list` on the target",
        )
    site, name = found.site, found.dist_info
    result = target.agent.audit_record(site, [name], cache_dir(target))[name]
    if result.note:
        raise Refused(f"{dist} on {target.name} has {result.note}", "reinstall it with pip instead")
    files = {
        rel: kind
        for rel, kind, _ in result.findings
        if not only_inside or not (rel.startswith("../") or posixpath.isabs(rel))
    }
    text = target.agent.read(posixpath.join(site, name, "RECORD")).decode("utf-8")
    record = {
        rel: f"{algo}:{b64}" for rel, algo, b64, _ in record_text_rows(text.splitlines()) if rel in files
    }
    label = name[: -len(".dist-info")].rpartition("-")[0] or dist
    return Damage(label, found.version, site, name, files, record)


def restore(
    target: Target, damage: Damage, explicit: str | None, wheels_dir: Path | None, wheel_option: bool
) -> Restoration:
    """The release bytes of every damaged file, from the first candidate wheel of the right
    distribution and version whose files match the installed RECORD; refused when none does.
    `wheel_option`: whether the verb has --wheel, for the hints."""

    info = target.info
    interps = wheels.interpreters(info.python, info.prefix, info.python_version)
    problems: list[str] = []
    with wheels.candidates(target, damage.name, damage.version, explicit, wheels_dir, wheel_option) as (
        source,
        paths,
    ):
        for path in paths:
            with wheels.Wheel(path) as wheel:
                if normalize_name(wheel.name) != normalize_name(damage.name) or not wheels.same_version(
                    wheel.version, damage.version
                ):
                    problems.append(
                        f"{path.name} is {wheel.name} {wheel.version}, not {damage.name} {damage.version}"
                    )
                    continue
                files, left, bad = {}, {}, []
                for rel in sorted(damage.files):
                    if rel not in damage.record:
                        left[rel] = "RECORD gives no hash to check it by"
                        continue
                    current = _current(target, damage, rel)
                    got = wheel.release_bytes(
                        rel, damage.record[rel], damage.site, info.prefix, interps, current
                    )
                    if isinstance(got, wheels.Unavailable):
                        (bad.append(rel) if got.mismatch else left.__setitem__(rel, got.reason))
                    else:
                        files[rel] = got
                if bad:
                    problems.append(
                        f"{path.name} does not match the installed RECORD in {', '.join(bad[:5])}"
                    )
                    continue
                return Restoration(path.name, source, files, left)
    raise Refused(
        f"no wheel from {source} matches {damage.name} {damage.version} as installed on {target.name}: "
        + "; ".join(problems),
        f"find the wheel of {damage.name}=={damage.version} that was installed (see its "
        f"RECORD) and {wheels.where_to_put(wheels_dir, wheel_option)}",
    )


def _current(target: Target, damage: Damage, rel: str) -> bytes | None:
    """The file's present bytes, for a script whose shebang line tells the interpreter it was written for."""
    if not rel.startswith("../"):
        return None
    try:
        return target.agent.read(damage.path(rel))[:4096]
    except OSError:
        return None


def env_key(target: Target, path: str) -> str:
    return ENV_PREFIX + posixpath.relpath(path, target.info.site)


def file_ops(
    target: Target, paths: dict[str, str], files: dict[str, tuple[bytes, int] | None]
) -> tuple[list[FileOp], dict[str, bytes]]:
    """One FileOp per key whose file is not already as wanted (None: removed), with the new bytes."""
    actual = {k: Entry.of(v) for k, v in target.agent.scan(ScanRequest("/", absolute=paths)).rows.items()}
    ops, contents = [], {}
    for key, want in files.items():
        new = None
        if want is not None:
            data, mode = want
            digest = target.hash_bytes(data)
            new = Entry(digest, len(data), mode)
            contents[digest] = data
        if actual.get(key) != new:
            ops.append(FileOp(key, paths[key], actual.get(key), new))
    return ops, contents


def row(e: Entry | None) -> list[Any] | None:
    return [e.digest, e.size, e.mode] if e else None


def env_extra(ops: list[FileOp]) -> dict[str, EnvChange]:
    """What a ledger entry keeps of the files it changed outside the package: path, old, new."""
    return {op.key: EnvChange(path=op.path, old=row(op.old), new=row(op.new)) for op in ops}


def repaired_state(current: State, entry_id: str) -> State:
    """The state after a repair: the same code (manifest and stack) under an id of its own, so
    `rollback --to previous` finds the state before it."""
    sid = hash_bytes(
        json.dumps([current.manifest, list(current.stack), {"repair": entry_id}]).encode(), "sha256"
    ).partition(":")[2][:12]
    return State(sid, current.manifest, current.stack, None, current.bytes_kept)


def plan(
    target: Target, ledger: Ledger, current: State, command: str, damage: Damage, found: Restoration
) -> tuple[list[FileOp], dict[str, bytes], LedgerEntry]:
    """The repair's file operations and its ledger entry (kind `repair`)."""
    paths = {env_key(target, damage.path(rel)): damage.path(rel) for rel in found.files}
    ops, contents = file_ops(
        target, paths, {env_key(target, damage.path(rel)): v for rel, v in found.files.items()}
    )
    entry_id = new_id()
    entry = LedgerEntry(
        id=entry_id,
        seq=ledger.next_seq(),
        time=time.time(),
        who=who(),
        command=command,
        kind="repair",
        before=current,
        after=repaired_state(current, entry_id),
        changed=changed_by(ops),
        extra=RepairExtra(
            dist=damage.name,
            version=damage.version,
            wheel=found.wheel,
            source=found.source,
            env=env_extra(ops),
            left=found.left,
        ),
    )
    return ops, contents, entry


# ---- rollback across repairs -----------------------------------------------------------------
def rollback_goal(ledger: Ledger, spec: str) -> tuple[State, int, bool]:
    """The state to roll back to, the ledger position whose files it means, and whether the
    rollback undoes a repair (what it replaced comes back). A repair's own transaction id names the
    state before it (a repair changes no code, so that is what undoing it by its id can mean), and
    so does `previous` right after a repair."""
    entries = ledger.entries()
    for i, slot in enumerate(entries.slots):
        if slot.id == spec and slot.kind == "repair" and (before := entries[i].before) is not None:
            return before, i - 1, True
    goal = ledger.find_state(spec)
    at = [i for i, slot in enumerate(entries.slots) if slot.after == goal.id]
    undo = spec == "previous" and entries.slots[-1].kind == "repair"
    return goal, at[-1] if at else len(entries) - 1, undo


def recorded_clean(target: Target, ledger: Ledger, goal: State) -> Callable[[str, str, str], bool]:
    """Whether the environment fingerprint kept with `goal` recorded a file (a RECORD path, relative
    to the target's site dir) of a distribution and version matching its RECORD: a rollback to that
    state then keeps the release bytes a later repair put back, never the damage it replaced."""

    entry = environment.entry_of(ledger, goal)
    try:
        dists = (
            (environment.load(target, entry.env or "").get("distributions") or {})
            if entry is not None
            else {}
        )
    except PatchkeeperError:
        dists = {}

    def clean(dist: str, version: str, rel: str) -> bool:
        found = dists.get(normalize_name(dist))
        if not found or found.get("managed") or found.get("note") or found.get("version") != version:
            return False
        if found.get("checked") == "identity":  # kept by a change, which reads no other distribution's files:
            return True  # the release's bytes stay (a damage the repair replaced is not given back unasked)
        return found.get("files") is not None and rel not in {p for p, _ in found.get("differ") or []}

    return clean


def environment_ops(
    target: Target, ledger: Ledger, upto: int, clean: Callable[[str, str, str], bool] | None = None
) -> list[FileOp]:
    """Every file outside the package that a transaction changed, given the bytes it had at
    ledger position `upto`: what the first later change found there (so undoing a repair puts
    back exactly the bytes it replaced), else what the last change up to then left. Where that
    first later change is a repair and `clean(dist, version, path)` says the state at `upto` had
    the file as its RECORD says (recorded_clean), the release bytes the repair wrote stay: the
    damage it replaced came after that state."""
    earlier: dict[str, tuple[str, list[Any] | None]] = {}
    later: dict[str, tuple[str, list[Any] | None]] = {}
    entries = ledger.entries()
    for i, slot in enumerate(entries.slots):
        if not slot.env:
            continue
        extra = entries[i].extra
        env = cast("dict[str, EnvChange]", extra.get("env") or {})
        repaired = cast("RepairExtra", extra) if entries[i].kind == "repair" else None
        for key, change in env.items():
            if i <= upto:
                earlier[key] = (change["path"], change["new"])
            elif key not in later:
                keep = (
                    repaired is not None
                    and clean is not None
                    and change["new"] is not None
                    and clean(repaired["dist"], repaired["version"], key[len(ENV_PREFIX) :])
                )
                later[key] = (change["path"], change["new"] if keep else change["old"])
    want = {**earlier, **later}
    if not want:
        return []
    paths = {key: path for key, (path, _) in want.items()}
    actual = {k: Entry.of(v) for k, v in target.agent.scan(ScanRequest("/", absolute=paths)).rows.items()}
    ops = []
    for key, (path, row) in sorted(want.items()):
        new = Entry(*row) if row else None  # a ledger row: [digest, size, mode]
        if actual.get(key) != new:
            ops.append(FileOp(key, path, actual.get(key), new))
    return ops
