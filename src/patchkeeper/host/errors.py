"""The one error root, shared by the controller and the host side of the wire."""

from __future__ import annotations

EXIT_REFUSED = 2  # bad input or refused; nothing changed


class PatchkeeperError(Exception):
    """Something patchkeeper will not do or could not do; nothing was changed unless said."""

    exit_code = EXIT_REFUSED

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class AgentError(PatchkeeperError):
    """A near-disk operation on the target failed; `kind` names the failure for the controller."""

    def __init__(self, kind: str, message: str, hint: str = "") -> None:
        super().__init__(message, hint)
        self.kind = kind
