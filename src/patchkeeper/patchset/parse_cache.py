"""Parsed diffs remembered under the digest of their text: in this process, and in the user cache
(parsed/, marshal of plain values, at most KEEP files), so that a 35 MB diff is read by unidiff once,
by `import`, and `check`, `apply`, `show` load the parse. A parse is a function of the text alone:
nothing goes stale; errors are never kept (they name the file)."""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
from collections.abc import Callable
from typing import Any

from ..host.disk import hash_bytes
from ..host.statcache import load_cache, save_cache, user_cache
from .gitbinary import BinaryPatch
from .patching import FilePatch, Hunk

FORMAT = 1
KEEP = 16  # parses kept in the user cache, the oldest removed past them
SMALL = 64 << 10  # texts below this are parsed again rather than read from disk (it is as fast)
_MEMORY: dict[str, tuple[FilePatch, ...]] = {}


def remembered(
    text: str, origin: str, parse: Callable[[str, str], tuple[FilePatch, ...]]
) -> tuple[FilePatch, ...]:
    data = text.encode("utf-8", "surrogateescape")
    key = hash_bytes(data).partition(":")[2]
    if key in _MEMORY:
        return _MEMORY[key]
    path = user_cache(os.path.join("parsed", key + ".marshal")) if len(data) >= SMALL else None
    body = load_cache(path, _stamp()) if path else None
    found = _from_plain(body["patches"]) if body and "patches" in body else None
    if found is None:
        found = parse(text, origin)
        if path:
            save_cache(path, _stamp(), {"patches": _to_plain(found)})
            _prune(os.path.dirname(path))
    _MEMORY[key] = found
    if len(_MEMORY) > KEEP:
        del _MEMORY[next(iter(_MEMORY))]
    return found


@functools.cache
def _stamp() -> tuple[Any, ...]:
    """What a parse depends on besides the text: the reader's code (gitdiff.py, githeader.py, the
    values of patching.py and this module) and unidiff's own code, by digest, found without importing
    it (importlib.metadata would cost `email` and more on every apply)."""
    here = os.path.dirname(__file__)
    ours = [
        os.path.join(here, name) for name in ("gitdiff.py", "githeader.py", "patching.py", "parse_cache.py")
    ]
    spec = importlib.util.find_spec("unidiff")
    theirs = (
        sorted(glob.glob(os.path.join(spec.submodule_search_locations[0], "*.py")))
        if spec and spec.submodule_search_locations
        else []
    )
    code = b"".join(open(path, "rb").read() for path in ours + theirs)
    return ("parsed-diff", FORMAT, hash_bytes(code))


def _to_plain(patches: tuple[FilePatch, ...]) -> list[Any]:
    return [
        (
            fp.path,
            fp.kind,
            fp.new_mode,
            [(h.header, h.source_start, h.old_lines, h.new_lines, h.new_start, h.trailing) for h in fp.hunks],
            fp.source,
            None
            if fp.binary is None
            else (fp.binary.method, fp.binary.size, fp.binary.lines, fp.binary.old_id, fp.binary.new_id),
            fp.added,
            fp.removed,
            fp.new_if_missing,
        )
        for fp in patches
    ]


def _from_plain(rows: Any) -> tuple[FilePatch, ...] | None:
    """The file patches back, or None when the cache does not hold what _to_plain wrote."""
    try:
        return tuple(
            FilePatch(
                path,
                kind,
                mode,
                tuple(Hunk(h[0], h[1], tuple(h[2]), tuple(h[3]), h[4], h[5]) for h in hunks),
                source,
                None if binary is None else BinaryPatch(*binary),
                added,
                removed,
                new_if_missing,
            )
            for path, kind, mode, hunks, source, binary, added, removed, new_if_missing in rows
        )
    except (TypeError, ValueError, IndexError):
        return None


def _prune(directory: str) -> None:
    try:
        entries = sorted(
            (e.stat().st_mtime_ns, e.path) for e in os.scandir(directory) if e.name.endswith(".marshal")
        )
        for _, path in entries[:-KEEP]:
            os.unlink(path)
    except OSError:
        pass
