"""`patchkeeper export NAME`: the patch set as one patch for git apply / patch -p1, on stdout."""

from __future__ import annotations

import sys

from ..patchset import exchange, patchset
from ..workspace import Workspace
from . import emit_json, text_or_base64


def export(ws: Workspace, name: str, as_json: bool = False) -> int:
    """Print the patch; with --json: {"patchset", "digest", "patch"} (or "patch_base64" when it is not
    UTF-8 text)."""
    ps = patchset.load(ws.patchsets_dir, name)
    data = exchange.export(ws.patchsets_dir / name, ps.ident, ps.digest, variable_notes(ps))
    if as_json:
        emit_json({"patchset": ps.ident, "digest": ps.digest, **text_or_base64("patch", data)})
        return 0
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


def variable_notes(ps: patchset.PatchSet) -> tuple[str, ...]:
    """Which variables the role files use and their defaults (the export carries the templates
    unrendered), and where a drop-in goes."""
    notes = []
    if any(role == "dropin" for role, _ in ps.files):
        notes.append(
            "role dropin: a systemd drop-in, written beside the target's unit as "
            "<unit>.d/50-patchkeeper.conf (or [targets.NAME.files] dropin); it clears ExecStart= and sets "
            "its own, the host's other unit lines stay"
        )
    if not ps.variables:
        return tuple(notes)
    defaults = dict(ps.defaults)
    listed = ", ".join(
        f"{n} = {defaults[n]!r}"
        if n in defaults
        else f"{n} (default: the target's interpreter)"
        if n == "python"
        else f"{n} (no default)"
        for n in ps.variables
    )
    return (
        *notes,
        f"variables: the role files are templates using {listed}; "
        "`patchkeeper apply` renders them with [targets.NAME.vars], then these defaults",
    )
