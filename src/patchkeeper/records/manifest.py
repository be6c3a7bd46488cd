"""A file's entry (digest, size, mode) and the manifest of a code state, with its text form."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from ..host import manifest_text
from ..host.contract import ROLE_PREFIX as ROLE_PREFIX, Row, Rows


@dataclass(frozen=True)
class Entry:
    """A file's recorded content: digest, size and mode."""

    digest: str
    size: int
    mode: int

    @classmethod
    def of(cls, row: Row) -> Entry:
        """The entry of an agent's row (digest, size, mode)."""
        return cls(*row)


class Manifest(Mapping[str, Entry]):
    """An immutable map of manifest key to Entry, sorted by key, with a text form
    (host/manifest_text.py) that diffs well in git.

    A manifest made from an agent's rows keeps them and makes each Entry only when asked, so
    that comparing two such manifests (`differences`) costs one dict comparison when they agree."""

    def __init__(self, entries: Mapping[str, Entry]) -> None:
        self._entries: dict[str, Entry] | None = dict(sorted(entries.items()))
        self._rows: Rows | None = None

    def _all(self) -> dict[str, Entry]:
        if self._entries is None:
            self._entries = {k: Entry.of(v) for k, v in (self._rows or {}).items()}
        return self._entries

    def __getitem__(self, key: str) -> Entry:
        if self._entries is None:
            return Entry.of((self._rows or {})[key])
        return self._entries[key]

    def __contains__(self, key: object) -> bool:
        return key in (self._entries if self._entries is not None else (self._rows or {}))

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries if self._entries is not None else (self._rows or {}))

    def __len__(self) -> int:
        return len(self._entries if self._entries is not None else (self._rows or {}))

    def replace(self, changes: Mapping[str, Entry | None]) -> Manifest:
        if self._entries is None:  # rows stay rows
            rows = dict(self._rows or {})
            for key, change in changes.items():
                if change is None:
                    rows.pop(key, None)
                else:
                    rows[key] = (change.digest, change.size, change.mode)
            return Manifest.from_scan(rows)
        entries = dict(self._all())
        for key, entry in changes.items():
            if entry is None:
                entries.pop(key, None)
            else:
                entries[key] = entry
        return Manifest(entries)

    def rows(self) -> Rows:
        """key -> (digest, size, mode) of every entry (the agent's rows it was made from, if it was)."""
        if self._entries is None:
            return self._rows or {}
        return {k: (e.digest, e.size, e.mode) for k, e in self._entries.items()}

    def to_text(self) -> bytes:
        """The text form (host/manifest_text.py, its one writer and reader)."""
        if self._entries is None:
            return manifest_text.write_rows(self._rows or {})
        return manifest_text.write(self._entries)

    @classmethod
    def from_scan(cls, rows: Mapping[str, Row]) -> Manifest:
        """From an agent's rows (key -> (digest, size, mode)); each Entry is made when first read."""
        manifest = cls.__new__(cls)
        manifest._entries = None
        manifest._rows = dict(sorted(rows.items()))
        return manifest


def differences(recorded: Mapping[str, Entry], actual: Mapping[str, Entry]) -> dict[str, str]:
    """key -> changed | added | removed | mode, for every key whose entry differs."""
    keys: Iterable[str] = set(recorded) | set(actual)
    old_rows, new_rows = _rows_of(recorded), _rows_of(actual)
    if old_rows is not None and new_rows is not None:  # equal rows make equal entries: compare only the rest
        if old_rows == new_rows:
            return {}
        keys = [k for k in keys if old_rows.get(k) != new_rows.get(k)]
    out = {}
    for key in sorted(keys):
        old, new = recorded.get(key), actual.get(key)
        if old != new:
            out[key] = change_kind(
                None if old is None else (old.digest, old.size, old.mode),
                None if new is None else (new.digest, new.size, new.mode),
            )
    return out


def change_kind(old: Row | None, new: Row | None) -> str:
    """added | removed | mode | changed, of one key's recorded and actual rows (which differ)."""
    if old is None:
        return "added"
    if new is None:
        return "removed"
    return "mode" if old[:2] == new[:2] else "changed"


def _rows_of(manifest: Mapping[str, Entry]) -> Rows | None:
    return manifest._rows if isinstance(manifest, Manifest) else None
