"""The report of `patchkeeper port`: one JSON-ready document, and the screen printed from it."""

from __future__ import annotations

from typing import Any

from ..patchset import port as porting
from ..patchset.patchset import PatchSet

OUTCOMES = (
    porting.CLEAN,
    porting.MERGED,
    porting.UPSTREAM,
    porting.CONFLICT,
    porting.COLLISION,
    porting.GONE,
)


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
    render_end(doc)


def render_end(doc: dict[str, Any]) -> None:
    """The end of the report (of a port and of `port --continue`): its notes, then what was written or
    what to do next."""
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
