"""`patchkeeper record NAME`: a target's edits since a state, or a git range, become a patch set."""

from __future__ import annotations

from .. import authoring, diffwrite, engine
from ..errors import BadInput, Refused
from ..manifest import ROLE_PREFIX, differences
from ..session import Session
from ..workspace import Workspace


def record_target(ws: Workspace, target: str | None, name: str, since: str, bump: str | None,
                  description: str | None) -> int:
    authoring.check_name(name)
    with Session(ws, target, f"record {name} --from {since}", write=False) as s:
        state = s.ledger.find_state(since)
        then = s.ledger.load_manifest(state)
        now = engine.scan_all(s.target)
        changed = differences(then, now)
        if not changed:
            raise Refused(f"target {s.target.name} has no edits since state {state.id}"
                          f"{' (' + state.name + ')' if state.name else ''}; nothing to record",
                          "edit the package's files first, or pick an earlier --from state")
        info, agent = s.target.info, s.target.agent
        changes, roles = [], []
        for key in changed:
            old_entry, new_entry = then.get(key), now.get(key)
            new = None
            if new_entry is not None:
                new = agent.read(info.path_of(key))
                if s.target.hash_bytes(new) != new_entry.digest:
                    raise Refused(f"{key} changed while it was being recorded", "retry when the files are quiet")
            if key.startswith(ROLE_PREFIX):
                if new is None:
                    raise Refused(f"the {key[1:]} role file was removed; a patch set can only set it",
                                  "restore the file, then record again")
                roles.append((key[1:], info.path_of(key), new))
                continue
            old = agent.store_get(info.store, old_entry.digest) if old_entry else None
            changes.append(diffwrite.Change(key, old, new, old_entry.mode if old_entry else None,
                                            new_entry.mode if new_entry else None))
        diffwrite.refuse_binary(changes, f"target {s.target.name}")
        taken: set[str] = {f"{name}.patch"}
        role_files = []
        for role, path, data in roles:
            fname = authoring.role_file_name(role, path, taken)
            taken.add(fname)
            role_files.append((role, fname, data))
        patch = diffwrite.diff(changes)
        draft = authoring.Draft(
            name=name, package=s.target.config.package,
            patches=((f"{name}.patch", patch),) if patch else (), roles=tuple(role_files),
            description=description if description is not None else
            f"recorded from {s.target.name} since state {state.name or state.id}",
            package_version=f"=={info.version}", requires=tuple(p["name"] for p in state.stack))
        saved = authoring.save(ws.patchsets_dir, draft, bump)
        return report_saved(ws, saved, len(changes), len(role_files))


def record_git(ws: Workspace, name: str, checkout: str, span: str, subdir: str, bump: str | None,
               description: str | None, package: str | None, package_version: str | None) -> int:
    from .. import history

    authoring.check_name(name)
    package = package or default_package(ws)
    changes = history.read_range(checkout, span, subdir)
    if not changes:
        raise Refused(f"{checkout}: nothing differs in {subdir or 'the tree'} over {span}",
                      "check the range and --subdir")
    diffwrite.refuse_binary(changes, checkout)
    patch = history.range_patch(checkout, span, subdir)  # git writes it: its diff, not a second one
    draft = authoring.Draft(name=name, package=package, patches=((f"{name}.patch", patch),),
                            description=description if description is not None else f"recorded from {span}",
                            package_version=package_version)
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
    """Print what was written (and commit it to the workspace's history)."""
    where = ws.patchsets_dir / saved.ident.partition("@")[0]
    if saved.status == "unchanged":
        print(f"{saved.ident} already holds exactly this content; nothing written ({where})")
        return 0
    was = f" (was {saved.previous})" if saved.previous else ""
    print(f"{saved.status} {saved.ident}{was} in {where}: {files} file(s)"
          + (f", {roles} role file(s)" if roles else "") + f"; digest {saved.digest}")
    commit = commit_patchset(ws, saved)
    if commit:
        print(f"committed {where.relative_to(ws.root)}/ to the workspace's git repository as {commit[:12]} "
              "(only that directory; undo with git revert)")
    return 0


def commit_patchset(ws: Workspace, saved: authoring.Saved) -> str | None:
    """Commit the patch set's directory, which patchkeeper just wrote whole, to the workspace, so the
    apply that names this version can name the commit holding it; returns the commit, if one was made."""
    from .. import history

    directory = ws.patchsets_dir / saved.ident.partition("@")[0]
    return history.commit_paths(ws.root, [directory], f"patch set {saved.ident}: {saved.status} by patchkeeper\n")
