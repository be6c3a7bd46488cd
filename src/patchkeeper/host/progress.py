"""How far the agent's running call is: files read and hashed, out of those it has found to read."""

from __future__ import annotations

import threading
from typing import Callable, Optional, Tuple

_lock = threading.Lock()
_count = [0, 0]  # files read and hashed since the call began, files found to read so far
_listener: Optional[Callable[[int, int], None]] = None  # an in-process agent's controller (its bar)


def begin() -> None:
    """A call begins: nothing read, nothing found yet."""
    with _lock:
        _count[0] = _count[1] = 0


def expect(files: int) -> None:
    """`files` more files to read (the total grows as the call finds work)."""
    if files:
        with _lock:
            _count[1] += files
            _tell()


def step() -> None:
    """One file read and hashed."""
    with _lock:
        _count[0] += 1
        if _count[0] % 64 == 0 or _count[0] == _count[1]:
            _tell()


def now() -> Tuple[int, int]:
    """(files read, files found to read) of the running call: what a heartbeat carries (wire._Heart)."""
    with _lock:
        return _count[0], _count[1]


def listen(listener: Optional[Callable[[int, int], None]]) -> None:
    """Have (done, total) told to `listener` as files are read (an agent in the controller's own
    process, which sends no heartbeat); None: to nobody."""
    global _listener
    with _lock:
        _count[0] = _count[1] = 0
        _listener = listener


def _tell() -> None:
    if _listener is not None:
        _listener(_count[0], _count[1])
