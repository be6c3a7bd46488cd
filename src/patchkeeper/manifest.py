"""A file's entry (digest, size, mode) and the manifest of a code state, with its text form."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterator, Mapping

_AMBIGUOUS = re.compile(r'^"|[\x00-\x1f\x7f\\]')
_AMBIGUOUS_ANYWHERE = re.compile(r'(?:^|\x1f)"|[\x00-\x1e\x7f\\]')  # over keys joined by \x1f
ROLE_PREFIX = "@"  # manifest keys of role files (the unit file...) are "@unit"; the rest are paths


@dataclass(frozen=True)
class Entry:
    digest: str
    size: int
    mode: int

    @classmethod
    def of(cls, row: list) -> "Entry":
        digest, size, mode = row
        return cls(digest, int(size), int(mode))


class Manifest(Mapping[str, Entry]):
    """An immutable map of manifest key to Entry, serialized one sorted line per file:
    `<mode octal> <size> <digest> <json path>`, so that git diffs of manifests read well."""

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
        plain = not _AMBIGUOUS_ANYWHERE.search("\x1f".join(self._entries))  # one search for the common case
        lines = [f"{e.mode:o} {e.size} {e.digest} {k if plain else _quote(k)}\n" for k, e in self._entries.items()]
        return "".join(lines).encode("utf-8", "surrogateescape")

    @classmethod
    def from_text(cls, data: bytes) -> "Manifest":
        from .host.disk import manifest_rows

        return cls({key: Entry(*row) for key, row in manifest_rows(data).items()})

    @classmethod
    def from_scan(cls, rows: Mapping[str, list]) -> "Manifest":
        return cls({k: Entry.of(v) for k, v in rows.items()})


def _quote(key: str) -> str:
    """Paths are written bare unless a quote, backslash or control character makes them ambiguous."""
    return json.dumps(key) if _AMBIGUOUS.search(key) else key


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
