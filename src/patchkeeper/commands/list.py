"""`patchkeeper list`: the workspace's patch sets, versions, and the package version each fits."""

from __future__ import annotations

import shutil
import textwrap

from ..patchset import patchset, saving
from ..workspace import Workspace
from . import emit_json


def list_patchsets(ws: Workspace, as_json: bool) -> int:
    sets = [patchset.load(ws.patchsets_dir, n) for n in patchset.names(ws.patchsets_dir)]
    kept = {ps.name: saving.kept(ws.patchsets_dir, ps.name) for ps in sets}
    if as_json:
        emit_json([{**ps.summary(), "kept": kept[ps.name]} for ps in sets])
        return 0
    if not sets:
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
    if cut:
        print("(a description in full: patchkeeper show NAME)")
    return 0
