"""`patchkeeper record NAME`: a target's edits since a state, or a git range, become a patch set."""

from __future__ import annotations

from ..change import adopt
from ..change.session import Session
from ..checks import scan
from ..errors import BadInput, Refused
from ..patchset import authoring, diffwrite, patchset, templates
from ..patchset.patchset import PatchSet
from ..patchset.varspec import VarType
from ..records import history
from ..records.ledger import State
from ..records.manifest import ROLE_PREFIX, differences
from ..workspace import TargetConfig, Workspace
from . import answer, answers_json


@answers_json
def record_target(
    ws: Workspace,
    target: str | None,
    name: str,
    since: str,
    bump: str | None,
    description: str | None,
    as_json: bool = False,
) -> int:
    authoring.check_name(name)
    with Session(ws, target, f"record {name} --from {since}", write=False) as s:
        s.warn_installation()
        state = s.ledger.find_state(since)
        then = s.ledger.load_manifest(state)
        now = scan.scan_all(s.target)
        changed = differences(then, now)
        if not changed:
            raise Refused(
                f"target {s.target.name} has no edits since state {state.id}"
                f"{' (' + state.name + ')' if state.name else ''}; nothing to record",
                "edit the package's files first, or pick an earlier --from state",
            )
        info, agent = s.target.info, s.target.agent
        changes, roles = [], []
        for key in changed:
            old_entry, new_entry = then.get(key), now.get(key)
            new = None
            if new_entry is not None:
                new = agent.read(info.path_of(key))
                if s.target.hash_bytes(new) != new_entry.digest:
                    raise Refused(
                        f"{key} changed while it was being recorded", "retry when the files are quiet"
                    )
            if key.startswith(ROLE_PREFIX):
                if new is None:
                    raise Refused(
                        f"the {key[1:]} role file was removed; a patch set can only set it",
                        "restore the file, then record again",
                    )
                roles.append((key[1:], info.path_of(key), new))
                continue
            old = agent.store_get(info.store, old_entry.digest) if old_entry else None
            changes.append(
                diffwrite.Change(
                    key,
                    old,
                    new,
                    old_entry.mode if old_entry else None,
                    new_entry.mode if new_entry else None,
                )
            )
        diffwrite.refuse_unrecordable(changes, f"target {s.target.name}")
        taken: set[str] = {f"{name}.patch"}
        role_files: list[tuple[str, str, bytes]] = []
        defaults: dict[str, str] = {}
        types: dict[str, VarType] = {}
        sources = template_sources(ws, name, s.ledger.current(), [role for role, _, _ in roles])
        for role, path, data in roles:
            source, applied = sources.get(role, (None, None))
            fname = authoring.role_file_name(role, dict(source.sources)[role] if source else path, taken)
            taken.add(fname)
            if source is not None:
                data = as_template(source, applied, role, data, s.target.config, name, fname)
                used = templates.names(data)
                defaults.update((k, v) for k, v in source.defaults if k in used)
                types.update((k, t) for k, t in source.types if k in used)
            role_files.append((role, fname, data))
        patch = diffwrite.diff(changes)
        draft = authoring.Draft(
            name=name,
            package=s.target.config.package,
            patches=((f"{name}.patch", patch),) if patch else (),
            roles=tuple(role_files),
            description=description
            if description is not None
            else f"recorded from {s.target.name} since state {state.name or state.id}",
            package_version=f"=={info.version}",
            requires=tuple(p["name"] for p in state.stack),
            defaults=tuple(sorted(defaults.items())) if defaults else None,
            types=tuple(sorted(types.items())) if types else None,
        )
        saved = authoring.save(ws.patchsets_dir, draft, bump)
        return report_saved(ws, saved, len(changes), len(role_files))


@answers_json
def record_adoption(
    ws: Workspace,
    target: str | None,
    name: str,
    bump: str | None,
    description: str | None,
    as_json: bool = False,
) -> int:
    """A patch set of exactly the hand edits found when the target was adopted, against the release."""

    authoring.check_name(name)
    with Session(ws, target, f"record {name} --from-adoption", write=False) as s:
        first, edits = adopt.adopted_edits(s)
        changes = [
            diffwrite.Change(
                key, old, new, release.mode if release else None, edited.mode if edited else None
            )
            for key, release, old, edited, new in edits
        ]
        diffwrite.refuse_unrecordable(changes, f"the hand edits adopted on {s.target.name}")
        version = str(first.extra.get("package_version") or s.target.info.version)
        draft = authoring.Draft(
            name=name,
            package=s.target.config.package,
            patches=((f"{name}.patch", diffwrite.diff(changes)),),
            description=description
            if description is not None
            else f"the hand edits found on {s.target.name} when it was adopted ({first.extra.get('adopted')}, "
            f"transaction {first.id})",
            package_version=f"=={version}",
        )
        saved = authoring.save(ws.patchsets_dir, draft, bump)
        return report_saved(ws, saved, len(changes), 0)


