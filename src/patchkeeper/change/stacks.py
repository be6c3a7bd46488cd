"""The patch sets of a change: resolved with what they require, fitted to the target, what they do to
the applied stack, and the files they build from the files they start from."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BadInput, Refused
from ..host.disk import STAGE_PREFIX, is_install_record, is_managed_name, normalize_name as canonicalize_name
from ..patchset import applyset, patching, patchset
from ..patchset.patchset import Library
from ..records.ledger import PatchSetRef
from ..records.manifest import ROLE_PREFIX
from ..targets import Target
from ..workspace import TargetConfig, Workspace
from .session import Session

if TYPE_CHECKING:
    from ..patchset import patching
    from ..patchset.patchset import PatchSet


def resolve(sets: Library | Path, name: str, bind_to: TargetConfig | None = None) -> list[PatchSet]:
    """The patch set and everything it requires, requirements first; with `bind_to`, their role
    files rendered with that target's vars (a missing value is refused here, before any change)."""

    out: dict[str, PatchSet] = {}
    library = _library(sets)

    def visit(n: str, trail: tuple[str, ...]) -> None:
        if n in trail:
            raise BadInput(f"patch set requirements form a cycle: {' -> '.join(trail + (n,))}")
        if n in out:
            return
        ps = library.load(n)
        for req in ps.requires:
            visit(req, trail + (n,))
        out[n] = ps.bind(bind_to) if bind_to is not None else ps

    visit(name, ())
    return list(out.values())


def bind_all(sets: list[PatchSet], config: TargetConfig, trial: bool) -> tuple[list[PatchSet], list[Misfit]]:
    """The sets with role files rendered for the target; a template without a value raises BadInput,
    or in a trial is a misfit (kind "template") and that set keeps its templates."""
    out, unrendered = [], []
    for ps in sets:
        try:
            out.append(ps.bind(config))
        except BadInput as exc:
            if not trial:
                raise
            out.append(ps)
            unrendered.append(Misfit("template", ps, exc.message))
    return out, unrendered


def ref_of(ps: PatchSet) -> PatchSetRef:
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


def stack_change(
    sets: Library | Path, stack: Iterable[PatchSetRef], incoming: list[PatchSet]
) -> StackChange | None:
    """The change applying `incoming` (requirements first, the named one last) makes to `stack`;
    None when that very version and content is already applied."""
    top = incoming[-1]
    if any(
        p["name"] == top.name
        and p["version"] == top.version
        and p["digest"] == top.digest
        and (top.values is None or p.get("vars", {}) == dict(top.values))
        for p in stack
    ):
        return None
    names = {ps.name for ps in incoming}
    groups = {ps.group for ps in incoming if ps.group}
    removed = tuple(p for p in stack if p["name"] in names or (groups and group_of(sets, p) in groups))
    kept = tuple(p for p in stack if p not in removed)
    adding = tuple(ps for ps in incoming if not any(k["name"] == ps.name for k in kept) or ps is top)
    return StackChange(removed, kept, adding)


def refuse_shared_role_files(
    library: Library | Path, config: TargetConfig, kept: Iterable[PatchSetRef], adding: Iterable[PatchSet]
) -> None:
    """One role file, one owner: refuse (before anything changes) a stack in which two patch sets write
    the same file on the target (two drop-ins at the default path): the second would replace the first's
    file while the recorded state named both."""
    sets: list[tuple[PatchSet, str]] = []
    for ref in kept:
        try:
            sets.append((_library(library).load(ref["name"]), "applied"))
        except BadInput:
            continue  # gone from the workspace: its role files cannot be named (the scan still guards them)
    sets += [(ps, "being applied") for ps in adding]
    owners: dict[str, tuple[PatchSet, str, str]] = {}
    for ps, how in sets:
        for role, _ in ps.files:
            path = config.files.get(role)
            if path is None:
                continue
            first = owners.setdefault(path, (ps, how, role))
            if first[0].name == ps.name:
                continue
            other, other_how, other_role = first
            directory = path.rpartition("/")[0]
            raise Refused(
                f"patch sets {other.ident} ({other_how}, group {other.group or '-'}, role {other_role}) and {ps.ident} "
                f"({how}, group {ps.group or '-'}, role {role}) both write {path}: one file holds only one of them, "
                "so the state would name a patch set whose drop-in is gone; nothing was changed",
                f"give {ps.name} a drop-in of its own: in patchsets/{ps.name}/patchset.toml name its role "
                f"{ps.name}_dropin under [files], and map it in [targets.{config.name}.files] to "
                f'{ps.name}_dropin = "{directory}/60-{ps.name}.conf"',
            )


def group_of(sets: Library | Path, ref: PatchSetRef) -> str | None:
    """An applied patch set's group, from its ledger ref (or, for older refs, its directory)."""

    if "group" in ref:
        return ref["group"]
    try:
        return _library(sets).load(ref["name"]).group
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
    info, notes = target.info, []
    for m in misfits(sets, target.config.package, info.version, dict(info.roles)):
        ps = m.patchset
        if m.kind == "package":
            raise BadInput(
                f"patch set {ps.ident} is for package {ps.package!r}, "
                f"target {target.name} manages {target.config.package!r}"
            )
        if m.kind == "version":
            msg = f"patch set {ps.ident} needs {ps.package}{ps.package_version}, target {target.name} has {info.version}"
            if not force:
                raise Refused(msg, "use --force to apply it anyway")
            notes.append(f"warning: {msg} (--force)")
        if m.kind == "role":
            hint = (
                f'add unit = "/etc/systemd/system/NAME.service" (the host\'s unit; the drop-in goes beside it) '
                f'or dropin = "..." to [targets.{target.name}.files]'
                if m.have == "dropin"
                else f'add {m.have} = "..." to [targets.{target.name}.files]'
            )
            raise BadInput(
                f"patch set {ps.ident} sets the {m.have!r} file, but target {target.name} has no such role",
                hint,
            )
    for ps in sets:
        python = dict(ps.values or ()).get("python")
        if python is not None and python != target.config.python:
            notes.append(
                f"warning: {ps.ident} makes the service run {python} ({{{{ python }}}}), not the target's "
                f"interpreter {target.config.python}, whose {target.config.package} patchkeeper patches: the "
                f"service would run another environment's {target.config.package} (drop python from "
                f"[targets.{target.name}.vars] to use the target's own)"
            )
    return notes + refuse_unwritable(info.package, info.top_dirs(), info.loose_paths(), sets, force)


