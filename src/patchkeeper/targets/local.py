"""A target on this machine: the agent runs in-process, programs run as subprocesses."""

from __future__ import annotations

import subprocess

from ..agent import Agent
from .base import Target


class LocalTarget(Target):
    _agent = Agent()

    @property
    def agent(self) -> Agent:
        return self._agent

    def run(self, argv: list[str], timeout: float = 60.0, input: bytes | None = None) -> tuple[int, bytes, bytes]:
        try:
            proc = subprocess.run(argv, input=input, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            return 124, exc.stdout or b"", (exc.stderr or b"") + f"\ntimed out after {timeout}s".encode()
        return proc.returncode, proc.stdout, proc.stderr
