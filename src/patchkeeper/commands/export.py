"""`patchkeeper export NAME`: the patch set as one patch for git apply / patch -p1, on stdout."""

from __future__ import annotations

import sys

from .. import exchange, patchset
from ..workspace import Workspace


def export(ws: Workspace, name: str) -> int:
    ps = patchset.load(ws.patchsets_dir, name)
    data = exchange.export(ws.patchsets_dir / name, ps.ident, ps.digest)
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0
