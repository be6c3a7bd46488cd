"""How long to wait for a host, all from one number: a target's `timeout`."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TIMEOUT = (
    30.0  # seconds a host may keep the wire silent (no answer, no heartbeat): a target's `timeout`
)


@dataclass(frozen=True)
class Patience:
    """How long to wait for a host, all from one number (a target's `timeout`, in seconds)."""

    silence: float = DEFAULT_TIMEOUT

    @property
    def hello(self) -> float:
        """For an agent to start and say hello (no heartbeat yet: an interpreter to start, its program
        uploaded and compiled, on a host that may be busy): four silences, at least a minute."""
        return max(4 * self.silence, 60.0)

    def deadline(self, sent: int) -> float:
        """The longest one call may run, heartbeats or not: 60 silences (30 min by default: hashing
        a large package cold), and one more per MiB the call was given."""
        return self.silence * (60 + sent / (1 << 20))
