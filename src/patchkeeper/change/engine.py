"""Plan and carry out changes of code state: baseline, apply/switch, rollback, snapshots (the patch
sets a change applies: stacks.py; what every plan shares: plans.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from .. import faults
from ..checks import environment
from ..checks.scan import compare, scan_all
from ..errors import Refused, StoreError
from ..records.ledger import (
    ApplyExtra,
    LedgerEntry,
    RecordExtra,
    RollbackExtra,
    State,
)
from ..records.manifest import ROLE_PREFIX, Manifest
from ..targets import Target
from . import plans, repair, stacks, transaction
from .plans import Plan, Recorded
from .reapply import plan_reapply, refuse_other_release
from .session import Session
from .transaction import FileOp

if TYPE_CHECKING:  # patch sets are read only by the verbs that use them: not by rollback
    from ..patchset.patchset import PatchSet


def record_state(
    s: Session,
    kind: str,
    name: str,
    bytes_kept: bool = True,
    hand_edits: tuple[str, ...] = (),
    extra: dict[str, Any] | None = None,
    scanned: Manifest | None = None,
) -> LedgerEntry:
    """Record the target's files as they are now as a named state (kind: baseline | snapshot).
    `scanned`: the caller's scan of them a moment ago (the store checks every file's bytes against it)."""
    target, ledger = s.target, s.ledger
    manifest = scanned if scanned is not None else scan_all(target)
    if bytes_kept:
        files = {e.digest: target.info.path_of(k) for k, e in manifest.items()}
        bad = target.agent.store_put_files(target.info.store, files)
        if bad:
            raise Refused(
                "files changed while patchkeeper was recording them", "retry when the package is quiet"
            )
        faults.point(f"{kind}-stored")
    current = ledger.current()
    stack = current.stack if current and kind != "baseline" else ()  # a baseline (of a new release too): none
    state = State.make(ledger.save_manifest(manifest), stack, name, bytes_kept)
    recorded = cast(
        RecordExtra, {"files": len(manifest), "package_version": target.info.version, **(extra or {})}
    )
    entry = plans.new_entry(s, kind, current, state, recorded, hand_edits=hand_edits)
    entry = environment.record(entry, target)
    ledger.append(entry)
    return entry


def plan_apply(
    s: Session,
    name: str,
    force: bool,
    trial: bool = False,
    incoming: list[PatchSet] | None = None,
    restored: plans.Restored | None = None,
) -> Plan | None:
    """Plan applying `name` (and what it requires: `incoming`, if already resolved) on the current
    stack; None if already applied. `restored`: a dry run's first baseline with --restore-pristine
    (adopt.preview), the release's bytes the real run puts back first, planned on instead of the files'.

    A `trial` (what `check` shows) refuses nothing: misfits, hand edits and hunks that do not
    apply are kept in the plan (misfits, drift, checks) instead, and the files they concern left out."""

    target, ledger = s.target, s.ledger
    incoming, unrendered = stacks.bind_all(incoming or stacks.resolve(s.patchsets, name), s.config, trial)
    found = (
        stacks.misfits(incoming, target.config.package, target.info.version, dict(target.info.roles))
        if trial
        else []
    )
    found += unrendered
    if trial:  # what apply refuses outright, check refuses alike (a misfit is one of its problems)
        info = target.info
        stacks.refuse_unwritable(info.package, info.top_dirs(), info.loose_paths(), incoming, force=False)
    notes = [] if trial else stacks.check_fits(target, incoming, force)
    if not trial:
        stacks.check_history(s, incoming)
    restored = restored or {}
    recorded = Recorded(s, restored)
    current = recorded.state
    change = stacks.stack_change(s.patchsets, current.stack, incoming)
    if change is None:  # already applied: as recorded, or its files are gone (a reinstall, a hand edit)
        if trial:
            return None
        return plan_reapply(s, recorded, incoming, force)
    removed, kept, adding = list(change.removed), list(change.kept), list(change.adding)
    if not trial:
        stacks.refuse_shared_role_files(s.patchsets, s.config, kept, adding)
    new_stack = kept + [stacks.ref_of(ps) for ps in adding]

    if removed:  # a switch: rebuild every file any of the old or new patch sets touches from baseline
        kept_sets = [s.patchsets.load(p["name"]).bind(s.config) for p in kept]
        for old_ref, ps in zip(kept, kept_sets):
            if ps.digest != old_ref["digest"]:
                raise Refused(
                    f"applied patch set {old_ref['name']}@{old_ref['version']} changed in the workspace",
                    "restore it, or roll back to baseline first",
                )
        old_sets = [stacks.load_applied(s.patchsets, p) for p in removed]
        build = kept_sets + adding
        keys = stacks.touched_keys(build + old_sets)
        base_manifest = ledger.load_manifest(plans.baseline(s))
    else:
        build = adding
        keys = stacks.touched_keys(build)
        base_manifest = None
    actual = plans.scan_keys(target, keys)
    for k, e in plans.restored_entries(target, {k: v for k, v in restored.items() if k in keys}).items():
        if e is None:
            actual.pop(k, None)
        else:
            actual[k] = e
    present = {fp.path for ps in build for _, fps in ps.patches for fp in fps if fp.kind != "add"}
    plans.refuse_non_regular(
        target, [k for k in keys if k not in actual and k in present]
    )  # else "does not exist"
    was = recorded.entries(keys)
    drift = tuple(k for k in keys if actual.get(k) != was[k])
    if drift and not force and not trial:
        moved = s.installation()
        raise Refused(
            f"{len(drift)} file(s) differ from the recorded state {current.id} "
            + (f"({moved.what()})" if moved else "(edited by hand?)")
            + ": "
            + ", ".join(drift),
            "inspect them; --force applies anyway and backs them up first",
        )

    if base_manifest is not None:
        files = {k: plans.baseline_bytes(target, base_manifest, actual, k) for k in keys}
        modes = {k: base_manifest[k].mode for k in keys if k in base_manifest}
    else:
        files = {
            k: (
                restored[k][0]  # type: ignore[index]
                if restored.get(k)
                else target.agent.read(target.info.path_of(k))
                if k in actual
                else None
            )
            for k in keys
        }
        modes = {k: actual[k].mode for k in actual}
    plans.refuse_escaping(target, keys, "the patch sets write")
    checks = stacks.build_files(build, files, modes, dict(target.info.roles), adding if trial else None)
    planned, contents = plans.planned_entries(target, files, modes)
    ops = [
        FileOp(k, target.info.path_of(k), actual.get(k), new)
        for k, new in planned.items()
        if actual.get(k) != new
    ]
    kind = "switch" if removed else "apply"
    # every touched key as planned, also where the file already holds it (a hand edit equal to the result)
    manifest_text = recorded.changed(planned)
    manifest_digest = target.hash_bytes(manifest_text)
    contents[manifest_digest] = manifest_text
    after = State.make(manifest_digest, new_stack)
    gone, coming = [f"{p['name']}@{p['version']}" for p in removed], [ps.ident for ps in adding]
    if removed and sorted(gone) == sorted(coming):  # the same versions, rendered with other values
        notes.append(f"re-rendering {', '.join(coming)} with the target's current values")
    elif removed:
        notes.append(f"switching: {', '.join(gone)} -> {', '.join(coming)}")
    refs = tuple(stacks.ref_of(ps) for ps in adding)
    entry = plans.change_entry(s, kind, current, after, ApplyExtra(removed=removed), ops, drift, refs)
    return Plan(tuple(ops), contents, entry, drift, tuple(notes), checks, tuple(found))


def plan_rollback(s: Session, spec: str) -> Plan | None:
    target, ledger = s.target, s.ledger
    current = ledger.current()
    if current is None:
        raise Refused(
            f"target {target.name} has no recorded state to roll back to",
            "patchkeeper has not changed it yet",
        )

    goal, upto, undo = repair.rollback_goal(ledger, spec)
    refuse_other_release(s, goal)
    to_goal, to_recorded = compare(target, goal.manifest, current.manifest)
    hand = plans.kinds(to_recorded)  # changed by hand since the last transaction: backed up, then named
    notes = _keep_host_unit(target, to_goal, to_recorded, hand)
    ops = [FileOp(k, target.info.path_of(k), actual, want) for k, (want, actual) in to_goal.items()]
    clean = (
        None if undo else repair.recorded_clean(target, ledger, goal)
    )  # the state's own release bytes stay
    env_ops = repair.environment_ops(target, ledger, upto, clean)  # files repairs changed outside the package
    plans.refuse_escaping(target, [op.key for op in ops], "the rollback writes")
    ops += env_ops
    missing = target.agent.store_missing(target.info.store, sorted({op.new.digest for op in ops if op.new}))
    if missing:
        names = [op.key for op in ops if op.new and op.new.digest in missing]
        if goal.bytes_kept:  # its bytes were stored: the store lost them
            damage = target.agent.store_damage(target.info.store)
            raise StoreError(
                f"the store lacks the bytes of {len(names)} file(s) state {goal.id} "
                f"({goal.name or 'unnamed'}) kept"
                + (f" ({'; '.join(damage)})" if damage else "")
                + ": "
                + ", ".join(names[:20]),
                f"the store {target.info.store} is damaged: restore it from a backup, "
                "or restore those files by other means (e.g. reinstall the package)",
            )
        raise StoreError(
            f"state {goal.id} ({goal.name or 'unnamed'}) was recorded without bytes; "
            f"{len(names)} file(s) cannot be restored: " + ", ".join(names[:20]),
            "restore those files by other means (e.g. reinstall the package)",
        )
    if not ops and goal.id == current.id:
        return None
    extra = RollbackExtra()
    if env_ops:
        extra["env"] = repair.env_extra(env_ops)
    entry = plans.change_entry(s, "rollback", current, goal, extra, ops, tuple(hand))
    return Plan(tuple(ops), {}, entry, tuple(hand), tuple(notes))


def _keep_host_unit(
    target: Target, to_goal: dict[str, Any], to_recorded: dict[str, Any], hand: dict[str, str]
) -> list[str]:
    """The host's unit (role `unit`) is written back only to undo what a transaction did to it (a patch
    set of the old style that wrote the whole unit): a hand edit alone is the host's, and stays."""
    key = ROLE_PREFIX + "unit"
    if key not in to_goal or key not in to_recorded or to_recorded[key][0] != to_goal[key][0]:
        return []
    del to_goal[key]
    hand.pop(key, None)
    return [
        f"note: the host's unit {target.info.path_of(key)} differs from the recorded state (edited on the host); "
        "left as it is: patchkeeper writes it only to undo its own changes (`patchkeeper snapshot` records it)"
    ]


def execute(s: Session, plan: Plan) -> None:
    """Carry out a plan; its ledger entry keeps the environment fingerprint it was made in (in the
    entry before the commit point: environment.recording)."""
    record = environment.recording(s.target, [op.path for op in plan.ops])
    transaction.carry_out(s.ledger, list(plan.ops), plan.contents, plan.entry, record)
