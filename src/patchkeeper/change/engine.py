"""Plan and carry out changes of code state: baseline, apply/switch, rollback, snapshots."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection, Iterable, Mapping, cast

from .. import faults
from ..checks import environment
from ..checks.scan import compare as compare  # scan.py: the audit loads it alone
from ..checks.scan import scan_all as scan_all
from ..errors import BadInput, PatchkeeperError, Refused, StoreError
from ..host.contract import ScanRequest
from ..host.disk import STAGE_PREFIX, is_managed_name
from ..records.ledger import (
    ApplyExtra,
    LedgerEntry,
    PatchSetRef,
    RecordExtra,
    RollbackExtra,
    State,
    new_id,
    who,
)
from ..records.manifest import ROLE_PREFIX, Entry, Manifest, differences
from ..targets import Target, TargetInfo
from ..workspace import TargetConfig, Workspace
from . import transaction
from .session import Session
from .transaction import FileOp

if TYPE_CHECKING:  # patch sets are read (and unidiff loaded) only by the verbs that use them: not by rollback
    from ..patchset import patching
    from ..patchset.patchset import PatchSet


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
    pairs, = compare(target, manifest_digest)
    return _kinds(pairs)


def _kinds(pairs: dict[str, tuple[Entry | None, Entry | None]]) -> dict[str, str]:
    return differences({k: old for k, (old, _) in pairs.items() if old}, {k: new for k, (_, new) in pairs.items() if new})


# ---- recorded states -------------------------------------------------------------------------
def record_state(s: Session, kind: str, name: str, bytes_kept: bool = True, hand_edits: tuple[str, ...] = (),
                 extra: dict[str, Any] | None = None, scanned: Manifest | None = None) -> LedgerEntry:
    """Record the target's files as they are now as a named state (kind: baseline | snapshot).
    `scanned`: the caller's scan of them a moment ago (the store checks every file's bytes against it)."""
    target, ledger = s.target, s.ledger
    manifest = scanned if scanned is not None else scan_all(target)
    if bytes_kept:
        files = {e.digest: target.info.path_of(k) for k, e in manifest.items()}
        bad = target.agent.store_put_files(target.info.store, files)
        if bad:
            raise Refused("files changed while patchkeeper was recording them", "retry when the package is quiet")
        faults.point(f"{kind}-stored")
    current = ledger.current()
    stack = current.stack if current and kind != "baseline" else ()  # a baseline (of a new release too): none
    state = State.make(ledger.save_manifest(manifest), stack, name, bytes_kept)
    entry = LedgerEntry(id=new_id(), seq=ledger.next_seq(), time=time.time(), who=who(), command=s.command,
                        kind=kind, after=state, before=current, hand_edits=hand_edits,
                        extra=cast(RecordExtra, {"files": len(manifest), "package_version": target.info.version,
                                                     **(extra or {})}))
    entry = environment.record(entry, target)
    ledger.append(entry)
    return entry


# ---- apply / switch --------------------------------------------------------------------------
def resolve(ws_patchsets: Path, name: str, bind_to: TargetConfig | None = None) -> list[PatchSet]:
    """The patch set and everything it requires, requirements first; with `bind_to`, their role
    files rendered with that target's vars (a missing value is refused here, before any change)."""
    from ..patchset import patchset

    out: dict[str, PatchSet] = {}

    def visit(n: str, trail: tuple[str, ...]) -> None:
        if n in trail:
            raise BadInput(f"patch set requirements form a cycle: {' -> '.join(trail + (n,))}")
        if n in out:
            return
        ps = patchset.load(ws_patchsets, n)
        for req in ps.requires:
            visit(req, trail + (n,))
        out[n] = ps.bind(bind_to.vars, bind_to.name) if bind_to is not None else ps

    visit(name, ())
    return list(out.values())


def _bound(sets: list[PatchSet], config: TargetConfig, trial: bool) -> tuple[list[PatchSet], list[Misfit]]:
    """The sets with role files rendered for the target; a template without a value raises BadInput,
    or in a trial is a misfit (kind "template") and that set keeps its templates."""
    out, unrendered = [], []
    for ps in sets:
        try:
            out.append(ps.bind(config.vars, config.name))
        except BadInput as exc:
            if not trial:
                raise
            out.append(ps)
            unrendered.append(Misfit("template", ps, exc.message))
    return out, unrendered


