"""`patchkeeper port NAME --to VERSION`: carry a patch set to another release of its package."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..checks import algoscan, wheels
from ..errors import BadInput, Refused
from ..host.disk import normalize_name
from ..patchset import authoring, merge3, patchset, port as porting, portdir
from ..patchset.patchset import MANIFEST, PatchSet
from ..records import history
from ..targets import open_target
from ..workspace import Workspace
from . import emit_json
from .record import commit_patchset

_ENC = ("utf-8", "surrogateescape")
BUMP = "minor"  # a port changes what the set is for, not what it does
OUTCOMES = (
    porting.CLEAN,
    porting.MERGED,
    porting.UPSTREAM,
    porting.CONFLICT,
    porting.COLLISION,
    porting.GONE,
)


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
    with _releases(ws, ps, to, given, target) as (old, new, sources):
        labels = (
            f"{ps.ident} (ours)",
            f"{ps.package} {old.version} (base)",
            f"{ps.package} {new.version} (theirs)",
        )
        result = porting.port(ps, old, new, labels)
        scan = _scan(ps, old, new, result)
    doc = document(ps, old.version, new.version, sources, result, scan)
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
        render(doc)
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


def _old_version(ps: PatchSet, to: str, given: list[str]) -> str:
    """The release the patch set was made for: its exact pin, else the one other --wheel it fits."""
    if patchset.pinned(ps.package_version) is not None:
        old = ps.package_version.split("==", 1)[1].strip().lstrip("v")
    else:
        fit = [
            v
            for v in dict.fromkeys(given)
            if not wheels.same_version(v, to)
            and (not ps.package_version or patchset.fits(ps.package_version, v))
        ]
        if len(fit) != 1:
            raise BadInput(
                f"{ps.ident} is for {ps.package}{ps.package_version or ' (any version)'}: port needs to "
                "know the one release it was made for",
                f'pin it (package_version = "==X.Y.Z" in patchsets/{ps.name}/{MANIFEST}), '
                "or give that release's wheel with --wheel",
            )
        old = fit[0]
    if wheels.same_version(old, to):
        raise BadInput(f"{ps.ident} is already for {ps.package} {to}", "give --to another release")
    return old


@contextlib.contextmanager
def _releases(
    ws: Workspace, ps: PatchSet, to: str, given: tuple[str, ...], target: str | None
) -> Iterator[tuple[wheels.Wheel, wheels.Wheel, dict[str, str]]]:
    """The old and the new release's wheels (and where each came from): --wheel, else the
    workspace's wheels directory, else `pip download` for the target's interpreter, as repair finds them."""
    with contextlib.ExitStack() as stack:
        opened = []
        for path in given:
            if not Path(path).is_file():
                raise BadInput(f"--wheel {path}: no such file", "give the path of a .whl file")
            opened.append(_fitting(stack.enter_context(wheels.Wheel(Path(path))), ps, f"--wheel {path}"))
        old = _old_version(ps, to, [w.version for w in opened])
        found: dict[str, tuple[wheels.Wheel, str]] = {}
        for w in opened:
            match = [v for v in (old, to) if wheels.same_version(w.version, v)]
            if not match:
                raise BadInput(
                    f"--wheel {w.path}: a wheel of {w.name} {w.version}, neither {old} (what {ps.ident} "
                    f"was made for) nor {to} (--to)",
                    "give the wheels of those two releases",
                )
            found.setdefault(match[0], (w, f"--wheel {w.path.name}"))
        tags: list[wheels.Tags] = []
        for version in (to, old):  # the new release first: an unknown version is refused before a download
            if version not in found:
                found[version] = _fetch(stack, ws, ps, version, target, tags)
        yield found[old][0], found[to][0], {"from": found[old][1], "to": found[to][1]}


def _fitting(w: wheels.Wheel, ps: PatchSet, where: str) -> wheels.Wheel:
    if normalize_name(w.name) != normalize_name(ps.package):
        raise BadInput(
            f"{where}: a wheel of {w.name or '?'}, not of {ps.package} (the package {ps.ident} patches)",
            f"give wheels of {ps.package}",
        )
    return w


def _fetch(
    stack: contextlib.ExitStack,
    ws: Workspace,
    ps: PatchSet,
    version: str,
    target: str | None,
    tags: list[wheels.Tags],
) -> tuple[wheels.Wheel, str]:
    where = f"the workspace's wheels directory {ws.wheels}"
    for path in wheels.in_directory(ws.wheels, ps.package, version):
        w = stack.enter_context(wheels.Wheel(path))
        if wheels.same_version(w.version, version):
            return _fitting(w, ps, path.name), f"{where}: {path.name}"
    config = ws.target(target)
    if not tags:  # the target's interpreter picks the wheel, as for repair; asked once
        t = open_target(config)
        try:
            tags.append(wheels.target_tags(t, wheels.where_to_put(ws.wheels, True)))
        finally:
            t.close()
    local_python = None if config.ssh else config.python
    for path in stack.enter_context(
        wheels.downloaded(tags[0], config.name, ps.package, version, ws.wheels, local_python, True)
    ):
        w = stack.enter_context(wheels.Wheel(path))
        if wheels.same_version(w.version, version):
            return _fitting(w, ps, path.name), f"pip download: {path.name}"
    raise Refused(
        f"pip download gave no wheel of {ps.package} {version}",
        f"download it yourself and {wheels.where_to_put(ws.wheels, True)}",
    )


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


def document(
    ps: PatchSet,
    old: str,
    new: str,
    sources: dict[str, str],
    result: porting.Port,
    scan: dict[str, Any] | None,
) -> dict[str, Any]:
    """The report as one JSON-ready document; the text report is printed from it."""
    counts = {o: 0 for o in OUTCOMES}
    for f in result.files:
        for h in f.hunks:
            counts[h.outcome] += 1
    return {
        "patchset": ps.ident,
        "package": ps.package,
        "from": old,
        "to": new,
        "wheels": sources,
        "outcome": None,
        "hunks": counts,
        "roles": [role for role, _ in ps.sources],
        "files": [
            {
                "path": f.path,
                "patches": list(f.patches),
                "kind": f.kind,
                "outcome": f.outcome,
                "renamed_to": f.renamed_to,
                "conflicts": f.conflicts,
                "note": f.note,
                "hunks": [
                    {
                        "header": h.header,
                        "outcome": h.outcome,
                        "offset": h.offset,
                        "note": h.note,
                        "lines": list(h.lines),
                    }
                    for h in f.hunks
                ],
            }
            for f in result.files
        ],
        "dropped": list(result.dropped),
        "problems": list(result.problems),
        "checked": result.checked,
        "scan": scan,
        "scratch": None,
        "written": None,
        "notes": [],
    }


def _hunk_text(h: dict[str, Any]) -> str:
    where = f"  {abs(h['offset'])} line(s) {'later' if h['offset'] > 0 else 'earlier'}" if h["offset"] else ""
    note = f"  ({h['note']})" if h["note"] and h["outcome"] not in (porting.CLEAN, porting.CONFLICT) else ""
    return f"{h['outcome']:<9} {h['header']}{where}{note}"


def render(doc: dict[str, Any]) -> None:
    """One screen: each file and each hunk with its outcome, then what was written or what to do."""
    print(
        f"port {doc['patchset']}: {doc['package']} {doc['from']} -> {doc['to']} "
        f"(wheels: {doc['wheels']['from']}; {doc['wheels']['to']})"
    )
    for f in doc["files"]:
        head = f"  {f['outcome']:<9} {f['path']}  [{', '.join(f['patches'])}]"
        if f["renamed_to"] or f["outcome"] == porting.GONE:
            head += f"  {f['note']}"
        if len(f["hunks"]) == 1 and f["hunks"][0]["outcome"] == f["outcome"] and not f["renamed_to"]:
            print(head + "  " + _hunk_text(f["hunks"][0])[10:])
            continue
        print(head)
        for h in f["hunks"]:
            print(f"      {_hunk_text(h)}")
    counts = ", ".join(f"{n} {o}" for o, n in doc["hunks"].items() if n)
    print(
        f"hunks: {counts or 'none'}"
        + (f"; role files carried as they are: {', '.join(doc['roles'])}" if doc["roles"] else "")
    )
    for name in doc["dropped"]:
        print(f"dropped {name}: nothing of it is left to change in {doc['package']} {doc['to']}")
    scan = doc["scan"]
    if scan is not None:
        if scan["new"]:
            print(
                f"scan: {len(scan['new'])} new place(s) in {doc['package']} {doc['to']} compare to {scan['of']} but "
                f"not {scan['algorithm']}: {', '.join(scan['new'][:8])}{' …' if len(scan['new']) > 8 else ''}"
            )
        else:
            print(
                f"scan: no new place compares to {scan['of']} without {scan['algorithm']} ({scan['files']} "
                f"file(s) name {scan['of']}, {scan['parsed']} differ from before the port)"
            )
    for p in doc["problems"]:
        print(f"problem: {p}")
    if doc["checked"] and not doc["problems"]:
        print(
            f"check: the regenerated patches apply to {doc['package']} {doc['to']}'s files and give the merged "
            f"bytes; the Python files among them compile ({doc['checked']} file(s))"
        )
    _render_end(doc)


def _render_end(doc: dict[str, Any]) -> None:
    for note in doc["notes"]:
        print(f"note: {note}")
    outcome, name = doc["outcome"], doc["patchset"].partition("@")[0]
    if outcome == "dry-run":
        blocked = any(f["outcome"] in porting.BLOCKING for f in doc["files"]) or doc["problems"]
        print("dry run: nothing written" + ("; the port would stop here (exit 1)" if blocked else ""))
    elif outcome == "ported":
        w = doc["written"]
        print(
            f"{w['status']} {w['ident']} (was {w['previous']}) in {w['directory']}: package_version "
            f"=={doc['to']}, {w['patches']} patch file(s) written against {doc['package']} {doc['to']}; "
            f"digest {w['digest']}"
        )
        if w.get("kept"):
            print(f"kept {name}@{w['previous']} in {w['kept']}")
        for c in w["commits"]:
            print(f"committed {c}")
        print(
            f"next: patchkeeper check {name} -t TARGET (after pip install -U {doc['package']}=={doc['to']} "
            f"there), then patchkeeper apply {name}"
        )
    elif outcome == "blocked":
        scratch = doc["scratch"]
        print(
            f"not ported: nothing written into patchsets/; the merge is in {scratch}/files/ "
            "(diff3 markers where it conflicts):"
        )
        for f in doc["files"]:
            if f["conflicts"]:
                print(f"  resolve files/{f['renamed_to'] or f['path']}  ({f['conflicts']} conflict(s))")
            elif f["outcome"] == porting.GONE and not f["renamed_to"]:
                print(
                    f"  files/{f['path']} is not there: {doc['package']} {doc['to']} has no such file, and its "
                    "change is dropped unless you put the file there"
                )
        print(
            f"then: patchkeeper port {name} --continue   (or start again: patchkeeper port {name} --to {doc['to']})"
        )


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


def _new_release(
    stack: contextlib.ExitStack, ws: Workspace, ps: PatchSet, pending: portdir.Pending
) -> wheels.Wheel:
    """The wheel of the release a stopped port goes to: the one it used, else found again as port finds it."""
    if pending.wheel and Path(pending.wheel).is_file():
        w = stack.enter_context(wheels.Wheel(Path(pending.wheel)))
        if wheels.same_version(w.version, pending.new):
            return _fitting(w, ps, pending.wheel)
    return _fetch(stack, ws, ps, pending.new, None, [])[0]


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
        release = _Verified(_new_release(stack, ws, ps, pending))
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
    _render_end({**doc, "outcome": "ported"})
    print(f"finished the port left in {pending.directory} (removed)")
    return 0
