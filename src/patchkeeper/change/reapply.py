"""Putting a recorded state's files back after pip, uv or a person changed the package: apply of a set
already applied, and the release a rollback's goal needs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..checks import installation
from ..errors import Refused, StoreError
from ..records.ledger import ApplyExtra, State
from ..records.manifest import differences
from .plans import Plan, Recorded, baseline, change_entry, refuse_escaping, scan_keys
from .session import Session
from .stacks import touched_keys
from .transaction import FileOp

if TYPE_CHECKING:
    from ..patchset.patchset import PatchSet


def plan_reapply(s: Session, recorded: Recorded, incoming: list[PatchSet], force: bool) -> Plan | None:
    """Patch sets already applied whose files no longer hold what the current state recorded (a
    reinstall put the release's bytes back, or a hand edit): a plan that puts the state's bytes back
    from the store, recording the installation as it is now; None when every file holds them. After
    a reinstall, every file the state changed from its baseline is put back, not only these sets'.
    Files that hold neither the state's bytes nor the baseline's (hand edits) are refused unless
    `force`, which backs them up first."""
    target, ledger, current = s.target, s.ledger, recorded.state
    moved = s.installation()
    keys = touched_keys(incoming)
    base = ledger.load_manifest(baseline(s))
    if moved is not None:
        keys += [k for k in differences(base, recorded.manifest()) if k not in keys]
    actual = scan_keys(target, keys)
    was = recorded.entries(keys)
    differ = [k for k in keys if actual.get(k) != was[k]]
    if not differ:
        return None
    hand = tuple(k for k in differ if actual.get(k) is not None and actual.get(k) != base.get(k))
    names = ", ".join(ps.ident for ps in incoming)
    why = moved.what() if moved is not None else "changed outside patchkeeper"
    if hand and not force:
        raise Refused(
            f"{names} is applied (state {current.id}), but {len(differ)} of its file(s) no longer hold "
            f"what the state recorded ({why}); {len(hand)} hold neither its bytes nor the release's "
            "(edited by hand?): " + ", ".join(hand),
            "inspect them; --force puts the state's bytes back and backs these up first",
        )
    ops = [FileOp(k, target.info.path_of(k), actual.get(k), was[k]) for k in differ]
    refuse_escaping(target, differ, "the patch sets write")
    wanted = sorted({op.new.digest for op in ops if op.new})
    missing = target.agent.store_missing(target.info.store, wanted)
    if missing:
        lost = [op.key for op in ops if op.new and op.new.digest in missing]
        raise StoreError(
            f"the store lacks the bytes state {current.id} recorded for {len(lost)} file(s): "
            + ", ".join(lost[:20]),
            f"`patchkeeper rollback --to baseline`, then apply {names} again",
        )
    extra = ApplyExtra(
        removed=[], restored=f"{len(differ)} file(s) no longer held what state {current.id} recorded: {why}"
    )
    refs = tuple(p for p in current.stack if any(p["name"] == ps.name for ps in incoming))
    entry = change_entry(s, "apply", current, current, extra, ops, hand, refs)
    note = (
        f"{names} is applied, but {len(differ)} file(s) no longer hold what state {current.id} recorded ({why}): "
        "putting them back"
    )
    return Plan(tuple(ops), {}, entry, hand, (note,))


def refuse_other_release(s: Session, goal: State) -> None:
    """A rollback gives files, not an installation: to a state recorded with another release of the
    package than the one installed, it is refused up front, naming the command that installs that
    release (after which the rollback can give the state's files). Over a RECORD cut since the
    current state, too; over a reinstall of the same release it goes on."""
    info = s.target.info
    moved = s.installation()
    if moved is not None and moved.kind == "record":
        installation.refuse_writes(moved, s.target, s.command)
    wanted = installation.state_version(s.ledger, goal)
    if wanted is None or wanted == info.version:
        return
    what = moved.what() + "; " if moved is not None and moved.kind == "version" else ""
    raise Refused(
        f"{what}state {goal.id} ({goal.name or goal.stack_text()}) was recorded with {info.package} {wanted}, "
        f"and {info.version} is installed: a rollback gives files, not an installation, so nothing was "
        "changed",
        f"{installation.pin(info.python, info.package, wanted)}, then `patchkeeper {s.command}`",
    )
