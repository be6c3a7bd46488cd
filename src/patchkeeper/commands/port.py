"""`patchkeeper port NAME --to VERSION`: carry a patch set to another release of its package."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..checks import algoscan, wheels
from ..errors import BadInput, Refused
from ..patchset import authoring, merge3, patchset, port as porting, portdir
from ..patchset.patchset import MANIFEST, PatchSet
from ..records import history
from ..workspace import Workspace
from . import emit_json, port_report, port_wheels
from .record import commit_patchset

_ENC = ("utf-8", "surrogateescape")
BUMP = "minor"  # a port changes what the set is for, not what it does


def port(
    ws: Workspace,
    name: str,
    to: str | None,
    given: tuple[str, ...],
    target: str | None,
    as_json: bool,
    dry_run: bool,
    bump: str | None,
    resume: bool = False,
) -> int:
    """Exit 0: ported (written unless a dry run); 1: a conflict, a gone file or a failed check
    (nothing written into patchsets/; the merge is left in a scratch directory); 2: bad input."""
    if resume:
        if to or given or dry_run or bump:
            raise BadInput(
                "--continue takes the release and the files from the port it finishes",
                f"run `patchkeeper port {name} --continue` alone",
            )
        return finish(ws, name, as_json)
    if not to:
        raise BadInput("give the release to port to", f"patchkeeper port {name} --to VERSION (or --continue)")
    bump = bump or BUMP
    ps = patchset.load(ws.patchsets_dir, name)
    to = _version(to)
    with port_wheels.releases(ws, ps, to, given, target) as (old, new, sources):
        labels = (
            f"{ps.ident} (ours)",
            f"{ps.package} {old.version} (base)",
            f"{ps.package} {new.version} (theirs)",
        )
        result = porting.port(ps, old, new, labels)
        scan = _scan(ps, old, new, result)
    doc = port_report.document(ps, old.version, new.version, sources, result, scan)
    directory = portdir.scratch_dir(ws.root, name)
    if dry_run:
        doc["outcome"] = "dry-run"
    elif result.blocked:
        portdir.write(
            directory,
            {
                "name": name,
                "from_version": ps.version,
                "from_digest": ps.digest,
                "package": ps.package,
                "old": old.version,
                "new": new.version,
                "bump": bump,
                "order": [origin for origin, _ in ps.patches],
                "wheel": str(new.path.resolve()),
            },
            result.files,
        )
        doc["outcome"], doc["scratch"] = "blocked", str(directory)
    else:
        doc["written"] = _save(ws, ps, result.patches, new.version, bump)
        doc["outcome"] = "ported"
        if portdir.remove(ws.root, name):
            doc["notes"].append(f"removed the scratch directory of an earlier port, {directory}")
    if as_json:
        emit_json(doc)
    else:
        port_report.render(doc)
    return 1 if result.blocked else 0


def _version(text: str) -> str:
    from packaging.version import InvalidVersion, Version  # lazy: tens of ms to import, off the fast paths

    try:
        Version(text)
    except InvalidVersion:
        raise BadInput(
            f"--to {text!r} is not a version", "give the release to port to, e.g. --to 0.5.24"
        ) from None
    return text


def _scan(ps: PatchSet, old: wheels.Wheel, new: wheels.Wheel, result: porting.Port) -> dict[str, Any] | None:
    """For a patch set that names an algorithm of its own (ddtree: DDTREE) where sglang names
    DFLASH: the comparisons that name DFLASH alone after the port and not before it. Only the files
    whose bytes differ are parsed (a file alike on both sides has the same places)."""
    algorithm = ps.name.upper()
    if not any(
        algorithm in line for _, fps in ps.patches for fp in fps for h in fp.hunks for line in h.new_lines
    ):
        return None
    before = dict(_python(old, {f.path: f.ours for f in result.files}))
    # a file left with conflict markers does not parse: its conflicts count as the new release has them
    after = dict(_python(new, {f.lands: _theirs(f) for f in result.files}))
    differ = [rel for rel in after if before.get(rel) != after[rel]]
    was = algoscan.scan(((rel, before[rel]) for rel in differ if rel in before), algorithm)
    now = list(algoscan.scan(((rel, after[rel]) for rel in differ), algorithm))
    return {
        "algorithm": algorithm,
        "of": algoscan.DFLASH,
        "files": len(after),
        "parsed": len(differ),
        "new": [str(p) for p in algoscan.new_places(was, now)],
    }


def _theirs(f: porting.FilePort) -> bytes | None:
    if not f.conflicts or f.result is None:
        return f.result
    return merge3.taking(f.result.decode(*_ENC), "theirs").encode(*_ENC)


def _python(release: wheels.Wheel, overrides: dict[str, bytes | None]) -> Iterator[tuple[str, bytes]]:
    """The release's Python files that name DFLASH, the patch set's own bytes where it has them."""
    for rel in sorted(release.site_names() | set(overrides)):
        if rel.endswith(".py"):
            got = release.site_file(rel) if rel not in overrides else None
            data = overrides[rel] if rel in overrides else (got[0] if got else None)
            if data is not None and algoscan.DFLASH.encode() in data:
                yield rel, data


def _save(
    ws: Workspace, ps: PatchSet, patches: tuple[tuple[str, bytes], ...], to: str, bump: str
) -> dict[str, Any]:
    """Write the ported set in place as its next version (the old one committed to the workspace's
    history first where it was not); role files and every other file carried as they are."""

    directory = ws.patchsets_dir / ps.name
    version = authoring.bump(ps.version, bump)
    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        if rel != MANIFEST and not (rel.endswith(".patch") and "/" not in rel):
            files[rel] = path.read_bytes()
    files[MANIFEST] = retarget(
        (directory / MANIFEST).read_text(encoding="utf-8"), version, f"=={to}"
    ).encode()
    files.update(patches)
    commits = []
    ref = history.workspace_ref(ws.root, {ps.name: directory})
    if ref is not None and not ref["patchsets_clean"].get(ps.name):
        kept = history.commit_paths(
            ws.root, [directory], f"patch set {ps.ident}: as it was before its port to {ps.package} {to}\n"
        )
        if kept:
            commits.append(f"{ps.ident} as it was to the workspace's git repository as {kept[:12]}")
    draft = authoring.Draft(
        name=ps.name, package=ps.package, patches=(), extra_files=tuple(sorted(files.items()))
    )
    saved = authoring.save(ws.patchsets_dir, draft, version=version)
    made = commit_patchset(ws, saved)
    if made:
        commits.append(
            f"{saved.ident} to the workspace's git repository as {made[:12]} (undo with git revert)"
        )
    return {
        "ident": saved.ident,
        "previous": ps.version,
        "digest": saved.digest,
        "status": saved.status,
        "directory": str(directory),
        "patches": len(patches),
        "commits": commits,
        "kept": f"patchsets/{saved.kept}" if saved.kept else None,
    }


def retarget(text: str, version: str, pin: str) -> str:
    """patchset.toml with its version and package_version set, everything else (comments) kept."""
    return authoring.set_keys(text, {"version": version, "package_version": pin})


class _Verified:
    """The new release as its wheel has it, every file checked against the wheel's own RECORD."""

    def __init__(self, wheel: wheels.Wheel) -> None:
        self.wheel = wheel
        self.version = wheel.version

    def site_file(self, rel: str) -> tuple[bytes, int] | None:
        return self.wheel.verified_file(rel)

    def site_names(self) -> set[str]:
        return self.wheel.site_names()


