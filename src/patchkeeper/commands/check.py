"""`patchkeeper check NAME`: would the patch set apply to a target, or to a wheel? Nothing changes."""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Sequence
from typing import Any, cast

from ..change import engine, stacks, transaction
from ..change.session import Session
from ..errors import BadInput
from ..host.distinfo import metadata_fields
from ..patchset import patching
from ..patchset.patchset import PatchSet
from ..printable import one_line
from ..records.ledger import ApplyExtra
from ..workspace import Workspace
from . import emit_json

_SHOWN = 8  # lines of a failed hunk shown, expected against found


def check(ws: Workspace, target: str | None, name: str, wheel: str | None, as_json: bool) -> int:
    sets = stacks.resolve(ws.patchsets_dir, name)
    if wheel:
        return _against_wheel(sets, wheel, as_json)
    with Session(ws, target, f"check {name}", hands_off=True) as s:
        s.warn_installation()
        t = s.target
        plan = engine.plan_apply(s, name, force=False, trial=True)
        if plan is None:
            current = s.ledger.current()
            _say(
                f"{t.name}: {sets[-1].ident} is already applied (state {current.id if current else '-'}); "
                "nothing to check"
            )
            return 0
        problems = [_misfit(m, f"target {t.name}") for m in plan.misfits]
        replaced = cast(ApplyExtra, plan.entry.extra).get("removed") or []
        if replaced:  # a switch rebuilds from the baseline, as apply does
            against = (
                f"the baseline of {t.name} (switching from "
                + ", ".join(f"{p['name']}@{p['version']}" for p in replaced)
                + ")"
            )
        else:
            against = f"the files of {t.name} ({t.info.package} {t.info.version})"
        blocked = transaction.obstacles(s.ledger, list(plan.ops))  # what apply's transaction refuses
        if blocked:
            problems.append(
                f"{len(blocked)} file(s) cannot be replaced or removed, so apply would refuse: "
                + "; ".join(f"{path} {why}" for path, why in blocked.items())
            )
        if plan.drift and plan.entry.before is not None:
            problems.append(
                f"{len(plan.drift)} file(s) differ from the recorded state {plan.entry.before.id} "
                "(edited by hand?): " + ", ".join(plan.drift) + "; apply refuses them without --force"
            )
        return _report(sets[-1].ident, against, list(plan.checks), problems, as_json)


def _misfit(m: stacks.Misfit, where: str) -> str:
    ps = m.patchset
    if m.kind == "package":
        return f"{ps.ident} is for package {ps.package!r}; {where} has {m.have!r}"
    if m.kind == "version":
        return f"{ps.ident} needs {ps.package}{ps.package_version}; {where} has {m.have}"
    if m.kind == "template":
        return m.have
    return f"{ps.ident} sets the {m.have!r} file; {where} has no such role"


def _against_wheel(sets: list[PatchSet], wheel: str, as_json: bool) -> int:
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise BadInput(f"cannot read wheel {wheel}: {exc}", "give the path of a .whl file") from None
    with archive:
        try:
            return _check_wheel(sets, wheel, archive, as_json)
        except (
            zipfile.BadZipFile,
            zlib.error,
            EOFError,
        ) as exc:  # a member fails its CRC: a damaged download
            raise BadInput(f"the wheel {wheel} is damaged: {exc}", "download the wheel again") from None


