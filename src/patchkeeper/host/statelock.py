"""Where a target's state lives (the venv's marker naming its state dir) and the lock a change holds
on it: written whole, held by an flock while its holder lives, broken when the holder is gone.
Standard library only, as every module of the agent."""

from __future__ import annotations

import fcntl
import json
import os
import time
from typing import Any

from .answers import LockHolder, StateDirOwner
from .disk import TEMP_PREFIX, hostname, list_entries, pid_alive, write_atomic

_DAMAGED_LOCK = {"pid": "?", "host": "?", "command": "? (its lock file is damaged)", "since": 0}


def state_dir_owner(prefix: str, state_dir: str, site: str, claim: bool) -> StateDirOwner:
    """The real paths of `state_dir` and `site`, and the state dir the venv at `prefix` is
    managed from, as its marker `<prefix>/.patchkeeper/state_dir` names it (None: no marker).

    With `claim`, a missing marker is created, once and exclusively, naming `state_dir` (or the
    default `<prefix>/.patchkeeper` if that already holds a ledger). It holds a path relative to
    `<prefix>/.patchkeeper` when inside the venv, so a copied venv keeps its own."""
    home = os.path.join(os.path.realpath(prefix), ".patchkeeper")
    marker = os.path.join(home, "state_dir")
    real = os.path.realpath(state_dir)
    owner = _marked(marker, home)
    if owner is None and claim:
        owner = home if real != home and list_entries(os.path.join(home, "ledger")) else real
        inside = owner.startswith(os.path.dirname(home) + os.sep)
        text = (os.path.relpath(owner, home) if inside else owner) + "\n"
        try:
            os.makedirs(home, exist_ok=True)
            tmp = f"{marker}.{os.getpid()}.tmp"
            write_atomic(tmp, text.encode())
            try:
                os.link(tmp, marker)  # exclusive: of two claims at once, one names the state dir
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
        except OSError:
            return StateDirOwner(real, os.path.realpath(site), None)  # no venv to write
        owner = _marked(marker, home)
    return StateDirOwner(real, os.path.realpath(site), owner)


def _marked(marker: str, home: str) -> str | None:
    try:
        with open(marker, encoding="utf-8") as f:
            named = f.read().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return os.path.normpath(os.path.join(home, named)) if named else None


def take(path: str, holder: dict[str, Any], held: dict[str, int]) -> LockHolder | None:
    """Take the lock file; return None on success or the live holder's record.

    The lock is written whole or not at all (a temp file hardlinked into place), and its holder
    keeps an flock on it for as long as it lives, so the kernel says when a holder is gone.
    A lock whose holder is a dead (or zombie) process of this host is broken and taken over;
    so is an empty or damaged lock that no process holds an flock on.
    Breaking and taking happen under a short flock on `<path>.guard`, so two takers never both
    succeed.
    """

    os.makedirs(os.path.dirname(path), exist_ok=True)
    holder = dict(holder, pid=os.getpid(), host=hostname(), since=time.time())
    with open(path + ".guard", "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if os.path.lexists(path):
            current = _read_lock(path)
            if current is None:  # empty or damaged: only an flock can say whether a holder lives
                gone = not _flocked(path)
            else:
                gone = current.get("host") == hostname() and not pid_alive(current.get("pid", 0))
            if not gone:
                return LockHolder.from_wire(current or _DAMAGED_LOCK)
            os.unlink(path)  # its holder is gone: detected, not waited on
        tmp = os.path.join(os.path.dirname(path), f"{TEMP_PREFIX}{os.getpid()}-{time.monotonic_ns()}")
        try:
            with open(tmp, "x") as f:  # not synced: after a power cut no holder lives, and an empty or
                json.dump(holder, f)  # damaged lock nobody holds an flock on is broken (above)
            try:
                os.link(tmp, path)  # the lock appears complete or not at all
            except FileExistsError:  # only a taker that ignores the guard could get here first
                return LockHolder.from_wire(_read_lock(path) or _DAMAGED_LOCK)
            except OSError:  # a file system without hardlinks; under the guard a rename is as safe
                os.rename(tmp, path)
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        fd = os.open(path, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.set_inheritable(fd, False)
        held[path] = fd
        return None


def _flocked(path: str) -> bool:
    """Whether a live process holds an flock on the lock file (its holder while it runs)."""

    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def release(path: str, held: dict[str, int]) -> None:
    """Give the lock up: remove its file if this process holds it, and close its flock."""
    current = _read_lock(path)
    if current and current.get("pid") == os.getpid():
        os.unlink(path)
    fd = held.pop(path, None)
    if fd is not None:
        os.close(fd)


def _read_lock(path: str) -> dict[str, Any] | None:
    """The lock's holder record; None when absent, empty or damaged (not a JSON object with a pid)."""
    try:
        with open(path, "rb") as f:
            current: Any = json.loads(f.read())
    except (FileNotFoundError, ValueError):
        return None
    if isinstance(current, dict) and isinstance(current.get("pid"), int):
        return current
    return None
