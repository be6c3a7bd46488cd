"""Fault injection for crash tests: PATCHKEEPER_CRASH_AT=N kills the process at the Nth step.

PATCHKEEPER_DISK_FULL=TEXT makes the workspace's writes of paths containing TEXT fail with ENOSPC.
PATCHKEEPER_PAUSE_AT=NAME holds one thread at the point NAME for PATCHKEEPER_PAUSE_SECONDS (3).
PATCHKEEPER_CRASH_AT may also name a step ("journal-committed"); PATCHKEEPER_CRASH_SIGNAL=STOP
freezes the process there instead (a test then cuts its SSH connection and lets it go on).
"""

from __future__ import annotations

import errno
import os
import signal
import time

_count = 0


def point(name: str) -> None:
    """Mark a step of a transaction; die with SIGKILL here if the environment asks for it."""
    global _count
    at = os.environ.get("PATCHKEEPER_CRASH_AT")
    if not at:
        return
    _count += 1
    trace = os.environ.get("PATCHKEEPER_CRASH_TRACE")
    if trace:
        with open(trace, "a") as f:
            f.write(f"{_count} {name}\n")
    if at == name or (at.isdigit() and int(at) == _count):
        sig = getattr(
            signal, "SIG" + os.environ.get("PATCHKEEPER_CRASH_SIGNAL", "KILL").upper().removeprefix("SIG")
        )
        os.kill(os.getpid(), sig)


def disk_full(path: str) -> None:
    """Fail a write of `path` as a full disk would, if PATCHKEEPER_DISK_FULL names part of it."""
    where = os.environ.get("PATCHKEEPER_DISK_FULL")
    if where and where in path:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


def pause(name: str) -> None:
    """Wait here if PATCHKEEPER_PAUSE_AT names this point: a test holds one thread in a window too short
    to hit otherwise, while the process's other threads go on (a signal would stop them all)."""
    if os.environ.get("PATCHKEEPER_PAUSE_AT") == name:
        time.sleep(float(os.environ.get("PATCHKEEPER_PAUSE_SECONDS", "3")))