def _ref(ps: PatchSet) -> PatchSetRef:
    ref: PatchSetRef = {"name": ps.name, "version": ps.version, "digest": ps.digest, "group": ps.group}
    if ps.values:
        ref["vars"] = dict(ps.values)  # the values its role-file templates were rendered with
    return ref


@dataclass(frozen=True)
class StackChange:
    """What applying patch sets does to the applied stack."""

    removed: tuple[PatchSetRef, ...]  # refs replaced: the same names, or the same groups (a switch)
    kept: tuple[PatchSetRef, ...]  # refs that stay, in order
    adding: tuple[PatchSet, ...]  # applied after the kept ones, requirements first


def stack_change(ws_patchsets: Path, stack: Iterable[PatchSetRef], incoming: list[PatchSet]) -> StackChange | None:
    """The change applying `incoming` (requirements first, the named one last) makes to `stack`;
    None when that very version and content is already applied."""
    top = incoming[-1]
    if any(p["name"] == top.name and p["version"] == top.version and p["digest"] == top.digest
           and (top.values is None or p.get("vars", {}) == dict(top.values)) for p in stack):
        return None
    names = {ps.name for ps in incoming}
    groups = {ps.group for ps in incoming if ps.group}
    removed = tuple(p for p in stack if p["name"] in names or (groups and group_of(ws_patchsets, p) in groups))
    kept = tuple(p for p in stack if p not in removed)
    adding = tuple(ps for ps in incoming if not any(k["name"] == ps.name for k in kept) or ps is top)
    return StackChange(removed, kept, adding)


def group_of(ws_patchsets: Path, ref: PatchSetRef) -> str | None:
    """An applied patch set's group, from its ledger ref (or, for older refs, its directory)."""
    from ..patchset import patchset

    if "group" in ref:
        return ref["group"]
    try:
        return patchset.load(ws_patchsets, ref["name"]).group
    except BadInput:
        return None  # removed from the workspace: it cannot be in the group being applied


@dataclass(frozen=True)
class Misfit:
    """Why a patch set does not fit a package: another package, a version outside its range, a role
    the target lacks (`have` is the package, the version or the role)."""

    kind: str  # package | version | role | template (`have`: which variable lacks a value, where)
    patchset: PatchSet
    have: str


def misfits(sets: list[PatchSet], package: str, version: str, roles: Collection[str] | None) -> list[Misfit]:
    """Every misfit of `sets` for `package` `version` (names compared canonically); roles unchecked if None."""
    from ..host.disk import (
        normalize_name as canonicalize_name,  # packaging's rule, without importing packaging
    )
    from ..patchset import patchset

    out = []
    for ps in sets:
        if canonicalize_name(ps.package) != canonicalize_name(package):
            out.append(Misfit("package", ps, package))
        elif ps.package_version and not patchset.fits(ps.package_version, version):
            out.append(Misfit("version", ps, version))
        for role, _ in ps.files:
            if roles is not None and role not in roles:
                out.append(Misfit("role", ps, role))
    return out


def check_fits(target: Target, sets: list[PatchSet], force: bool) -> list[str]:
    from ..patchset import patchset

    info, notes = target.info, []
    for m in misfits(sets, target.config.package, info.version, dict(info.roles)):
        ps = m.patchset
        if m.kind == "package":
            raise BadInput(f"patch set {ps.ident} is for package {ps.package!r}, "
                           f"target {target.name} manages {target.config.package!r}")
        if m.kind == "version":
            msg = f"patch set {ps.ident} needs {ps.package}{ps.package_version}, target {target.name} has {info.version}"
            if not force:
                raise Refused(msg, "use --force to apply it anyway")
            notes.append(f"warning: {msg} (--force)")
        if m.kind == "role":
            hint = (f"add unit = \"/etc/systemd/system/NAME.service\" (the host's unit; the drop-in goes beside it) "
                    f"or dropin = \"...\" to [targets.{target.name}.files]" if m.have == "dropin" else
                    f"add {m.have} = \"...\" to [targets.{target.name}.files]")
            raise BadInput(f"patch set {ps.ident} sets the {m.have!r} file, but target {target.name} "
                           f"has no such role", hint)
    for ps in sets:
        _refuse_unmanaged(info, ps)
    unsafe = patchset.unsafe_modes(sets)
    if unsafe:
        msg = "patch sets make file(s) setuid, setgid or world-writable: " + ", ".join(unsafe)
        if not force:
            raise Refused(msg, "fix the modes in the patches; --force applies them anyway")
        notes.append(f"warning: {msg} (--force)")
    return notes


