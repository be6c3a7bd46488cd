"""Where a workspace keeps its patch sets: patchsets/<name>/patchset.toml, and the names found there.

Apart from the reader (patchset.py) so that the CLI's options, completion and saves name patch sets
without loading the patch reader (parsing, patching, templates)."""

from __future__ import annotations

from pathlib import Path

MANIFEST = "patchset.toml"


def names(root: Path) -> list[str]:
    """The patch sets of `root` (a workspace's patchsets/): each directory holding a MANIFEST."""
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / MANIFEST).is_file() and not p.name.startswith("."))
