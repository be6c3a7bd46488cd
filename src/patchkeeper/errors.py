"""The one error root; each subclass carries its exit code and a next step for the user."""

from __future__ import annotations

import difflib
import errno as codes

from .host.errors import (
    EXIT_REFUSED as EXIT_REFUSED,
    AgentError as AgentError,
    PatchkeeperError as PatchkeeperError,
)  # the root, shared with the host

EXIT_DIFFERS = 1  # a check found differences (diff, audit, verify)
EXIT_ROLLED_BACK = 3  # failed and rolled back
EXIT_UNFINISHED = 4  # a committed change could not be finished: the target is between two states
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)


class BadInput(PatchkeeperError):
    """Malformed configuration, patch set, diff or argument."""


class Refused(PatchkeeperError):
    """A safety check refused the change (pre-image drift, wrong package version, lock held)."""


class HunkFailed(Refused):
    """A hunk of a patch set does not apply to the file it names."""


class StoreError(PatchkeeperError):
    """A backup object is missing or corrupt; it is never restored."""


class TargetError(PatchkeeperError):
    """The target cannot be reached or its interpreter or package cannot be found."""


class Unreachable(TargetError):
    """The target's host cannot be reached (the connection failed); one that answers wrongly (a wrong
    python, a missing package) is another TargetError."""


class NotInstalled(TargetError):
    """The managed package is not installed in the target's interpreter (`state_dir`: where its
    records would be, for a hint that names the release they need)."""

    def __init__(self, message: str, hint: str = "", state_dir: str = "") -> None:
        super().__init__(message, hint)
        self.state_dir = state_dir


class Unfinished(PatchkeeperError):
    """A transaction passed its commit point but could not be finished; `recover` finishes it."""

    exit_code = EXIT_UNFINISHED


def error_document(message: str, hint: str, exit_code: int) -> dict[str, object]:
    """The one shape of an error in --json output (docs/json.md, "An error"): a change document's error
    keys, which every verb's error document, and a target's failure in an --all document, share."""
    return {"ok": False, "exit_code": exit_code, "error": {"message": message, "hint": hint}}


def did_you_mean(name: str, known: list[str]) -> str | None:
    """The known name closest to a mistyped one (difflib's ratio, as click uses for verbs), None when none is close."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return close[0] if close else None


def os_hint(errno: int | None, then: str) -> str:
    """What to do about a file system's refusal (`errno`) before `then` (run the command again...)."""

    if errno == codes.EROFS:
        return f"the file system is read-only: remount it read-write, or use a writable place; then {then}"
    if errno in (codes.ENOSPC, codes.EDQUOT):
        return f"make room, then {then}"
    if errno in (codes.EACCES, codes.EPERM):
        return f"fix the permissions (or run as the user who owns the files), then {then}"
    return f"fix that, then {then}"