def _refuse_unmanaged(info: TargetInfo, ps: PatchSet) -> None:
    """Refuse a patch set that writes where no scan looks (so no rollback would undo it): outside the
    package's own files and top-level directories, bytecode, or patchkeeper's stage names."""
    tops, loose = set(info.top_dirs()), set(info.loose_paths())
    bad = []
    for path in ps.paths:
        if not is_managed_name(path):
            why = "a stage file name of patchkeeper" if STAGE_PREFIX in path else "bytecode, derived from sources"
        elif path.split("/", 1)[0] not in tops and path not in loose:
            why = f"not a file of package {info.package}"
        else:
            continue
        bad.append(f"{path} ({why})")
    if bad:
        raise Refused(f"patch set {ps.ident} writes {len(bad)} path(s) patchkeeper does not manage, so no rollback "
                      "would undo them: " + ", ".join(bad[:10]) + (" …" if len(bad) > 10 else ""),
                      f"limit the patch set to the files of {info.package} ({', '.join(sorted(tops))}"
                      f"{', ' + ', '.join(sorted(loose)[:5]) if loose else ''}), without bytecode")


def _check_history(s: Session, sets: list[PatchSet]) -> None:
    applied = {ref for slot in s.ledger.entries().slots for ref in slot.refs}  # (name, version, digest)
    for ps in sets:
        for name, version, digest in applied:
            if name == ps.name and version == ps.version and digest != ps.digest:
                raise Refused(f"patch set {ps.ident} changed since it was applied here "
                              f"({str(digest)[:19]}… then, {ps.digest[:19]}… now) without a version bump",
                              f"raise version in patchsets/{ps.name}/patchset.toml")


