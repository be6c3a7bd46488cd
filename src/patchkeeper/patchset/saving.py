"""Put a written patch set version in place as patchsets/<name>/ by a journal; keep the version it
replaces; finish an interrupted save (every command does, first).

A save, each step surviving SIGKILL, under an flock of the patchsets/ directory:
1. the new version is written whole into patchsets/.<name>.pk-new-<id>/ and synced;
2. the journal patchsets/.pk-save.json names it, and where the old version is kept — the commit
   point: from here recovery finishes the save;
3. patchsets/<name>/ is renamed to patchsets/.history/<name>/<old version>/ (kept, not deleted);
4. the new directory is renamed to patchsets/<name>/;
5. the journal is removed.
A crash before step 2 leaves only a .pk-new- directory no journal names: recovery removes it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import faults, names
from ..errors import BadInput
from ..host.disk import fsync_dir, write_atomic
from .layout import MANIFEST

JOURNAL = ".pk-save.json"
HISTORY = ".history"  # patchsets/.history/<name>/<version>/: the versions a save replaced
NEW_MARK, OLD_MARK = (
    ".pk-new-",
    ".pk-old-",
)  # .<name>.pk-new-<id>: a save's new directory (.pk-old-: before journals)


@contextmanager
def locked(root: Path) -> Iterator[None]:
    """This process alone saves into (or recovers) `root`: an flock on the patchsets/ directory itself."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # the lock goes with it


def new_dir(root: Path, name: str, tag: str) -> Path:
    """Where a save writes the new version before it is put in place."""
    return root / f".{name}{NEW_MARK}{tag}"


def write_dir(directory: Path, files: dict[str, bytes]) -> None:
    """A directory of new files, every file and directory synced (a journal will name it)."""
    directory.mkdir(parents=True)
    dirs = {directory}
    for rel, data in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        dirs.update(p for p in path.parents if p.is_relative_to(directory))
    for d in sorted(dirs, key=lambda p: -len(p.parts)):
        fsync_dir(str(d))


def kept_dir(root: Path, name: str, version: str) -> Path:
    """Where a replaced version is kept: .history/<name>/<version>/ (a version kept before: -2, -3...)."""
    base = root / HISTORY / names.check_name(name) / names.check_version(version)
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{version}-{n}")
    return path


def kept(root: Path, name: str) -> list[str]:
    """The versions of `name` kept in patchsets/.history/, highest first."""
    from packaging.version import (  # lazy: slow to import, only where a version is kept
        InvalidVersion,
        Version,
    )

    directory = root / HISTORY / name
    if not directory.is_dir():
        return []

    def order(version: str) -> tuple[int, Version | str]:
        try:
            return 1, Version(version)
        except InvalidVersion:
            return 0, version

    found = [p.name for p in directory.iterdir() if (p / MANIFEST).is_file()]
    return sorted(found, key=order, reverse=True)


def put(root: Path, name: str, new: Path, old_version: str | None) -> str | None:
    """Put the synced directory `new` in place as root/<name>, the version there (old_version) kept in
    history; returns where it was kept (relative to root). Call it holding `locked(root)`."""
    aside = kept_dir(root, name, old_version) if old_version is not None else None
    journal = {"name": name, "new": new.name, "kept": aside.relative_to(root).as_posix() if aside else None}
    faults.point("save-written")
    write_atomic(str(root / JOURNAL), json.dumps(journal).encode())
    faults.point("save-journal")
    _finish(root, journal)
    return journal["kept"]


def _finish(root: Path, journal: dict[str, Any]) -> None:
    """Steps 3-5 of a save, from wherever a crash left them."""
    name, new = journal["name"], root / journal["new"]
    target = root / name
    if new.is_dir():
        if target.exists():
            if journal["kept"]:
                aside = root / journal["kept"]
                aside.parent.mkdir(parents=True, exist_ok=True)
                os.rename(target, aside)
                fsync_dir(str(aside.parent))
            else:  # a patch set made meanwhile by hand where none was: kept beside, not lost
                os.rename(target, kept_dir(root, name, "by-hand"))
            faults.point("save-aside")
        os.rename(new, target)
        fsync_dir(str(root))
        faults.point("save-in")
    elif not target.exists() and journal["kept"] and (root / journal["kept"]).is_dir():
        os.rename(root / journal["kept"], target)  # the new one lost by other hands: the old one back
        fsync_dir(str(root))
    os.unlink(root / JOURNAL)
    fsync_dir(str(root))
    faults.point("save-done")


def recover(root: Path) -> list[str]:
    """Finish a save a crash interrupted, remove a new directory no journal names; what was done."""
    if not root.is_dir() or not _pending(root):
        return []
    done = []
    with locked(root):
        path = root / JOURNAL
        if path.exists():
            try:
                journal = json.loads(path.read_bytes())
                _check_journal(journal)
            except (ValueError, KeyError, TypeError) as exc:
                raise BadInput(
                    f"{path} is damaged: {exc}",
                    f"look at the .pk-new- directories in {root}, put the "
                    "one you want in place by hand, then delete the journal",
                ) from None
            _finish(root, journal)
            done.append(
                f"finished the save of patchsets/{journal['name']} that was interrupted"
                + (
                    f" (the version it replaced is kept in patchsets/{journal['kept']})"
                    if journal["kept"]
                    else ""
                )
            )
        for entry in sorted(root.iterdir()):
            name, mark, _ = (
                entry.name[1:].rpartition(NEW_MARK)
                if NEW_MARK in entry.name
                else entry.name[1:].rpartition(OLD_MARK)
            )
            if not entry.name.startswith(".") or not mark or not entry.is_dir() or names.name_problem(name):
                continue
            if mark == NEW_MARK:
                shutil.rmtree(entry)
                done.append(
                    f"removed {entry.name}, a save of patchsets/{name} interrupted before it was complete"
                )
            elif not (root / name).exists():  # the old, journal-less save: the set between its two renames
                os.rename(entry, root / name)
                done.append(
                    f"put patchsets/{name} back from {entry.name}, where an interrupted save had left it"
                )
        fsync_dir(str(root))
    return done


def _check_journal(journal: Any) -> None:
    """ValueError unless the journal names what a save writes: a patch set name, its new directory
    .<name>.pk-new-<id> and, if any, .history/<name>/<version>: never a path elsewhere."""
    name, new, aside = journal["name"], journal["new"], journal["kept"]
    problem = names.name_problem(name)
    if problem:
        raise ValueError(problem)
    tag = new.removeprefix(f".{name}{NEW_MARK}") if isinstance(new, str) else ""
    if not tag or tag == new or not names.PATCHSET_NAME.fullmatch(tag):
        raise ValueError(f"its new directory {new!r} is not .{name}{NEW_MARK}ID")
    if aside is not None:
        parts = aside.split("/") if isinstance(aside, str) else []
        if len(parts) != 3 or parts[:2] != [HISTORY, name] or names.version_problem(parts[2]):
            raise ValueError(f"where it keeps the old version, {aside!r}, is not {HISTORY}/{name}/VERSION")


def _pending(root: Path) -> bool:
    """Is there anything to recover (a journal, a hidden .pk-new-/.pk-old- directory)? No lock taken."""
    with os.scandir(root) as entries:
        return any(
            e.name == JOURNAL or (e.name.startswith(".") and (NEW_MARK in e.name or OLD_MARK in e.name))
            for e in entries
        )
