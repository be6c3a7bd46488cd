"""The one error root; each subclass carries its exit code and a next step for the user."""

from __future__ import annotations

EXIT_DIFFERS = 1  # a check found differences (diff, audit, verify)
EXIT_REFUSED = 2  # bad input or refused; nothing changed
EXIT_ROLLED_BACK = 3  # failed and rolled back


class PatchkeeperError(Exception):
    """Something patchkeeper will not do or could not do; nothing was changed unless said."""

    exit_code = EXIT_REFUSED

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


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
