"""Adopting a host patched by hand: before a target's first baseline, its managed package against
its RECORD; hand edits are refused, restored to the release's bytes, or recorded as they are."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from ..checks import environment, scan
from ..errors import BadInput, Refused
from ..host.distinfo import record_text_rows
from ..records.ledger import AdoptExtra, LedgerEntry, State
from ..records.manifest import ROLE_PREFIX, Entry, Manifest
from ..targets import Target
from . import engine, plans, repair, transaction
from .plans import Restored
from .session import Session

if TYPE_CHECKING:  # repair (RECORD rows, wheels) loads only where a baseline is first recorded
    from . import repair

MODES = ("restore-pristine", "accept-edits")
BYTECODE = "bytecode"  # the kind of a hand edit that is a pyc running other code than its source


def check_mode(restore_pristine: bool, accept_edits: bool) -> str | None:
    if restore_pristine and accept_edits:
        raise BadInput("--restore-pristine and --accept-edits exclude each other", "pick one")
    return "restore-pristine" if restore_pristine else "accept-edits" if accept_edits else None


def too_late(s: Session, adopt: str) -> BadInput:
    """--restore-pristine or --accept-edits given to a target that has its baseline already: they act
    only before it, and what does the same now."""
    current = s.ledger.current()
    where = f" -t {s.target.name}" if s.target.name != s.workspace.default_target else ""
    then = (
        f"to drop hand edits now: `patchkeeper rollback{where} --to {current.id if current else 'baseline'}` "
        "gives every file the current state's recorded bytes (hand edits backed up first), then run the "
        "command again without --restore-pristine"
        if adopt == "restore-pristine"
        else f"to keep hand edits as they are now: `patchkeeper snapshot{where} --name NAME` records them, or "
        f"`patchkeeper record NAME{where} --from STATE` makes them a patch set"
    )
    return BadInput(
        f"--{adopt} acts only before a target's first baseline; {s.target.name} has one "
        f"(current state {current.id if current else '-'})",
        then,
    )


def ensure_baseline(s: Session, bytes_kept: bool = True, adopt: str | None = None) -> LedgerEntry | None:
    """Record the baseline unless a state is recorded already; the new baseline entry, or None.
    The package is checked against its RECORD first: hand edits are refused, or handled as
    `adopt` says (restore-pristine | accept-edits; below)."""
    if s.ledger.current() is not None and not new_release(s):
        return None
    return record_baseline(s, bytes_kept, adopt)


def new_release(s: Session) -> bool:
    """Whether another release of the package was installed outside patchkeeper since the current
    state: the first change after it records that release's baseline, as the first change to a new
    target does (the old release's states stay, for a rollback once it is installed again)."""
    moved = s.installation()
    return moved is not None and moved.kind == "version"


def hand_edits(s: Session) -> tuple[repair.Damage, dict[str, str], Manifest]:
    """The package's files that differ from its RECORD (changed, missing) or that RECORD does not
    list (added), with the damage as repair sees it and the files as they are."""

    info = s.target.info
    damage = repair.find_damage(s.target, info.package, only_inside=True)
    manifest = scan.scan_all(s.target)
    dist = s.target.agent.dist_info([info.site], info.package)
    listed = set(dist.record) if dist else set()
    edits = dict(damage.files)
    edits.update({k: "added" for k in manifest if not k.startswith(ROLE_PREFIX) and k not in listed})
    edits.update({path: BYTECODE for path, _, _ in foreign_bytecode(s.target)})
    return damage, dict(sorted(edits.items())), manifest


def foreign_bytecode(target: Target) -> tuple[tuple[str, str, str], ...]:
    """The package's pycs that Python runs instead of their source and that hold other code (or
    have no source): (path, kind, detail), as audit reports them (host/bytecode.installed_bytecode)."""
    info = target.info
    tag = "cpython-" + "".join(info.python_version.split(".")[:2])
    return target.agent.installed_bytecode(
        info.site, tag, info.top_dirs(), f"{info.site}/{info.dist_info}/RECORD"
    ).findings


def _refusal(s: Session, edits: dict[str, str]) -> Refused:
    info = s.target.info
    listed = ", ".join(f"{k} ({kind})" for k, kind in list(edits.items())[:20])
    more = f" and {len(edits) - 20} more" if len(edits) > 20 else ""
    moved = s.installation() if s.ledger.current() is not None else None
    why = (
        f"{moved.what()}, so a baseline of {info.version} is recorded first, but "
        if moved is not None
        else ""
    )
    return Refused(
        f"{why}{len(edits)} file(s) of {info.package} {info.version} on {s.target.name} differ from its RECORD "
        f"(edited by hand before patchkeeper?): {listed}{more}; no baseline was recorded",
        "--restore-pristine puts the release's bytes back first (from its wheel; a foreign pyc is "
        "taken out, so Python compiles its source), so the baseline is the pristine release; "
        "--accept-edits records them as they are, and the ledger says so",
    )


def record_baseline(s: Session, bytes_kept: bool, how: str | None) -> LedgerEntry:
    """Record the first baseline, after checking the package against its RECORD."""
    damage, edits, manifest = hand_edits(s)
    # the scan that found no edits is the one recorded: on a freshly copied tree (every ctime new, so
    # nothing is trusted from the stat cache) a second scan would hash every file again
    if not edits:
        return engine.record_state(s, "baseline", "baseline", bytes_kept, scanned=manifest)
    if how is None:
        raise _refusal(s, edits)
    if how == "accept-edits":
        return engine.record_state(
            s,
            "baseline",
            "baseline",
            bytes_kept,
            hand_edits=tuple(edits),
            extra={"adopted": "accept-edits", "edits": edits},
            scanned=manifest,
        )
    return _restore_pristine(s, bytes_kept, damage, edits, manifest)


def _restore_pristine(
    s: Session, bytes_kept: bool, damage: repair.Damage, edits: dict[str, str], manifest: Manifest
) -> LedgerEntry:
    """One transaction whose ledger entry is the baseline: the release's bytes back in every
    changed or missing file, added files removed (all backed up first), then the state recorded."""

    target, ledger = s.target, s.ledger
    found = repair.restore(target, damage, None, s.workspace.wheels, False)
    if found.left:
        raise _unrestorable(found.left)
    info = target.info
    wanted = {rel: found.files.get(rel) for rel in edits}  # added files: None, removed
    ops, contents = repair.file_ops(target, {rel: info.path_of(rel) for rel in wanted}, wanted)
    after = manifest.replace({op.key: op.new for op in ops})
    if bytes_kept:
        unchanged = {e.digest: info.path_of(k) for k, e in after.items() if k not in wanted}
        if target.agent.store_put_files(info.store, unchanged):
            raise Refused(
                "files changed while patchkeeper was recording them", "retry when the package is quiet"
            )
    state = State.make(ledger.save_manifest(after), (), "baseline", bytes_kept)
    extra = AdoptExtra(
        files=len(after),
        package_version=info.version,
        adopted="restore-pristine",
        edits=edits,
        wheel=found.wheel,
        source=found.source,
        replaced={op.key: repair.row(op.old) for op in ops},
    )
    entry = plans.new_entry(s, "baseline", ledger.current(), state, extra, ops, tuple(edits))
    entry = environment.record(entry, target)  # a baseline keeps the fingerprint like every other state
    transaction.carry_out(ledger, ops, contents, entry)
    return entry


def _unrestorable(left: dict[str, str]) -> Refused:
    return Refused(
        f"the release's bytes of {len(left)} file(s) cannot be restored: "
        + ", ".join(f"{k} ({why})" for k, why in left.items())
        + "; no baseline was recorded",
        "restore them by hand, or use --accept-edits",
    )


def describe(entry: LedgerEntry) -> str:
    """What the baseline's ledger entry says about adopting the host, for the line that reports it."""
    extra = cast(AdoptExtra, entry.extra)
    how = extra.get("adopted")
    if how == "accept-edits":
        return f"; {len(entry.hand_edits)} hand edit(s) accepted as they are (--accept-edits): " + ", ".join(
            entry.hand_edits
        )
    if how == "restore-pristine":  # a file the release lacks (an added one, a foreign pyc) is removed
        removed = [k for k in entry.hand_edits if entry.changed.get(k) == "removed"]
        restored = [k for k in entry.hand_edits if k not in removed]
        parts = (
            [
                f"{len(restored)} hand-edited file(s) restored to the release's bytes from {extra.get('wheel')} "
                "first (old bytes backed up): " + ", ".join(restored)
            ]
            if restored
            else []
        )
        if removed:
            parts.append(
                f"{len(removed)} file(s) the release does not have removed (backed up): " + ", ".join(removed)
            )
        return "".join("; " + p for p in parts)
    return ""


def preview(s: Session, how: str | None) -> Restored:
    """For a dry run before the first baseline: refuse as the real command would, or say what it
    would do; with --restore-pristine, the release's bytes the real run would put back (the dry
    run plans on them, as the real run does after restoring)."""
    damage, edits, _ = hand_edits(s)
    if edits and how is None:
        raise _refusal(s, edits)
    restored: dict[str, tuple[bytes, int] | None] = {}
    if edits and how == "restore-pristine":
        found = repair.restore(s.target, damage, None, s.workspace.wheels, False)
        if found.left:
            raise _unrestorable(found.left)
        restored = {rel: found.files.get(rel) for rel in edits}
    what = {
        "accept-edits": "accept them as they are",
        "restore-pristine": "restore the release's bytes first",
    }
    extra = (
        f"; {len(edits)} file(s) differ from its RECORD, it would {what[how or '']}: {', '.join(edits)}"
        if edits and how
        else ""
    )
    moved = s.installation() if s.ledger.current() is not None else None
    if moved is not None:
        print(
            f"{s.target.name}: {moved.what()}; a real run records a baseline of {s.target.info.version} first{extra}"
        )
    else:
        print(f"{s.target.name}: no baseline yet; a real run records one first{extra}")
    return restored


def adopted_edits(
    s: Session,
) -> tuple[LedgerEntry, list[tuple[str, Entry | None, bytes | None, Entry | None, bytes | None]]]:
    """The hand edits found when the target was adopted (its first baseline), each against the
    release: (key, the release's entry, its bytes, the edited file's entry, its bytes), None where
    absent. With --restore-pristine the baseline is the release and the edits are the backups it
    made; with --accept-edits the baseline holds the edits and the release's bytes come from its wheel."""

    ledger, target = s.ledger, s.target
    info, agent = target.info, target.agent
    first = next(
        (ledger.entries()[i] for i, slot in enumerate(ledger.entries().slots) if slot.kind == "baseline"),
        None,
    )
    extra = cast(AdoptExtra, first.extra) if first is not None else AdoptExtra(files=0, package_version="")
    edits = extra.get("edits") if isinstance(extra.get("edits"), dict) else None
    if first is None or extra.get("adopted") not in MODES or not edits:
        raise Refused(
            f"target {target.name} was adopted without hand edits: its first baseline found the package as "
            "its RECORD says",
            "`patchkeeper record NAME -t TARGET --from STATE` records edits made since",
        )
    baseline = ledger.load_manifest(first.after)
    found: list[tuple[str, Entry | None, bytes | None, Entry | None, bytes | None]] = []
    if extra["adopted"] == "restore-pristine":
        replaced = extra.get("replaced") or {}
        for key in sorted(k for k, kind in edits.items() if kind != BYTECODE):  # a pyc is no patch
            release, row = baseline.get(key), replaced.get(key)
            edited = Entry(row[0], row[1], row[2]) if row else None
            found.append((key, release, _stored(s, release), edited, _stored(s, edited)))
        return first, found
    kinds = {key: kind for key, kind in edits.items() if kind not in ("added", BYTECODE)}
    release_bytes: dict[str, tuple[bytes, int]] = {}
    if kinds:  # the release's bytes of the files the edits changed or removed, checked against RECORD
        text = agent.read(f"{info.site}/{info.dist_info}/RECORD").decode("utf-8")
        record = {
            rel: f"{algo}:{b64}" for rel, algo, b64, _ in record_text_rows(text.splitlines()) if rel in kinds
        }
        label = info.dist_info[: -len(".dist-info")].rpartition("-")[0] or info.package
        damage = repair.Damage(label, info.version, info.site, info.dist_info, kinds, record)
        restored = repair.restore(target, damage, None, s.workspace.wheels, False)
        if restored.left:
            raise Refused(
                f"the release's bytes of {', '.join(restored.left)} cannot be found in {restored.wheel}",
                "the patch set would not be the hand edits alone; record it by hand",
            )
        release_bytes = restored.files
    for key in sorted(k for k, kind in edits.items() if kind != BYTECODE):
        edited = baseline.get(key)
        data, mode = release_bytes.get(key, (None, None))
        release = Entry(target.hash_bytes(data), len(data), mode or 0o644) if data is not None else None
        found.append((key, release, data, edited, _stored(s, edited)))
    return first, found


def _stored(s: Session, entry: Entry | None) -> bytes | None:
    return None if entry is None else s.target.agent.store_get(s.target.info.store, entry.digest)
