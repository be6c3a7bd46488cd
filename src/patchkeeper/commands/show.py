"""`patchkeeper show NAME`: a patch set's metadata, files, diffstat, and where it is applied."""

from __future__ import annotations

import json
import re
from typing import Any

from ..checks import units
from ..patchset import patchset, saving, templates
from ..printable import one_line
from ..workspace import Workspace
from . import emit_json


def applied_on(ws: Workspace, name: str) -> list[dict[str, Any]]:
    """Targets whose last mirrored state (snapshots/<target>/state.json) has `name` in its stack."""
    out = []
    for path in sorted(ws.snapshots_dir.glob("*/state.json")):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for ref in state.get("stack", ()):
            if ref.get("name") == name:
                out.append(
                    {
                        "target": state.get("target", path.parent.name),
                        "version": ref.get("version"),
                        "digest": ref.get("digest"),
                        "state": state.get("id"),
                    }
                )
    return out


def _exec_starts(ps: patchset.PatchSet) -> list[str]:
    """The ExecStart= each role file sets (placeholders filled with the [vars] defaults where they
    have one, shown as {{ name }} where not): what the unit runs once it is applied, whatever else the
    host's unit says."""

    defaults = dict(ps.defaults)
    out = []
    for role, data in ps.files:
        filled = (
            templates.PLACEHOLDER.sub(  # a stand-in word for a variable without a default, named back below
                lambda m: defaults.get(m.group(1).decode(), f"/__{m.group(1).decode()}__").encode(), data
            )
        )
        command = units.effective([(role, filled.decode("utf-8", "replace"))])
        if command is not None and command.source:
            text = re.sub(r"/__([a-z_][a-z0-9_]*)__", r"{{ \1 }}", command.text())
            out.append(f"ExecStart (@{role}, with the defaults): {text}")
            if command.refused:
                out.append(f"  warning: {command.refused}")
    return out


def show(ws: Workspace, name: str, as_json: bool) -> int:
    ps = patchset.load(ws.patchsets_dir, name)
    directory = ws.patchsets_dir / name
    stats: list[dict[str, Any]] = []
    for origin, fps in ps.patches:
        for fp in fps:
            stats.append(
                {
                    "patch": origin,
                    "path": fp.path,
                    "added": fp.added,
                    "removed": fp.removed,
                    "kind": fp.kind,
                    "mode": f"{fp.new_mode:o}" if fp.new_mode is not None else None,
                    **({"source": fp.source} if fp.source is not None else {}),
                    **({"binary": True} if fp.binary is not None else {}),
                }
            )
    where = applied_on(ws, name)
    for w in where:
        w["current"] = w["digest"] == ps.digest
    kept = saving.kept(ws.patchsets_dir, name)
    if as_json:
        emit_json(
            {
                **ps.summary(),
                "diffstat": stats,
                "applied_on": where,
                "exec_start": _exec_starts(ps),
                "kept": kept,
            }
        )
        return 0
    _say(f"{ps.ident}  {ps.description}")
    _say(f"  package   {ps.package}{ps.package_version or ' (any version)'}")
    _say(f"  group     {ps.group or '-'}")
    _say(f"  requires  {', '.join(ps.requires) or '-'}")
    _say(f"  digest    {ps.digest}")
    if kept:
        _say(
            f"  kept      {', '.join(f'{name}@{v}' for v in kept)}: the versions it replaced, highest first, "
            f"in patchsets/{saving.HISTORY}/{name}/VERSION/"
        )
    _say(f"  files     {', '.join(sorted(p.name for p in directory.rglob('*') if p.is_file()))}")
    for role, data in ps.files:
        _say(
            f"  role      @{role}: {len(data)} bytes"
            + (" (a template)" if templates.names(data) else "")
            + (
                " - a systemd drop-in beside the target's unit (<unit>.d/50-patchkeeper.conf unless the target "
                "maps dropin)"
                if role == "dropin"
                else ""
            )
            + (
                " - the whole unit (the old style: the host's own unit lines are replaced)"
                if role == "unit"
                else ""
            )
        )
    for line in _exec_starts(ps):
        _say(f"  {line}")
    defaults, types = dict(ps.defaults), dict(ps.types)
    for var in ps.variables:
        kind = types[var].describe() if var in types else "text"
        _say(
            f"  variable  {var} ({kind}) = {defaults[var]!r}"
            if var in defaults
            else f"  variable  {var} ({kind}): the target's own interpreter unless [targets.NAME.vars] sets it"
            if var == "python"
            else f"  variable  {var} ({kind}): no default, set it in [targets.NAME.vars]"
        )
    width = max((len(s["path"]) for s in stats), default=0)
    for s in stats:
        tag = {
            "add": " (new)",
            "delete": " (deleted)",
            "rename": f" (renamed from {s.get('source')})",
            "copy": f" (copied from {s.get('source')})",
        }.get(s["kind"], "") + (" (binary)" if s.get("binary") else "")
        mode_text = f" mode {s['mode']}" if s["mode"] and s["kind"] in ("modify", "rename", "copy") else ""
        _say(f"  {s['path']:{width}}  +{s['added']:<4} -{s['removed']:<4}{tag}{mode_text}")
    _say(f"  {len(stats)} file(s), +{sum(s['added'] for s in stats)} -{sum(s['removed'] for s in stats)}")
    if not where:
        _say("not applied on any target recorded in snapshots/")
    for w in where:
        note = "" if w["current"] else " (other content than the workspace's now)"
        _say(f"applied on {w['target']}: {name}@{w['version']} in state {w['state']}{note}")
    return 0


def _say(text: str) -> None:
    """One line of the listing: names of files and paths come from the patch set, so their control
    characters are escaped (printable.one_line), never sent to the terminal."""
    print(one_line(text))