def refuse_unwritable(
    package: str, tops: Collection[str], loose: Collection[str], sets: list[PatchSet], force: bool
) -> list[str]:
    """Refuse what the patch sets themselves write that apply never writes: a path outside the files
    of `package` (its top-level directories `tops` and files `loose`), bytecode, an install record,
    patchkeeper's stage names, a setuid, setgid or sticky mode (no recorded state holds one: a stored
    manifest's mode is permission bits only, host/manifest_text.py), and (unless `force`: then a
    warning, returned) a world-writable mode. `apply` and `check` (on a target or a wheel) both refuse
    here, alike."""
    for ps in sets:
        _refuse_unmanaged(package, set(tops), set(loose), ps)
    special = patchset.unsafe_modes(sets, patchset.SPECIAL_MODE_BITS)
    if special:
        raise BadInput(
            "patch sets make file(s) setuid, setgid or sticky: " + ", ".join(special),
            "patchkeeper records and restores permission bits only: give the files mode 100644 or 100755",
        )
    unsafe = patchset.unsafe_modes(sets)
    if not unsafe:
        return []
    msg = "patch sets make file(s) world-writable: " + ", ".join(unsafe)
    if not force:
        raise Refused(msg, "fix the modes in the patches; `patchkeeper apply --force` applies them anyway")
    return [f"warning: {msg} (--force)"]


def _refuse_unmanaged(package: str, tops: set[str], loose: set[str], ps: PatchSet) -> None:
    """Refuse a patch set that writes where no scan looks (so no rollback would undo it): outside the
    package's own files and top-level directories, bytecode, install records or patchkeeper's stage names."""
    bad = []
    for path in ps.paths:
        if is_install_record(path):
            why = "an install record, written by the installer"
        elif not is_managed_name(path):
            why = (
                "a stage file name of patchkeeper"
                if STAGE_PREFIX in path
                else "bytecode, derived from sources"
            )
        elif path.split("/", 1)[0] not in tops and path not in loose:
            why = f"not a file of package {package}"
        else:
            continue
        bad.append(f"{path} ({why})")
    if bad:
        raise Refused(
            f"patch set {ps.ident} writes {len(bad)} path(s) patchkeeper does not manage, so no rollback "
            "would undo them: " + ", ".join(bad[:10]) + (" …" if len(bad) > 10 else ""),
            f"limit the patch set to the files of {package} ({', '.join(sorted(tops))}"
            f"{', ' + ', '.join(sorted(loose)[:5]) if loose else ''}), without bytecode or install records",
        )


def check_history(s: Session, sets: list[PatchSet]) -> None:
    applied = {ref for slot in s.ledger.entries().slots for ref in slot.refs}  # (name, version, digest)
    for ps in sets:
        for name, version, digest in applied:
            if name == ps.name and version == ps.version and digest != ps.digest:
                raise Refused(
                    f"patch set {ps.ident} changed since it was applied here "
                    f"({str(digest)[:19]}… then, {ps.digest[:19]}… now) without a version bump",
                    f"raise version in patchsets/{ps.name}/patchset.toml",
                )


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


def build_files(
    sets: list[PatchSet],
    files: dict[str, bytes | None],
    modes: dict[str, int],
    roles: Collection[str],
    trial_of: Collection[PatchSet] | None = None,
) -> tuple[FileCheck, ...]:
    """Apply `sets` in order to `files` (and their `modes`), in place, with their files for `roles`.

    With `trial_of`, each file patch is checked first: a failing one is reported (for the sets in
    `trial_of`) and skipped, instead of raising."""

    checks = []
    for ps in sets:
        for origin, fps in ps.patches:  # each patch as git apply applies it, the next on its result
            for outcome in applyset.results(fps, files, modes, f"{ps.name}/{origin}", trial_of is not None):
                if trial_of is not None and ps in trial_of:
                    checks.append(FileCheck(ps.ident, origin, outcome.patch.path, outcome.hunks))
        for role, data in ps.files:
            if role in roles:
                files[ROLE_PREFIX + role] = data
                modes.setdefault(ROLE_PREFIX + role, 0o644)
    return tuple(checks)


def _library(sets: Library | Path) -> Library:
    """The command's patch sets, loaded once each; a directory given: a library of its own."""
    return sets if isinstance(sets, Library) else Library(sets)


def load_applied(ws: Workspace | Library, ref: PatchSetRef) -> PatchSet:
    ps = _library(ws if isinstance(ws, Library) else ws.patchsets_dir).load(ref["name"])
    if ps.digest != ref["digest"]:
        raise Refused(
            f"applied patch set {ref['name']}@{ref['version']} is no longer in the workspace as applied "
            "(its files changed)",
            "roll back to baseline instead, which needs no patch set",
        )
    return ps


def owners_of(ws: Workspace, stack: Iterable[PatchSetRef]) -> dict[str, str]:
    """key -> the patch set(s) of `stack` that touch it, by their paths and role files."""

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