def template_sources(
    ws: Workspace, name: str, current: State | None, roles: list[str]
) -> dict[str, tuple[PatchSet, dict[str, str] | None]]:
    """Role -> the patch set whose template the target's role file was rendered from, and the values
    it was rendered with when the ledger says (None: the target's values now): the patch set being
    recorded if it has that role, else the last one of the target's stack that sets it (the version
    applied, still in the workspace). A role no patch set sets is recorded as it is."""
    found: dict[str, tuple[PatchSet, dict[str, str] | None]] = {}
    stack = {p["name"]: p for p in (current.stack if current else ())}
    for ps_name in dict.fromkeys([name, *reversed(stack)]):
        try:
            ps = patchset.load(ws.patchsets_dir, ps_name)
        except BadInput:
            continue
        ref = stack.get(ps_name)
        applied = ref is not None and ref["version"] == ps.version and ref["digest"] == ps.digest
        if ps_name != name and not applied:
            continue
        for role, _ in ps.files:
            if role in roles and role not in found:
                found[role] = (ps, dict(ref.get("vars") or {}) if applied and ref is not None else None)
    return found


def as_template(
    source: PatchSet,
    applied: dict[str, str] | None,
    role: str,
    data: bytes,
    config: TargetConfig,
    name: str,
    fname: str,
) -> bytes:
    """The role file as `source`'s template again (see templates.record), with a note for values
    written out in text the user added; the edited file of the target is never the template."""
    where = f"patchsets/{source.name}/{dict(source.sources)[role]}"
    values = {"python": config.python, **dict(source.defaults), **config.vars, **(applied or {})}
    hint = (
        f"give {config.name} its own value in [targets.{config.name}.vars] of patchkeeper.toml and apply, "
        f"or edit the template {where} by hand; nothing was written"
    )
    recorded = templates.record(
        dict(source.files)[role],
        values,
        data,
        f"the {role} role file of {config.name}, rendered from {where}",
        hint,
    )
    for var in recorded.literal:
        print(
            f"note: text added to the {role} role file holds {values[var]!r}, the value of {{{{ {var} }}}} on "
            f"{config.name}; kept as written in patchsets/{name}/{fname} (write {{{{ {var} }}}} there for "
            "each target's own value)"
        )
    return recorded.data


@answers_json
def record_git(
    ws: Workspace,
    name: str,
    checkout: str,
    span: str,
    subdir: str,
    bump: str | None,
    description: str | None,
    package: str | None,
    package_version: str | None,
    as_json: bool = False,
) -> int:

    authoring.check_name(name)
    package = package or default_package(ws)
    changes = history.read_range(checkout, span, subdir)
    if not changes:
        raise Refused(
            f"{checkout}: nothing differs in {subdir or 'the tree'} over {span}",
            "check the range and --subdir",
        )
    diffwrite.refuse_unrecordable(changes, checkout)
    patch = history.range_patch(checkout, span, subdir)  # git writes it: its diff, not a second one
    draft = authoring.Draft(
        name=name,
        package=package,
        patches=((f"{name}.patch", patch),),
        description=description if description is not None else f"recorded from {span}",
        package_version=package_version,
    )
    saved = authoring.save(ws.patchsets_dir, draft, bump)
    return report_saved(ws, saved, len(changes), 0)


def default_package(ws: Workspace) -> str:
    """The package a new patch set is for: the default target's, or the one every target has."""
    packages = {t.package for t in ws.targets.values()}
    if ws.default_target in ws.targets:
        return ws.targets[ws.default_target].package
    if len(packages) == 1:
        return packages.pop()
    raise BadInput("cannot tell which package the patch set is for", "pass --package NAME")


def report_saved(ws: Workspace, saved: authoring.Saved, files: int, roles: int) -> int:
    """Print what was written (and commit it to the workspace's history); with --json, the document
    {"patchset", "digest", "status", "previous", "kept", "path", "files", "roles", "commit"}."""
    where = ws.patchsets_dir / saved.ident.partition("@")[0]
    answer(patchset=saved.ident, digest=saved.digest, status=saved.status, previous=saved.previous)
    answer(kept=saved.kept, path=str(where), files=files, roles=roles, commit=None)
    if saved.status == "unchanged":
        print(f"{saved.ident} already holds exactly this content; nothing written ({where})")
        return 0
    was = f" (was {saved.previous})" if saved.previous else ""
    print(
        f"{saved.status} {saved.ident}{was} in {where}: {files} file(s)"
        + (f", {roles} role file(s)" if roles else "")
        + f"; digest {saved.digest}"
    )
    if saved.kept:
        print(f"kept {saved.ident.partition('@')[0]}@{saved.previous} in patchsets/{saved.kept}")
    commit = commit_patchset(ws, saved)
    answer(commit=commit)
    if commit:
        print(
            f"committed {where.relative_to(ws.root)}/ to the workspace's git repository as {commit[:12]} "
            "(only that directory; undo with git revert)"
        )
    return 0


def commit_patchset(ws: Workspace, saved: authoring.Saved) -> str | None:
    """Commit the patch set's directory, which patchkeeper just wrote whole, to the workspace, so the
    apply that names this version can name the commit holding it; returns the commit, if one was made."""

    directory = ws.patchsets_dir / saved.ident.partition("@")[0]
    kept = [ws.patchsets_dir / saved.kept] if saved.kept else []  # the version it replaced, kept beside
    return history.commit_paths(
        ws.root, [directory, *kept], f"patch set {saved.ident}: {saved.status} by patchkeeper\n"
    )
