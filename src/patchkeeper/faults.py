"""Fault injection for crash tests: PATCHKEEPER_CRASH_AT=N kills the process at the Nth step."""

from __future__ import annotations

import os
import signal

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
    if int(at) == _count:
        os.kill(os.getpid(), signal.SIGKILL)