def _check_wheel(sets: list[PatchSet], wheel: str, archive: zipfile.ZipFile, as_json: bool) -> int:
    names = set(archive.namelist())
    metadata = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if not metadata:
        raise BadInput(
            f"{wheel} has no .dist-info/METADATA; it is not a wheel", "give the path of a .whl file"
        )
    fields = metadata_fields(archive.read(metadata[0]).decode("utf-8", "replace").splitlines())
    package, version = fields.get("Name", "?"), fields.get("Version", "?")
    problems = [_misfit(m, f"wheel {wheel}") for m in stacks.misfits(sets, package, version, None)]
    tops = {n.split("/", 1)[0] for n in names if "/" in n}  # the wheel's top-level directories
    stacks.refuse_unwritable(package, tops, {n for n in names if "/" not in n}, sets, force=False)
    files = {p: archive.read(p) if p in names else None for ps in sets for p in ps.paths}
    reports = stacks.build_files(sets, files, {}, (), trial_of=sets)
    clashes = patching.shape_clashes([p for p, data in files.items() if data is not None], names)
    if clashes:  # as a target's check finds them (transaction.obstacles): apply would refuse
        problems.append(
            f"{len(clashes)} file(s) cannot be put in place, so apply would refuse: "
            + "; ".join(f"{path} {why}" for path, why in clashes.items())
        )
    notes = [
        f"{ps.ident}: role file(s) {', '.join(r for r, _ in ps.files)} not checked (not in a wheel)"
        for ps in sets
        if ps.files
    ]
    return _report(
        sets[-1].ident, f"wheel {wheel} ({package} {version})", list(reports), problems, as_json, notes
    )


def _report(
    ident: str,
    against: str,
    reports: list[stacks.FileCheck],
    problems: list[str],
    as_json: bool,
    notes: Sequence[str] = (),
) -> int:
    ok = all(r.ok for r in reports) and not problems
    if as_json:
        emit_json(
            {
                "patchset": ident,
                "against": against,
                "applies": ok,
                "files": [_as_dict(r) for r in reports],
                "problems": problems,
                "notes": list(notes),
            }
        )
        return 0 if ok else 1
    _say(f"checking {ident} against {against}")
    for r in reports:
        if r.ok:
            moved = [h.offset for h in r.hunks if h.offset]
            how = (
                "applies cleanly"
                if not moved
                else "applies at an offset: "
                + ", ".join(f"{h.header} {_lines(h.offset)}" for h in r.hunks if h.offset)
            )
            _say(f"  ok    {r.path}  {how}")
            continue
        _say(f"  FAIL  {r.path}  ({r.patchset} {r.origin})")
        for h in r.hunks:
            if h.offset is None:
                _say(f"        {h.header}: {h.problem}")
                _show_lines(h)
            elif h.offset:
                _say(f"        {h.header}: applies {_lines(h.offset)}")
    for p in problems:
        _say(f"  problem: {p}")
    for n in notes:
        _say(f"  note: {n}")
    failed = sum(not r.ok for r in reports)
    _say(
        f"{ident}: "
        + ("applies" if ok else f"does not apply ({failed} file(s) fail, {len(problems)} problem(s))")
    )
    return 0 if ok else 1


def _as_dict(r: stacks.FileCheck) -> dict[str, Any]:
    return {
        "patchset": r.patchset,
        "patch": r.origin,
        "path": r.path,
        "applies": r.ok,
        "hunks": [
            {
                "header": h.header,
                "offset": h.offset,
                "problem": h.problem,
                "expected": list(h.expected),
                "found": list(h.found),
                "found_at": h.found_at,
            }
            for h in r.hunks
        ],
    }


def _lines(offset: int) -> str:
    return f"{abs(offset)} line(s) {'later' if offset > 0 else 'earlier'}"


def _show_lines(h: patching.HunkCheck) -> None:
    if not h.expected and not h.found:
        return
    _say(f"          expected (patch)  |  found at line {h.found_at}")
    for i in range(min(max(len(h.expected), len(h.found)), _SHOWN)):
        want = h.expected[i].rstrip("\n") if i < len(h.expected) else "<none>"
        got = h.found[i].rstrip("\n") if i < len(h.found) else "<end of file>"
        mark = " " if want == got else "!"
        _say(f"        {mark} {want!r}")
        if want != got:
            _say(f"        > {got!r}")
    if max(len(h.expected), len(h.found)) > _SHOWN:
        _say(f"          … {max(len(h.expected), len(h.found)) - _SHOWN} more line(s)")


def _say(text: str) -> None:
    """One line of the report: paths, hunk headers and problems come from the patch set and the
    target, so their control characters are escaped (printable.one_line), never sent to the terminal."""
    print(one_line(text))