def plan_apply(s: Session, name: str, force: bool, trial: bool = False,
               incoming: list[PatchSet] | None = None) -> Plan | None:
    """Plan applying `name` (and what it requires: `incoming`, if already resolved) on the current
    stack; None if already applied.

    A `trial` (what `check` shows) refuses nothing: misfits, hand edits and hunks that do not
    apply are kept in the plan (misfits, drift, checks) instead, and the files they concern left out."""
    from ..patchset import patchset

    ws, target, ledger = s.workspace, s.target, s.ledger
    incoming, unrendered = _bound(incoming or resolve(ws.patchsets_dir, name), s.config, trial)
    found = misfits(incoming, target.config.package, target.info.version, dict(target.info.roles)) if trial else []
    found += unrendered
    notes = [] if trial else check_fits(target, incoming, force)
    if not trial:
        _check_history(s, incoming)
    recorded = Recorded(s)
    current = recorded.state
    change = stack_change(ws.patchsets_dir, current.stack, incoming)
    if change is None:  # already applied: as recorded, or its files are gone (a reinstall, a hand edit)
        if trial:
            return None
        from .reapply import plan_reapply

        return plan_reapply(s, recorded, incoming, force)
    removed, kept, adding = list(change.removed), list(change.kept), list(change.adding)
    new_stack = kept + [_ref(ps) for ps in adding]

    if removed:  # a switch: rebuild every file any of the old or new patch sets touches from baseline
        kept_sets = [patchset.load(ws.patchsets_dir, p["name"]).bind(s.config.vars, s.config.name) for p in kept]
        for old_ref, ps in zip(kept, kept_sets):
            if ps.digest != old_ref["digest"]:
                raise Refused(f"applied patch set {old_ref['name']}@{old_ref['version']} changed in the workspace",
                              "restore it, or roll back to baseline first")
        old_sets = [_load_applied(ws, p) for p in removed]
        build = kept_sets + adding
        keys = touched_keys(build + old_sets)
        base_manifest = ledger.load_manifest(_baseline(s))
    else:
        build = adding
        keys = touched_keys(build)
        base_manifest = None
    actual = scan_keys(target, keys)
    present = {fp.path for ps in build for _, fps in ps.patches for fp in fps if fp.kind != "add"}
    _refuse_non_regular(target, [k for k in keys if k not in actual and k in present])  # else "does not exist"
    was = recorded.entries(keys)
    drift = tuple(k for k in keys if actual.get(k) != was[k])
    if drift and not force and not trial:
        moved = s.installation()
        raise Refused(f"{len(drift)} file(s) differ from the recorded state {current.id} "
                      + (f"({moved.what()})" if moved else "(edited by hand?)") + ": " + ", ".join(drift),
                      "inspect them; --force applies anyway and backs them up first")

    if base_manifest is not None:
        files = {k: _baseline_bytes(target, base_manifest, actual, k) for k in keys}
        modes = {k: base_manifest[k].mode for k in keys if k in base_manifest}
    else:
        files = {k: (target.agent.read(target.info.path_of(k)) if k in actual else None) for k in keys}
        modes = {k: actual[k].mode for k in actual}
    _refuse_escaping(target, [k for k in keys if not k.startswith(ROLE_PREFIX)], "the patch sets write")
    checks = build_files(build, files, modes, dict(target.info.roles), adding if trial else None)
    planned, contents = _planned(target, files, modes)
    ops = [FileOp(k, target.info.path_of(k), actual.get(k), new) for k, new in planned.items() if actual.get(k) != new]
    kind = "switch" if removed else "apply"
    # every touched key as planned, also where the file already holds it (a hand edit equal to the result)
    manifest_text = recorded.changed(planned)
    manifest_digest = target.hash_bytes(manifest_text)
    contents[manifest_digest] = manifest_text
    after = State.make(manifest_digest, new_stack)
    if removed:
        notes.append("switching: " + ", ".join(f"{p['name']}@{p['version']}" for p in removed)
                     + " -> " + ", ".join(ps.ident for ps in adding))
    extra = ApplyExtra(removed=removed)
    backups = _backups(ops, drift)
    if backups:
        extra["backups"] = backups
    entry = LedgerEntry(id=new_id(), seq=ledger.next_seq(), time=time.time(), who=who(), command=s.command,
                        kind=kind, before=current, after=after, patchsets=tuple(_ref(ps) for ps in adding),
                        changed=differences({op.key: op.old for op in ops if op.old},
                                            {op.key: op.new for op in ops if op.new}),
                        hand_edits=drift, extra=extra)
    return Plan(tuple(ops), contents, entry, drift, tuple(notes), checks, tuple(found))


@dataclass(frozen=True)
class FileCheck:
    """How one file patch of a patch set fares in a trial: every hunk's offset, or why it fails."""

    patchset: str
    origin: str
    path: str
    hunks: tuple[patching.HunkCheck, ...]

    @property
    def ok(self) -> bool:
        return all(h.offset is not None for h in self.hunks)


def build_files(sets: list[PatchSet], files: dict[str, bytes | None], modes: dict[str, int],
                roles: Collection[str], trial_of: Collection[PatchSet] | None = None) -> tuple[FileCheck, ...]:
    """Apply `sets` in order to `files` (and their `modes`), in place, with their files for `roles`.

    With `trial_of`, each file patch is checked first: a failing one is reported (for the sets in
    `trial_of`) and skipped, instead of raising."""
    from ..patchset import patching

    checks = []
    for ps in sets:
        for origin, fps in ps.patches:
            for fp in fps:
                if trial_of is not None:
                    hunks = patching.check(fp, files[fp.path])
                    if ps in trial_of:
                        checks.append(FileCheck(ps.ident, origin, fp.path, hunks))
                    if any(h.offset is None for h in hunks):
                        continue
                files[fp.path] = patching.apply(fp, files[fp.path], f"{ps.name}/{origin}").data
                if fp.new_mode is not None:
                    modes[fp.path] = fp.new_mode
                elif fp.kind == "add":
                    modes[fp.path] = 0o644
        for role, data in ps.files:
            if role in roles:
                files[ROLE_PREFIX + role] = data
                modes.setdefault(ROLE_PREFIX + role, 0o644)
    return tuple(checks)