def finish(ws: Workspace, name: str, as_json: bool) -> int:
    """`port NAME --continue`: the scratch directory's files, as the person left them, become the
    ported set. Exit 1 while a conflict marker is left or the check fails (nothing written)."""
    pending = portdir.load(ws.root, name)
    ps = patchset.load(ws.patchsets_dir, name)
    if ps.digest != pending.from_digest or ps.version != pending.from_version:
        raise Refused(
            f"patchsets/{name} changed since the port to {pending.package} {pending.new} began "
            f"({name}@{pending.from_version} then, {ps.ident} now)",
            f"run `patchkeeper port {name} --to {pending.new}` again",
        )
    with contextlib.ExitStack() as stack:
        release = _Verified(port_wheels.new_release(stack, ws, ps, pending))
        files, unresolved, notes = [], [], []
        for entry in pending.files:
            result = pending.result(entry["path"])
            marks = merge3.marker_lines(result.decode(*_ENC)) if result is not None else []
            if marks:
                unresolved.append(
                    f"{pending.directory}/files/{entry['path']}: conflict markers at line(s) "
                    + ", ".join(map(str, marks[:6]))
                    + (" …" if len(marks) > 6 else "")
                )
            got = release.site_file(entry["path"])  # the wheel's bytes, never the editable copy in release/
            if pending.release(entry["path"]) != (got[0] if got else None):
                notes.append(
                    f"{pending.directory}/release/{entry['path']} is not {pending.package} {pending.new}'s "
                    "file: left aside; the patches are written against the wheel's"
                )
            files.append(
                porting.FilePort(
                    entry["origin"],
                    (entry["patch"],),
                    entry["kind"],
                    "resolved",
                    (),
                    result,
                    got[0] if got else None,
                    got[1] if got else None,
                    entry["new_mode"],
                    renamed_to=entry["path"] if entry["path"] != entry["origin"] else None,
                )
            )
        patches: tuple[tuple[str, bytes], ...] = ()
        dropped: tuple[str, ...] = ()
        problems: list[str] = []
        if not unresolved:
            patches, dropped = porting.regenerate(files, pending.order)
            problems, _ = porting.check(patches, release, files)
    doc: dict[str, Any] = {
        "patchset": f"{name}@{pending.from_version}",
        "package": pending.package,
        "from": pending.old,
        "to": pending.new,
        "unresolved": unresolved,
        "problems": problems,
        "dropped": list(dropped),
        "scratch": str(pending.directory),
        "written": None,
        "notes": notes,
    }
    if not unresolved and not problems:
        doc["written"] = _save(ws, ps, patches, pending.new, pending.bump)
        portdir.remove(ws.root, name)
    if as_json:
        emit_json(doc)
        return 0 if doc["written"] else 1
    for line in unresolved:
        print(f"unresolved: {line}")
    if not doc["written"]:
        for note in notes:
            print(f"note: {note}")
    for p in problems:
        print(f"problem: {p}")
    if not doc["written"]:
        print(
            f"not ported: nothing written into patchsets/; fix the files in {pending.directory}/files/, then "
            f"patchkeeper port {name} --continue"
        )
        return 1
    for d in dropped:
        print(f"dropped {d}: nothing of it is left to change in {pending.package} {pending.new}")
    port_report.render_end({**doc, "outcome": "ported"})
    print(f"finished the port left in {pending.directory} (removed)")
    return 0
