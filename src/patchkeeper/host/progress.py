"""How far the agent's running call is: files read and hashed, out of those it has found to read,
and the phase it is in when that is not reading and hashing (the bytecode compared: bytecode.PHASE)."""

from __future__ import annotations

import os
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


_own = [0, 0]  # bytes the heartbeat itself read (of /proc) and wrote (its frames): not the call's work


def wrote(size: int) -> None:
    """The heartbeat wrote a frame of `size` bytes (not the call's work)."""
    _own[1] += size


def work(skip: int) -> Optional[int]:
    """How much this process has done, as the kernel counts it: the CPU time of every thread but
    `skip` (the heartbeat's), plus the bytes it read and wrote (less the heartbeat's own), plus the
    files read. It changes while a call makes progress, and not while the call waits on a FIFO, a
    device, a hung mount or a lock. None where /proc does not tell (not Linux)."""
    ticks = 0
    try:
        for tid in os.listdir("/proc/self/task"):
            if tid == str(skip):
                continue
            try:
                with open("/proc/self/task/%s/stat" % tid, "rb") as f:
                    stat = f.read()
            except OSError:  # a thread that ended meanwhile
                continue
            _own[0] += len(stat)
            fields = stat.rpartition(b")")[2].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    except (OSError, ValueError, IndexError):
        return None
    moved = 0
    try:
        with open("/proc/self/io", "rb") as f:
            io = f.read()
        counts = dict(line.split(b":") for line in io.splitlines() if b":" in line)
        # what the heartbeat read before this read (its own /proc reads) is not the call's work
        moved = int(counts[b"rchar"]) - _own[0] + int(counts[b"wchar"]) - _own[1]
        _own[0] += len(io)
    except (OSError, ValueError, KeyError):
        pass  # no I/O accounting here: CPU time and files alone
    return ticks + moved + now()[0]