def _backups(ops: list[FileOp], hand: tuple[str, ...]) -> dict[str, str]:
    """key -> digest of the hand-edited files the change overwrites (their bytes are put in the store
    before anything changes, and `patchkeeper show-backup DIGEST` gives them back)."""
    return {op.key: op.old.digest for op in ops if op.key in hand and op.old is not None}


class Recorded:
    """The last recorded state's manifest as a plan reads it (before any baseline: the files as
    they are), loaded when first asked for."""

    def __init__(self, s: Session) -> None:
        self._ledger = s.ledger
        self._manifest: Manifest | None = None
        current = s.ledger.current()
        moved = s.installation() if current is not None else None
        if current is None or (moved is not None and moved.kind == "version"):  # (a dry run: no baseline yet)
            self._manifest = scan_all(s.target)
            current = State.make(s.target.hash_bytes(self._manifest.to_text()), (), "baseline")
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
        """The text of the manifest with `planned`'s entries (None: the file is removed)."""
        return self.manifest().replace(planned).to_text()


def _baseline(s: Session) -> State:
    baseline = s.ledger.baseline()
    if baseline is None:  # every recorded state descends from a baseline
        raise StoreError(f"target {s.target.name} has recorded states but no baseline",
                         "its ledger is damaged; see `patchkeeper log`")
    return baseline


def _load_applied(ws: Workspace, ref: PatchSetRef) -> PatchSet:
    from ..patchset import patchset

    ps = patchset.load(ws.patchsets_dir, ref["name"])
    if ps.digest != ref["digest"]:
        raise Refused(f"applied patch set {ref['name']}@{ref['version']} is no longer in the workspace as applied "
                      "(its files changed)", "roll back to baseline instead, which needs no patch set")
    return ps


def owners_of(ws: Workspace, stack: Iterable[PatchSetRef]) -> dict[str, str]:
    """key -> the patch set(s) of `stack` that touch it, by their paths and role files."""
    from ..patchset import patchset

    owners: dict[str, list[str]] = {}
    for ref in stack:
        ident = f"{ref['name']}@{ref['version']}"
        try:
            ps = patchset.load(ws.patchsets_dir, ref["name"])
        except BadInput:
            continue  # no longer in this workspace: its files cannot be named
        for key in [*ps.paths, *(ROLE_PREFIX + role for role, _ in ps.files)]:
            owners.setdefault(key, []).append(ident)
    return {k: ", ".join(v) for k, v in owners.items()}


def touched_keys(sets: list[PatchSet]) -> list[str]:
    keys: dict[str, None] = {}
    for ps in sets:
        keys.update(dict.fromkeys(ps.paths))
        keys.update(dict.fromkeys(ROLE_PREFIX + r for r, _ in ps.files))
    return list(keys)


def _baseline_bytes(target: Target, base: Manifest, actual: dict[str, Entry], key: str) -> bytes | None:
    entry = base.get(key)
    if entry is None:
        return None
    if actual.get(key) is not None and actual[key].digest == entry.digest:
        return target.agent.read(target.info.path_of(key))
    try:
        return target.agent.store_get(target.info.store, entry.digest)
    except (PatchkeeperError, OSError) as exc:  # AgentError (missing, corrupt), TargetError (remote)
        raise StoreError(f"baseline bytes of {key} are not available: {exc}",
                         "the baseline was recorded --manifest-only; restore the file first") from None


def _refuse_non_regular(target: Target, absent: list[str]) -> None:
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
            odd.append(f"{key} ({'a symlink' if st.is_link else 'a directory' if st.is_dir else 'not a regular file'})")
    if odd:
        raise BadInput(f"{len(odd)} path(s) the patch sets change are not regular files, so nothing was changed: "
                       + ", ".join(odd),
                       "patchkeeper manages regular files only; replace them with the files themselves")


def _refuse_escaping(target: Target, rels: list[str], what: str) -> None:
    """Refuse paths that leave site-packages through a symlinked directory: nothing is written there."""
    outside = target.agent.escaping(target.info.site, rels)
    if outside:
        listed = ", ".join(f"{rel} -> {where}" for rel, where in list(outside.items())[:5])
        raise BadInput(f"{len(outside)} path(s) {what} lead outside site-packages (through a symlink): {listed}",
                       "remove the symlink (or restore the directory it replaced), then retry")


