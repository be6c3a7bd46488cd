"""`patchkeeper list`: the workspace's patch sets, versions, and the package version each fits."""

from __future__ import annotations

import shutil
import sys
import textwrap

from ..errors import PatchkeeperError
from ..patchset import patchset, saving
from ..printable import one_line
from ..workspace import Workspace
from . import emit_json


def list_patchsets(ws: Workspace, as_json: bool) -> int:
    """Every patch set; one that cannot be read is listed with its error (exit 2), the others still."""
    sets: list[patchset.PatchSet] = []
    broken: dict[str, PatchkeeperError] = {}
    for name in patchset.names(ws.patchsets_dir):
        try:
            sets.append(patchset.load(ws.patchsets_dir, name))
        except PatchkeeperError as exc:
            broken[name] = exc
    kept = {ps.name: saving.kept(ws.patchsets_dir, ps.name) for ps in sets}
    code = 2 if broken else 0
    if as_json:
        emit_json(
            [{**ps.summary(), "kept": kept[ps.name]} for ps in sets]
            + [{"name": n, "error": {"message": e.message, "hint": e.hint}} for n, e in broken.items()]
        )
        return code
    for error in broken.values():
        sys.stderr.write(f"patchkeeper: error: {one_line(error.message)}\n  hint: {one_line(error.hint)}\n")
    if not sets and not broken:
        print(f"no patch sets in {ws.patchsets_dir}")
    width = shutil.get_terminal_size((100, 24)).columns  # $COLUMNS, the terminal's, else 100
    cut = False
    for ps in sets:
        what = f"{len(ps.paths)} file(s)" + (f" + {', '.join(r for r, _ in ps.files)}" if ps.files else "")
        print(f"{ps.ident:16} {ps.package}{ps.package_version:10} group={ps.group or '-':18} {what}")
        text = textwrap.shorten(ps.description, max(width - 4, 20), placeholder=" …")
        cut = cut or text != " ".join(ps.description.split())
        if text:
            print(f"    {text}")
        if kept[ps.name]:
            print(
                f"    kept: {', '.join(f'{ps.name}@{v}' for v in kept[ps.name])} "
                f"(in patchsets/{saving.HISTORY}/{ps.name}/)"
            )
    for name in broken:
        print(f"{name:16} BROKEN: cannot be read (the error above); the other patch sets are listed")
    if cut:
        print("(a description in full: patchkeeper show NAME)")
    return code
