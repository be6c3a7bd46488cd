"""The workspace's TOML and unified diffs parsed, remembered under the digest of their text.

A parse is a function of the text alone, so what is kept under the text's digest is the parse of
that very text and cannot go stale: a changed file has another digest. Only a parse that succeeded
and gives plain data is kept (a TOML document with dates is parsed every time); an error is raised
by the parser itself, every time. Every command reads patchkeeper.toml and the verbs that apply read
patch sets: with the parses remembered they load neither tomllib nor unidiff. The tables live in
~/.cache/patchkeeper/parsed-*.marshal, stamped with this Python's version; a table that cannot be
read or written only costs time.
"""

from __future__ import annotations

import marshal
import sys
from typing import TYPE_CHECKING, Any

from .host.disk import hash_bytes, load_cache, save_cache, user_cache

if TYPE_CHECKING:
    from .patching import FilePatch

STAMP = ("pk-parsed", 1, tuple(sys.version_info[:2]))
KEEP = 256  # entries per table: the oldest go first
_tables: dict[str, dict[str, bytes]] = {}


def path(kind: str) -> str:
    return user_cache(f"parsed-{kind}.marshal")


def _table(kind: str) -> dict[str, bytes]:
    if kind not in _tables:
        # none yet, damaged, or another Python's: parsed as they come
        _tables[kind] = load_cache(path(kind), STAMP) or {}
    return _tables[kind]


def _recall(kind: str, key: str) -> Any:
    blob = _table(kind).get(key)
    if blob is None:
        return None
    try:
        return marshal.loads(blob)  # a fresh copy each time: a caller may change what it was given
    except (ValueError, EOFError, TypeError):
        return None


def _keep(kind: str, key: str, value: Any) -> None:
    try:
        blob = marshal.dumps(value)
    except ValueError:  # not plain data (a TOML date): parsed every time
        return
    table = _table(kind)
    table[key] = blob
    while len(table) > KEEP:
        del table[next(iter(table))]
    save_cache(path(kind), STAMP, table, 0o600)


def toml(text: str) -> dict[str, Any]:
    """tomllib.loads(text); its TOMLDecodeError (a ValueError) as it raises it."""
    key = hash_bytes(text.encode("utf-8", "surrogatepass"))
    doc = _recall("toml", key)
    if isinstance(doc, dict):
        return doc
    import tomllib

    doc = tomllib.loads(text)
    _keep("toml", key, doc)
    return doc


def diff(text: str, origin: str) -> tuple[FilePatch, ...]:
    """patching.parse(text, origin) (`origin` names the file in its errors, and only there)."""
    from .patching import FilePatch, Hunk, parse

    key = hash_bytes(text.encode("utf-8", "surrogateescape"))
    plain = _recall("diff", key)
    if isinstance(plain, tuple):
        return tuple(FilePatch(p, kind, mode, tuple(Hunk(*h) for h in hunks)) for p, kind, mode, hunks in plain)
    parsed = parse(text, origin)
    _keep("diff", key, tuple((fp.path, fp.kind, fp.new_mode,
                              tuple((h.header, h.source_start, h.old_lines, h.new_lines) for h in fp.hunks))
                             for fp in parsed))
    return parsed
