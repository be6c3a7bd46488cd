"""The parsed ledger of a target remembered between commands: each entry by file name, with its file's identity.

Every command reads its target's ledger, one write-once JSON file per entry. Kept here, per target,
is each entry already parsed (as marshal data) under its file name, with the stat identity (size,
mtime_ns, ctime_ns, inode, device) the agent found for that file. The agent is sent these identities and
answers with the bytes of the files whose identity differs (written, edited in place, replaced) and
the names that are gone: an unchanged ledger costs a listing and a stat per entry on the target, and
no entry's bytes read or carried over the wire. The index is never believed over the files: an
identity is remembered only when the agent found the file older than the clock's granularity (the
racily-clean rule of statcache.StatCache), so an entry rewritten within the same tick is read again; any
edit moves the file's ctime. An index that cannot be read (absent, damaged, another format or another
Python) is rebuilt, and one that cannot be written only costs time.

It lives in ~/.cache/patchkeeper/ledgers/, one file per target: an SSH target's ledger is on its host,
and an index beside it would have to cross the very wire it saves.
"""

from __future__ import annotations

import marshal
import posixpath
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..host.disk import hash_bytes
from ..host.statcache import load_cache, save_cache, user_cache
from ..targets import Target

STAMP = (
    "pk-ledger-index",
    5,
    tuple(sys.version_info[:2]),
)  # 4: entries checked (shapes.py) before kept; 5: seq bounded
Identity = tuple[int, int, int, int, int]  # size, mtime_ns, ctime_ns, inode, device (statcache.identity)
CREATED_DIRS = "created_dirs"  # key of a ledger entry's extra: the directories its transaction created


Ref = tuple["str | None", "str | None", "str | None"]  # a patch set's name, version, digest
Facts = tuple[str, str, "str | None", tuple[Ref, ...], bool, tuple[str, ...]]


def file_name(seq: int, entry_id: str) -> str:
    """The name of a ledger entry's file (and of its copy in the workspace)."""
    return f"{seq:06d}-{entry_id}.json"


def facts_of(doc: dict[str, Any]) -> Facts:
    """What the loops over a whole ledger ask of each entry, so they build none they do not need:
    its kind, its state's id and name, the (name, version, digest) of the patch sets it added,
    whether it changed files outside the package (`extra.env`), the directories it created."""
    extra = doc.get("extra")
    extra = extra if isinstance(extra, dict) else {}
    after = doc["after"]
    return (
        doc["kind"],
        after["id"],
        after.get("name"),
        tuple(
            (p.get("name"), p.get("version"), p.get("digest"))
            for p in doc.get("patchsets") or ()
            if isinstance(p, dict)
        ),
        bool(extra.get("env")),
        tuple(extra.get(CREATED_DIRS) or ()),
    )


@dataclass(frozen=True)
class Slot:
    """One entry of the ledger as read: its file name, seq, id and facts (facts_of), and its parsed
    document, as marshal data (decoded when the entry is first needed) or as the dict just parsed."""

    name: str
    seq: int
    id: str
    facts: Facts
    doc: bytes | dict[str, Any]

    @property
    def kind(self) -> str:
        return self.facts[0]

    @property
    def after(self) -> str:
        """The id of the state the entry left."""
        return self.facts[1]

    @property
    def after_name(self) -> str | None:
        return self.facts[2]

    @property
    def refs(self) -> tuple[Ref, ...]:
        return self.facts[3]

    @property
    def env(self) -> bool:
        return self.facts[4]

    @property
    def created_dirs(self) -> tuple[str, ...]:
        return self.facts[5]


@dataclass(frozen=True)
class Read:
    """A ledger read through the index: its slots in seq order, and how many files were read."""

    slots: tuple[Slot, ...]
    files_read: int
    untrusted: dict[str, str]  # entry files not read, and why (another user's, writable by others)


def path_of(target: Target) -> str:
    """The index file of a target: named by the target, its host and its state dir."""
    key = repr((target.name, target.info.host, target.info.state_dir)).encode()
    return user_cache(posixpath.join("ledgers", hash_bytes(key).partition(":")[2][:24] + ".marshal"))


def read(
    target: Target, directory: str, parse: Callable[[str, bytes], dict[str, Any]], indexed: bool = True
) -> Read:
    """The entries of the ledger in `directory` of `target`: the remembered ones whose files kept their
    identity, the others read again and parsed by `parse` (which raises on a damaged entry); without
    `indexed`, every one read and parsed (the index neither read nor written)."""
    path = path_of(target)
    known: dict[str, tuple[Identity, int, str, Facts, bytes]] = (
        (load_cache(path, STAMP) or {}) if indexed else {}
    )
    answer = target.agent.read_changed(directory, ".json", {name: kept[0] for name, kept in known.items()})
    kept = {
        name: v
        for name, v in known.items()
        if name not in answer.files and name not in answer.gone and name not in answer.untrusted
    }
    slots = [Slot(name, seq, entry_id, facts, blob) for name, (_, seq, entry_id, facts, blob) in kept.items()]
    grew = False
    for name, data in answer.files.items():
        doc = parse(name, data)
        facts = facts_of(doc)
        slots.append(Slot(name, doc["seq"], doc["id"], facts, doc))
        identity = answer.identities.get(name)
        if identity is not None:
            kept[name] = (identity, doc["seq"], doc["id"], facts, marshal.dumps(doc))
            grew = True
    if indexed and (grew or len(kept) != len(known)):
        save_cache(path, STAMP, kept)
    slots.sort(key=lambda slot: slot.seq)
    return Read(tuple(slots), len(answer.files), answer.untrusted)
