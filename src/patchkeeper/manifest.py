"""A file's entry (digest, size, mode) and the manifest of a code state, with its text form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping

from .host import manifest_text
from .host.contract import Row, Rows
ROLE_PREFIX = "@"  # manifest keys of role files (the unit file...) are "@unit"; the rest are paths


@dataclass(frozen=True)
class Entry:
    digest: str
    size: int
    mode: int

    @classmethod
    def of(cls, row: Row) -> "Entry":
        """The entry of an agent's row (digest, size, mode)."""
        return cls(*row)


class Manifest(Mapping[str, Entry]):
    """An immutable map of manifest key to Entry, sorted by key, with a text form
    (host/manifest_text.py) that diffs well in git."""

    def __init__(self, entries: Mapping[str, Entry]) -> None:
        self._entries = dict(sorted(entries.items()))

    def __getitem__(self, key: str) -> Entry:
        return self._entries[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def replace(self, changes: Mapping[str, Entry | None]) -> "Manifest":
        entries = dict(self._entries)
        for key, entry in changes.items():
            if entry is None:
                entries.pop(key, None)
            else:
                entries[key] = entry
        return Manifest(entries)

    def to_text(self) -> bytes:
        """The text form (host/manifest_text.py, its one writer and reader)."""
        return manifest_text.write(self._entries)

    @classmethod
    def from_text(cls, data: bytes) -> "Manifest":
        return cls({key: Entry(*row) for key, row in manifest_text.parse(data).items()})

    @classmethod
    def from_scan(cls, rows: Rows) -> "Manifest":
        return cls({k: Entry.of(v) for k, v in rows.items()})


def differences(recorded: Mapping[str, Entry], actual: Mapping[str, Entry]) -> dict[str, str]:
    """key -> changed | added | removed | mode, for every key whose entry differs."""
    out = {}
    for key in sorted(set(recorded) | set(actual)):
        old, new = recorded.get(key), actual.get(key)
        if old == new:
            continue
        if old is None:
            out[key] = "added"
        elif new is None:
            out[key] = "removed"
        elif old.digest == new.digest and old.size == new.size:
            out[key] = "mode"
        else:
            out[key] = "changed"
    return out
