"""A pyc's code against its source's, compiled once per pair of bytes (for bytecode.py).

A pyc is compared by compiling its source, the dearest step of an audit (on the bare sglang venv,
16 of 20 s of `audit --rehash` were `compile()`). What a comparison found holds for those bytes:
the same source bytes and the same pyc bytes, under the same interpreter and optimization level,
hold the same code again. So each pyc found to hold its source's code is kept in `Compared` by the
digest of that pair (sha256 of the interpreter's magic number, the level, the source and the pyc,
as read for the comparison), one entry per pyc path; when the bytes read next time give the same
digest, the comparison is not made again. A pair that differs in one byte is compiled, so a
foreign pyc is found whatever the file's identity or header says. Kept in the target's audit/
beside the verdicts; read by `audit --rehash` too, since an entry depends on the bytes only,
never on a file's stat identity (docs/files-and-caches.md). Standard library only (shipped to hosts).
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import sys
import warnings

from .statcache import load_cache, save_cache

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs a command's start about 10 ms)
    from typing import Dict, Iterable, Optional, Union


class Compared:
    """The pairs (source bytes, pyc bytes) found to hold the same code, by the pyc's path relative
    to the site dir: its pair's digest. Read at the first comparison (an audit that makes none
    pays nothing for it); `path` None: nothing is read or kept."""

    FORMAT = ("pk-pyc-compared", 1, sys.version_info[:2], importlib.util.MAGIC_NUMBER)

    def __init__(self, path: Optional[str]) -> None:
        self.path = path
        self._known: Optional[Dict[str, bytes]] = None if path else {}
        self.made: Dict[str, bytes] = {}  # pairs compared by this run, found to hold the same code
        self.compiled = 0  # sources this run compiled

    @property
    def known(self) -> Dict[str, bytes]:
        if self._known is None:
            self._known = (load_cache(self.path, self.FORMAT) or {}) if self.path else {}
        return self._known

    def save(self, present: Optional[Iterable[str]] = None) -> None:
        """Keep the pairs this run compared with those known before; with `present` (every pyc
        path the check found), only the known pairs of the pycs still there. Nothing is written
        when nothing was read."""
        if not self.path or self._known is None:
            return
        known = self._known
        kept = dict(known) if present is None else {rel: known[rel] for rel in present if rel in known}
        if self.made or len(kept) != len(known):
            kept.update(self.made)
            save_cache(self.path, self.FORMAT, kept)


def pair_digest(source: bytes, pyc: bytes, opt: int) -> bytes:
    """What a comparison of these bytes depends on: the interpreter (its magic number), the
    optimization level, the source and the pyc (its header with it)."""
    h = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    h.update(b"%d:%d:" % (opt, len(source)))
    h.update(source)
    h.update(pyc)
    return h.digest()


def other_code(
    pyc: str, src: str, opt: int, rel: str = "", memo: Optional[Compared] = None
) -> Union[bool, str]:
    """Whether a pyc's code object is not what its source compiles to (a detail string when it
    cannot be compared at all). Code objects compare by what they run: their bytecode, constants
    (nested code included), names, line tables and flags, not the file name they were compiled
    under, which is where the pyc legitimately differs when it was compiled at another path.
    With `memo`, a pair of bytes found the same before is not compiled again."""

    with open(pyc, "rb") as f:
        pyc_bytes = f.read()
    with open(src, "rb") as f:
        source = f.read()
    digest = b""
    if memo is not None:
        digest = pair_digest(source, pyc_bytes, opt)
        if memo.known.get(rel) == digest:
            return False
    try:
        code = marshal.loads(pyc_bytes[16:])
        with warnings.catch_warnings():  # a source's SyntaxWarnings are its own, not the audit's to print
            warnings.simplefilter("ignore")
            fresh = compile(source, src, "exec", dont_inherit=True, optimize=opt)
    except (ValueError, EOFError, TypeError, SyntaxError) as exc:
        return f"cannot be compared with its source: {exc}"
    if memo is not None:
        memo.compiled += 1
    if code != fresh:
        return True
    if memo is not None:
        memo.made[rel] = digest
    return False