def _planned(target: Target, files: dict[str, bytes | None],
             modes: dict[str, int]) -> tuple[dict[str, Entry | None], dict[str, bytes]]:
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


# ---- rollback --------------------------------------------------------------------------------
def plan_rollback(s: Session, spec: str) -> Plan | None:
    target, ledger = s.target, s.ledger
    current = ledger.current()
    if current is None:
        raise Refused(f"target {target.name} has no recorded state to roll back to",
                      "patchkeeper has not changed it yet")
    from . import repair

    goal, upto, undo = repair.rollback_goal(ledger, spec)
    from .reapply import refuse_other_release

    refuse_other_release(s, goal)
    to_goal, to_recorded = compare(target, goal.manifest, current.manifest)
    hand = _kinds(to_recorded)  # changed by hand since the last transaction: backed up, then named
    notes = _keep_host_unit(target, to_goal, to_recorded, hand)
    ops = [FileOp(k, target.info.path_of(k), actual, want) for k, (want, actual) in to_goal.items()]
    clean = None if undo else repair.recorded_clean(target, ledger, goal)  # the state's own release bytes stay
    env_ops = repair.environment_ops(target, ledger, upto, clean)  # files repairs changed outside the package
    _refuse_escaping(target, [op.key for op in ops if not op.key.startswith(ROLE_PREFIX)], "the rollback writes")
    ops += env_ops
    missing = target.agent.store_missing(target.info.store, sorted({op.new.digest for op in ops if op.new}))
    if missing:
        names = [op.key for op in ops if op.new and op.new.digest in missing]
        if goal.bytes_kept:  # its bytes were stored: the store lost them
            damage = target.agent.store_damage(target.info.store)
            raise StoreError(f"the store lacks the bytes of {len(names)} file(s) state {goal.id} "
                             f"({goal.name or 'unnamed'}) kept"
                             + (f" ({'; '.join(damage)})" if damage else "") + ": " + ", ".join(names[:20]),
                             f"the store {target.info.store} is damaged: restore it from a backup, "
                             "or restore those files by other means (e.g. reinstall the package)")
        raise StoreError(f"state {goal.id} ({goal.name or 'unnamed'}) was recorded without bytes; "
                         f"{len(names)} file(s) cannot be restored: " + ", ".join(names[:20]),
                         "restore those files by other means (e.g. reinstall the package)")
    if not ops and goal.id == current.id:
        return None
    extra = RollbackExtra()
    backups = _backups(ops, tuple(hand))
    if backups:
        extra["backups"] = backups
    if env_ops:
        extra["env"] = repair.env_extra(env_ops)
    entry = LedgerEntry(id=new_id(), seq=ledger.next_seq(), time=time.time(), who=who(), command=s.command,
                        kind="rollback", before=current, after=goal,
                        changed=differences({op.key: op.old for op in ops if op.old},
                                            {op.key: op.new for op in ops if op.new}),
                        hand_edits=tuple(hand), extra=extra)
    return Plan(tuple(ops), {}, entry, tuple(hand), tuple(notes))


def _keep_host_unit(target: Target, to_goal: dict[str, Any], to_recorded: dict[str, Any],
                    hand: dict[str, str]) -> list[str]:
    """The host's unit (role `unit`) is written back only to undo what a transaction did to it (a patch
    set of the old style that wrote the whole unit): a hand edit alone is the host's, and stays."""
    key = ROLE_PREFIX + "unit"
    if key not in to_goal or key not in to_recorded or to_recorded[key][0] != to_goal[key][0]:
        return []
    del to_goal[key]
    hand.pop(key, None)
    return [f"note: the host's unit {target.info.path_of(key)} differs from the recorded state (edited on the host); "
            "left as it is: patchkeeper writes it only to undo its own changes (`patchkeeper snapshot` records it)"]


def execute(s: Session, plan: Plan) -> None:
    """Carry out a plan; its ledger entry keeps the environment fingerprint it was made in (in the
    entry before the commit point: environment.recording)."""
    record = environment.recording(s.target, [op.path for op in plan.ops])
    transaction.carry_out(s.ledger, list(plan.ops), plan.contents, plan.entry, record)
