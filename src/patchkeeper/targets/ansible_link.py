"""A target reached through Ansible's own connection to a host (the patchkeeper.core.patchset action).

The action runs on the controller, in the process Ansible gave the task, with the same planning,
transaction, ledger and verification as the CLI; only the wire to the agent differs. With Ansible's
`ssh` connection the agent is started by the command line that connection itself builds
(`_build_command`: its user, port, key, ssh_args and ControlPath), so with ControlPersist (Ansible's
default) it is one more session over the master connection Ansible already holds: no second SSH
connection, no login of patchkeeper's own. With the `local` connection the agent runs as a
subprocess. Programs on the host (a [service]'s restart and logs) go the same way.

Nothing here imports Ansible: the connection is duck-typed (`transport`, `get_option`,
`_build_command`, `_play_context`).
"""

from __future__ import annotations

import shlex
from typing import Any

from ..errors import TargetError
from ..workspace import TargetConfig
from .links import PipeLink, program
from .local import run_here
from .remote_agent import AgentProxy, AgentTarget, Patience

SUPPORTED = ("ssh", "local")


def check(connection: Any, host: str) -> None:
    """Refuse what this wire cannot do, before anything is read or changed."""
    transport = getattr(connection, "transport", None)
    if transport not in SUPPORTED:
        raise TargetError(
            f"host {host}: Ansible connection {transport!r} is not supported by patchkeeper.core.patchset",
            "use connection ssh (Ansible's default) or local for this host",
        )
    context = getattr(connection, "_play_context", None)
    if getattr(context, "become", False):
        raise TargetError(
            f"host {host}: become is not supported by patchkeeper.core.patchset",
            "connect as a user that may write the target's venv and role files (ansible_user)",
        )
    if transport == "ssh" and _option(connection, "password"):
        raise TargetError(
            f"host {host}: password logins are not supported by patchkeeper.core.patchset",
            "log in with a key (ansible_ssh_private_key_file, or ssh-agent)",
        )


def _option(connection: Any, name: str) -> Any:
    try:
        return connection.get_option(name)
    except KeyError:
        return None


class AnsibleTarget(AgentTarget):
    """A target whose agent and programs run through an Ansible connection."""

    def __init__(self, config: TargetConfig, connection: Any) -> None:
        super().__init__(config)
        self._connection = connection
        self._agent: AgentProxy | None = None

    def wrap(self, argv: list[str]) -> list[str]:
        """The local command line that runs `argv` on the host over the connection."""
        conn = self._connection
        if conn.transport == "local":
            return argv
        host = _option(conn, "host") or conn._play_context.remote_addr
        remote = " ".join(shlex.quote(a) for a in argv)  # the login shell only ever sees words
        built = conn._build_command(_option(conn, "ssh_executable") or "ssh", "ssh", host, remote)
        return [a.decode() if isinstance(a, bytes) else str(a) for a in built]

    @property
    def agent(self) -> AgentProxy:
        if self._agent is None:
            try:
                link = PipeLink(self.config.python, program(), self.wrap)
            except OSError as exc:
                raise TargetError(
                    f"target {self.name}: cannot start ssh for its agent: {exc}",
                    "check that ssh is installed on the controller",
                ) from None
            self._agent = AgentProxy(link, self.name, self.config.python, Patience(self.config.timeout))
        return self._agent

    def run(
        self, argv: list[str], timeout: float = 60.0, input: bytes | None = None
    ) -> tuple[int, bytes, bytes]:
        return run_here(self.wrap(argv), timeout, input)
