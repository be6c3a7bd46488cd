"""`patchkeeper check NAME`: would the patch set apply to a target, or to a wheel? Nothing changes."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from typing import Callable

from .. import engine, patching, patchset
from ..errors import BadInput
from ..manifest import ROLE_PREFIX
from ..patchset import PatchSet
from ..session import Session
from ..workspace import Workspace
from . import emit_json

_SHOWN = 8  # lines of a failed hunk shown, expected against found


@dataclass(frozen=True)
class FileReport:
    patchset: str
    origin: str
    path: str
    hunks: tuple[patching.HunkCheck, ...]

    @property
    def ok(self) -> bool:
        return all(h.offset is not None for h in self.hunks)

    def to_dict(self) -> dict:
        return {"patchset": self.patchset, "patch": self.origin, "path": self.path, "applies": self.ok,
                "hunks": [{"header": h.header, "offset": h.offset, "problem": h.problem,
                           "expected": list(h.expected), "found": list(h.found), "found_at": h.found_at}
                          for h in self.hunks]}


def check_sets(sets: list[PatchSet], read: Callable[[str], bytes | None],
               silent: list[PatchSet] = ()) -> list[FileReport]:
    """Apply `silent` then `sets` to the bytes `read` gives, in memory, reporting every file of `sets`."""
    files: dict[str, bytes | None] = {}

    def current(path: str) -> bytes | None:
        if path not in files:
            files[path] = read(path)
        return files[path]

    reports = []
    for ps in list(silent) + list(sets):
        for origin, fps in ps.patches:
            for fp in fps:
                data = current(fp.path)
                results = patching.check(fp, data)
                if ps in sets:
                    reports.append(FileReport(ps.ident, origin, fp.path, results))
                if all(h.offset is not None for h in results):
                    files[fp.path] = patching.apply(fp, data, origin).data
    return reports


def check(ws: Workspace, target: str | None, name: str, wheel: str | None, as_json: bool) -> int:
    sets = engine.resolve(ws.patchsets_dir, name)
    if wheel:
        return _against_wheel(sets, wheel, as_json)
    with Session(ws, target, f"check {name}", write=False) as s:
        t, ledger = s.target, s.ledger
        problems = _version_problems(sets, t.config.package, t.info.version, f"target {t.name}")
        sets = [_bound(ps, s.config, problems) for ps in sets]  # role files as this target gets them
        for ps in sets:
            for role, _ in ps.files:
                if role not in dict(t.info.roles):
                    problems.append(f"{ps.ident} sets the {role!r} file; target {t.name} has no such role")
        current = ledger.current()
        change = engine.stack_change(ws.patchsets_dir, current.stack if current else (), sets)
        if change is None:
            print(f"{t.name}: {sets[-1].ident} is already applied (state {current.id}); nothing to check")
            return 0
        replaced, kept, adding = change.removed, [p["name"] for p in change.kept], list(change.adding)
        info, agent = t.info, t.agent
        if replaced:  # a switch rebuilds from the baseline, as apply does
            base = ledger.load_manifest(ledger.baseline())

            def read(path: str) -> bytes | None:
                entry = base.get(path)
                return agent.store_get(info.store, entry.digest) if entry else None

            silent = [patchset.load(ws.patchsets_dir, n) for n in kept]
            against = f"the baseline of {t.name} (switching from " + \
                ", ".join(f"{p['name']}@{p['version']}" for p in replaced) + ")"
        else:
            def read(path: str) -> bytes | None:
                return agent.read(info.path_of(path)) if agent.lstat(info.path_of(path)) else None

            silent = []
            against = f"the files of {t.name} ({info.package} {info.version})"
        reports = check_sets(adding, read, silent)
        drift = []
        if current is not None:
            recorded = ledger.load_manifest(current)
            keys = engine.touched_keys(adding) + [k for p in replaced for k in _paths_of(ws, p["name"])]
            actual = engine.scan_keys(t, list(dict.fromkeys(keys)))
            drift = [k for k in dict.fromkeys(keys) if actual.get(k) != recorded.get(k)]
        if drift:
            problems.append(f"{len(drift)} file(s) differ from the recorded state {current.id} (edited by hand?): "
                            + ", ".join(drift) + "; apply refuses them without --force")
        return _report(sets[-1].ident, against, reports, problems, as_json)


def _bound(ps: PatchSet, config, problems: list[str]) -> PatchSet:
    """The patch set rendered for the target; a template that cannot render is a problem, not an error."""
    try:
        return ps.bind(config.vars, config.name)
    except BadInput as exc:
        problems.append(exc.message)
        return ps


def _paths_of(ws: Workspace, name: str) -> list[str]:
    try:
        ps = patchset.load(ws.patchsets_dir, name)
    except BadInput:
        return []
    return list(ps.paths) + [ROLE_PREFIX + r for r, _ in ps.files]


def _version_problems(sets: list[PatchSet], package: str, version: str, where: str) -> list[str]:
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name

    out = []
    for ps in sets:
        if canonicalize_name(ps.package) != canonicalize_name(package):
            out.append(f"{ps.ident} is for package {ps.package!r}; {where} has {package!r}")
        elif ps.package_version and not SpecifierSet(ps.package_version).contains(version, prereleases=True):
            out.append(f"{ps.ident} needs {ps.package}{ps.package_version}; {where} has {version}")
    return out


def _against_wheel(sets: list[PatchSet], wheel: str, as_json: bool) -> int:
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise BadInput(f"cannot read wheel {wheel}: {exc}", "give the path of a .whl file") from None
    with archive:
        names = set(archive.namelist())
        metadata = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if not metadata:
            raise BadInput(f"{wheel} has no .dist-info/METADATA; it is not a wheel", "give the path of a .whl file")
        fields = {}
        for line in archive.read(metadata[0]).decode("utf-8", "replace").splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(": ")
            fields.setdefault(key, value.strip())
        package, version = fields.get("Name", "?"), fields.get("Version", "?")
        problems = _version_problems(sets, package, version, f"wheel {wheel}")
        reports = check_sets(sets, lambda p: archive.read(p) if p in names else None)
        notes = [f"{ps.ident}: role file(s) {', '.join(r for r, _ in ps.files)} not checked (not in a wheel)"
                 for ps in sets if ps.files]
        return _report(sets[-1].ident, f"wheel {wheel} ({package} {version})", reports, problems, as_json, notes)


def _report(ident: str, against: str, reports: list[FileReport], problems: list[str], as_json: bool,
            notes: list[str] = ()) -> int:
    ok = all(r.ok for r in reports) and not problems
    if as_json:
        emit_json({"patchset": ident, "against": against, "applies": ok, "files": [r.to_dict() for r in reports],
                   "problems": problems, "notes": list(notes)})
        return 0 if ok else 1
    print(f"checking {ident} against {against}")
    for r in reports:
        if r.ok:
            moved = [h.offset for h in r.hunks if h.offset]
            how = "applies cleanly" if not moved else \
                "applies at an offset: " + ", ".join(f"{h.header} {_lines(h.offset)}" for h in r.hunks if h.offset)
            print(f"  ok    {r.path}  {how}")
            continue
        print(f"  FAIL  {r.path}  ({r.patchset} {r.origin})")
        for h in r.hunks:
            if h.offset is None:
                print(f"        {h.header}: {h.problem}")
                _show_lines(h)
            elif h.offset:
                print(f"        {h.header}: applies {_lines(h.offset)}")
    for p in problems:
        print(f"  problem: {p}")
    for n in notes:
        print(f"  note: {n}")
    failed = sum(not r.ok for r in reports)
    print(f"{ident}: " + ("applies" if ok else f"does not apply ({failed} file(s) fail, {len(problems)} problem(s))"))
    return 0 if ok else 1


def _lines(offset: int) -> str:
    return f"{abs(offset)} line(s) {'later' if offset > 0 else 'earlier'}"


def _show_lines(h: patching.HunkCheck) -> None:
    if not h.expected and not h.found:
        return
    print(f"          expected (patch)  |  found at line {h.found_at}")
    for i in range(min(max(len(h.expected), len(h.found)), _SHOWN)):
        want = h.expected[i].rstrip("\n") if i < len(h.expected) else "<none>"
        got = h.found[i].rstrip("\n") if i < len(h.found) else "<end of file>"
        mark = " " if want == got else "!"
        print(f"        {mark} {want!r}")
        if want != got:
            print(f"        > {got!r}")
    if max(len(h.expected), len(h.found)) > _SHOWN:
        print(f"          … {max(len(h.expected), len(h.found)) - _SHOWN} more line(s)")
