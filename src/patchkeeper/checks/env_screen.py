"""The environment fingerprint in one screen (`patchkeeper env`), and the import context of its native part."""

from __future__ import annotations

import posixpath
from typing import Any

from .env_gpu import gpu_health, gpu_text
from .environment import interp_text


def unresolved(fp: dict[str, Any]) -> dict[str, list[str]]:
    """object -> its sonames the loader would not find."""
    return {
        p: [so for so, r in (o.get("resolved") or {}).items() if r is None]
        for p, o in sorted((fp.get("native") or {}).items())
        if any(r is None for r in (o.get("resolved") or {}).values())
    }


def import_context(fp: dict[str, Any]) -> dict[str, dict[str, str | None]]:
    """object -> {soname: the library it resolves against in the import context, or None} for each
    soname the loader would not find for the object alone. In the process that imports the object,
    the libraries of the packages imported before it are loaded already (torch/lib's, for every
    extension built against torch), and a loaded library satisfies a soname of the same name: a
    shared object of the site dirs named as the soname is taken as that, when it loads itself
    (its own sonames resolve, alone or so, found by going over the objects until nothing changes)."""
    native = fp.get("native") or {}
    missing = unresolved(fp)
    by_name: dict[str, list[str]] = {}
    for path in native:
        by_name.setdefault(posixpath.basename(path), []).append(path)
    loads = {p for p in native if p not in missing}
    changed = True
    while changed:
        changed = False
        for path, names in missing.items():
            if path not in loads and all(any(q in loads for q in by_name.get(so, ())) for so in names):
                loads.add(path)
                changed = True
    return {
        path: {so: next((q for q in by_name.get(so, ()) if q in loads), None) for so in names}
        for path, names in missing.items()
    }


def screen(name: str, fp: dict[str, Any], shown: int = 8) -> list[str]:
    """The fingerprint in one screen of text."""
    where = fp.get("where") or {}
    dists = fp.get("distributions") or {}
    bad = {k: d for k, d in dists.items() if d.get("differ") or d.get("note")}
    managed = [d for d in dists.values() if d.get("managed")]
    unread = [d for d in dists.values() if d.get("checked") == "identity"]  # a change's: files not read
    lines = [
        f"target {name} on {where.get('host', '?')}: {where.get('python', '?')}",
        f"interpreter  {interp_text(fp)}",
        f"system       {(fp.get('system') or {}).get('os')}, kernel {(fp.get('system') or {}).get('kernel')}",
        f"gpu          {gpu_text(fp.get('gpu'))}",
    ]
    lines += [f"  {line}" for line in gpu_health(fp.get("gpu"))]
    xid = (fp.get("gpu") or {}).get("xid")
    if xid:
        lines.append(f"             {len(xid)} recent Xid line(s) in the kernel log; last: {xid[-1]}")
    lines.append(
        f"distributions {len(dists)}: {len(dists) - len(bad) - len(managed) - len(unread)} clean against their RECORD"
        + (
            f", {len(unread)} told by their RECORD's identity only (kept by a change; `patchkeeper audit` "
            "reads their files)"
            if unread
            else ""
        )
        + "".join(f", {d['name']} {d['version']} managed (its files: patchkeeper status)" for d in managed)
    )
    for d in list(bad.values())[:shown]:
        files = [p for p, _ in d.get("differ") or []]
        what = (
            f"{len(files)} file(s) differ from RECORD: "
            + ", ".join(files[:4])
            + (" …" if len(files) > 4 else "")
            if files
            else d.get("note", "")
        )
        lines.append(f"  {d['name']} {d['version']}: {what}")
    if len(bad) > shown:
        lines.append(f"  … and {len(bad) - shown} more (--json lists all)")
    native = fp.get("native") or {}
    context = import_context(fp)
    missing = {
        p: [so for so, via in found.items() if via is None]
        for p, found in context.items()
        if None in found.values()
    }
    satisfied = {p: found for p, found in context.items() if p not in missing}
    sonames = sum(len(v) for v in missing.values())
    lines.append(
        f"native       {len(native)} shared object(s); {len(context)} with unresolved sonames alone, "
        f"{len(missing)} in the import context too ({sonames} soname(s) no library would satisfy)"
    )
    for path, names in list(missing.items())[:shown]:
        lines.append(f"  {path}: " + ", ".join(names[:4]) + (" …" if len(names) > 4 else ""))
    if len(missing) > shown:
        lines.append(f"  … and {len(missing) - shown} more (--json lists all)")
    if satisfied:
        path, found = next(iter(satisfied.items()))
        so, via = next(iter(found.items()))
        lines.append(
            f"  {len(satisfied)} load once the libraries they need are loaded by an import before them "
            f"(e.g. {path}: {so} from {via})"
        )
    startup = fp.get("startup")
    if startup is not None:
        kinds = [key.split(" ")[0] for key in startup]
        lines.append(
            f"startup      {kinds.count('pth')} .pth file(s) with import lines, "
            f"{kinds.count('sitecustomize') + kinds.count('usercustomize')} site hook(s), "
            f"{kinds.count('entry')} plugin entry point(s)"
        )
        for key in list(startup)[:shown]:
            lines.append(f"  {key}")
    return lines
