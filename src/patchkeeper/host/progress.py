"""How far the agent's running call is: files read and hashed, out of those it has found to read,
and the phase it is in when that is not reading and hashing (the bytecode compared: bytecode.PHASE)."""

from __future__ import annotations

import threading
from typing import Callable, Optional, Tuple

_lock = threading.Lock()
_count = [0, 0]  # files read and hashed since the call began, files found to read so far
_phase = [""]  # what the files counted now are for: "" while they are read and hashed
_listener: Optional[Callable[[int, int, str], None]] = None  # an in-process agent's controller (its bar)


def begin() -> None:
    """A call begins: nothing read, nothing found yet."""
    with _lock:
        _count[0] = _count[1] = 0
        _phase[0] = ""


def phase(name: str) -> None:
    """The files counted from now on are for `name` (a long phase other than reading and hashing)."""
    with _lock:
        _phase[0] = name
        _tell()


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


def current() -> str:
    """The running call's phase ("": reading and hashing), which a heartbeat carries too."""
    return _phase[0]


def listen(listener: Optional[Callable[[int, int, str], None]]) -> None:
    """Have (done, total, phase) told to `listener` as files are read (an agent in the controller's
    own process, which sends no heartbeat); None: to nobody."""
    global _listener
    with _lock:
        _count[0] = _count[1] = 0
        _phase[0] = ""
        _listener = listener


def _tell() -> None:
    if _listener is not None:
        _listener(_count[0], _count[1], _phase[0])
