"""A target on another machine, reached with paramiko as ~/.ssh/config describes it.

`ssh = "alias"` (looked up in ~/.ssh/config: HostName, User, Port, IdentityFile, ProxyJump,
UserKnownHostsFile) or `ssh = "user@host[:port]"`. Authentication uses the configured keys, the
SSH agent and the usual ~/.ssh/id_* keys; never a password. Host keys are checked against
known_hosts and an unknown or changed key is refused. The connection is opened on first use,
once per target; the near-disk agent runs in the target's own Python on the host.
"""

from __future__ import annotations

import base64
import errno
import getpass
import hashlib
import os
import shlex
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from ..errors import BadInput, TargetError, Unreachable
from ..workspace import TargetConfig
from .base import memo
from .persist import Holder, Unavailable
from .remote_agent import AgentProxy, AgentTarget, Patience

_SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
_IMPORT_LOCK = threading.Lock()
T = TypeVar("T")


@dataclass(frozen=True)
class Endpoint:
    """Where one SSH hop goes, with what the config says about it."""

    alias: str
    host: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    known_hosts: tuple[str, ...]
    jumps: tuple[str, ...]  # ProxyJump hops, first to last

    @property
    def known_hosts_name(self) -> str:
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"


def _paramiko() -> Any:  # the paramiko module (paramiko has no type information)
    """paramiko, imported without `invoke` (half its import time) unless ~/.ssh/config uses
    `Match exec`, the only thing paramiko needs invoke for."""

    with _IMPORT_LOCK:  # targets connect from several threads at once
        if "paramiko" not in sys.modules and "invoke" not in sys.modules:
            try:
                with open(os.path.expanduser("~/.ssh/config"), encoding="utf-8", errors="replace") as f:
                    uses_exec = "exec" in f.read().lower()
            except OSError:
                uses_exec = False
            if not uses_exec:
                sys.modules["invoke"] = None  # type: ignore[assignment]  # makes paramiko.config's optional `import invoke` fail fast
                try:
                    import paramiko  # lazy: slow to import; only SSH targets need it
                finally:
                    sys.modules.pop("invoke", None)
        import paramiko  # lazy: slow to import; only SSH targets need it

    return paramiko


def _ssh_config() -> Any:  # a paramiko.SSHConfig
    paramiko = _paramiko()

    path = os.path.expanduser("~/.ssh/config")
    if not os.path.isfile(path):
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(path)
    except (OSError, ValueError, paramiko.SSHException) as exc:  # unreadable, or a syntax paramiko rejects
        raise BadInput(f"cannot read {path}: {exc}", "fix its syntax") from None


def resolve(spec: str, config: Any = None) -> Endpoint:
    """`alias` or `user@host[:port]` -> an Endpoint, with ~/.ssh/config applied."""
    config = config if config is not None else _ssh_config()
    user, _, rest = spec.rpartition("@")
    host, port = rest, None
    if rest.startswith("["):  # [v6 address]:port
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else None
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    if not host or (port is not None and not port.isdigit()):
        raise BadInput(
            f"ssh = {spec!r} is not an ssh alias or user@host[:port]",
            'write ssh = "alias" (from ~/.ssh/config) or ssh = "user@host:port"',
        )
    found = config.lookup(host)
    identity = tuple(os.path.expanduser(p) for p in found.get("identityfile", []))
    known = tuple(
        os.path.expanduser(p)
        for p in (found.get("userknownhostsfile") or "~/.ssh/known_hosts ~/.ssh/known_hosts2").split()
    )
    jump = found.get("proxyjump", "")
    jumps = tuple(j.strip() for j in jump.split(",") if j.strip()) if jump.lower() != "none" else ()
    return Endpoint(
        alias=host,
        host=found.get("hostname", host),
        port=int(port or found.get("port", 22)),
        user=user or found.get("user") or getpass.getuser(),
        identity_files=tuple(p for p in identity if os.path.exists(p)),
        known_hosts=known + (_SYSTEM_KNOWN_HOSTS,),
        jumps=jumps,
    )


def fingerprint(key: Any) -> str:
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def _keyscan(ep: Endpoint) -> str:
    port = f"-p {ep.port} " if ep.port != 22 else ""
    return f"ssh-keyscan {port}{shlex.quote(ep.host)} >> ~/.ssh/known_hosts"


def connect(
    ep: Endpoint,
    target: str,
    sock: Any = None,
    patience: Patience = Patience(),  # noqa: B008
) -> Any:  # a paramiko.SSHClient
    """An authenticated paramiko client for one hop (through `sock` for a ProxyJump), sending an
    SSH keepalive every third of the target's timeout (a dead peer then fails the transport)."""
    paramiko = _paramiko()

    def refuse(policy: Any, client: Any, hostname: str, key: Any) -> None:
        raise TargetError(
            f"target {target}: host key of {ep.known_hosts_name} is unknown "
            f"({key.get_name()} {fingerprint(key)}); refusing to connect",
            f"check that fingerprint with the host's owner, then accept it: {_keyscan(ep)}",
        )

    # paramiko's policy class, subclassed here because paramiko is imported only when it is needed
    Refuse = type("Refuse", (paramiko.MissingHostKeyPolicy,), {"missing_host_key": refuse})

    client = paramiko.SSHClient()
    for path in ep.known_hosts:
        if os.path.isfile(path):
            try:
                client.load_system_host_keys(path)
            except (OSError, paramiko.SSHException) as exc:
                raise TargetError(f"cannot read known hosts file {path}: {exc}", "fix or remove it") from None
    client.set_missing_host_key_policy(Refuse())
    where = f"{ep.user}@{ep.known_hosts_name}" + (f" ({ep.alias})" if ep.alias != ep.host else "")
    try:
        client.connect(
            ep.host,
            ep.port,
            ep.user,
            key_filename=list(ep.identity_files) or None,
            allow_agent=True,
            look_for_keys=True,
            sock=sock,
            timeout=20,
            banner_timeout=20,
            auth_timeout=20,
        )
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise TargetError(
            f"target {target}: the host key of {ep.known_hosts_name} has CHANGED (now {exc.key.get_name()} "
            f"{fingerprint(exc.key)}, known_hosts has {fingerprint(exc.expected_key)}); refusing to connect: "
            "this may be an attack, or the host was reinstalled",
            f"if the host was reinstalled, verify the new fingerprint, then: "
            f"ssh-keygen -R {shlex.quote(ep.known_hosts_name)} && {_keyscan(ep)}",
        ) from None
    except paramiko.AuthenticationException as exc:
        client.close()
        raise TargetError(
            f"target {target}: cannot log in to {where}: {exc}",
            "load a key into ssh-agent or set IdentityFile for this host in ~/.ssh/config",
        ) from None
    except TargetError:
        client.close()
        raise
    except (OSError, paramiko.SSHException, EOFError) as exc:
        client.close()
        raise Unreachable(
            f"target {target}: cannot reach {where}: {in_words(exc, ep.host, ep.port)}",
            "check the host is up and `ssh` to it works",
        ) from None
    client.get_transport().set_keepalive(max(1, int(patience.silence / 3)))
    return client


_GAI = {
    socket.EAI_NONAME: "does not resolve",
    socket.EAI_AGAIN: "cannot be resolved now (a temporary DNS failure)",
    getattr(socket, "EAI_NODATA", -5): "has no address",
}
_REFUSALS = {
    errno.ECONNREFUSED: "nothing listens there (connection refused)",
    errno.EHOSTUNREACH: "no route to that host",
    errno.ENETUNREACH: "its network is unreachable",
    errno.ETIMEDOUT: "no answer (timed out)",
    errno.ECONNRESET: "the connection was reset",
}


def in_words(exc: BaseException, host: str, port: int) -> str:
    """What failed when connecting to host:port, in words rather than `[Errno -2]` or `[Errno None]`."""
    if isinstance(exc, socket.gaierror):
        return f"the host name {host} {_GAI.get(exc.errno or 0, 'does not resolve')} ({exc.strerror})"
    errors = getattr(exc, "errors", None)  # paramiko's NoValidConnectionsError: one error per address tried
    if isinstance(errors, dict) and errors:
        return "; ".join(
            f"{addr[0]} port {addr[1]}: " + in_words(e, host, port).split(": ", 1)[-1]
            for addr, e in errors.items()
        )
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return f"{host} port {port}: no answer within 20 s"
    if isinstance(exc, OSError) and exc.errno in _REFUSALS:
        return f"{host} port {port}: {_REFUSALS[exc.errno]}"
    if isinstance(exc, EOFError) or "banner" in str(exc):
        return f"{host} port {port} answered, but closed the connection during the SSH handshake (is it an SSH server?)"
    return str(exc) or type(exc).__name__


class SshTarget(AgentTarget):
    """A remote target: one SSH connection, one agent process on the host, opened lazily.

    Unless `persist` is 0 the connection is held by a holder process between commands
    (persist.py); this process then imports no paramiko and makes no handshake of its own.
    """

    def __init__(self, config: TargetConfig, persist: float | None = None) -> None:
        super().__init__(config)
        self.persist = config.persist if persist is None else persist
        self._clients: list[Any] = []  # jump hosts first, the target last
        self._agent: AgentProxy | None = None
        self._open_lock = threading.Lock()
        self.patience = Patience(config.timeout)
        self._holder = None
        if self.persist > 0:
            try:
                self._holder = Holder(
                    self.name, config.ssh, config.python, self.persist, config.identity_file, self.patience
                )
            except Unavailable:
                self._holder = None  # no safe place for its socket: connect directly

    @memo
    def endpoint(self) -> Endpoint:
        if self.config.ssh is None:  # open_target makes an SshTarget only of a target with ssh = ...
            raise BadInput(
                f"target {self.name} has no ssh = ... to connect to", f"set ssh in [targets.{self.name}]"
            )
        found = resolve(self.config.ssh)
        if self.config.identity_file:  # an inventory's key comes before those of ~/.ssh/config
            found = replace(found, identity_files=(os.path.expanduser(self.config.identity_file),))
        return found

    def _held(self, call: Callable[[Holder], T]) -> T | None:
        """`call(holder)` through the held connection; None when it cannot be used (connect directly)."""
        if self._holder is None:
            return None

        try:
            return call(self._holder)
        except Unavailable:
            self._holder = None
            return None

    def _client(self) -> Any:  # a paramiko.SSHClient (paramiko has no type information)
        with self._open_lock:
            if not self._clients:
                self._clients = self._connect_chain()
            return self._clients[-1]

    def _connect_chain(self) -> list[Any]:
        config = _ssh_config()
        hops = [resolve(j, config) for j in self.endpoint.jumps] + [self.endpoint]
        if len(hops) > 8:
            raise BadInput(f"target {self.name}: ProxyJump chain of {config} is too long")
        clients, sock = [], None
        try:
            for i, hop in enumerate(hops):
                clients.append(connect(hop, self.name, sock, self.patience))
                if i + 1 < len(hops):
                    nxt = hops[i + 1]
                    sock = (
                        clients[-1]
                        .get_transport()
                        .open_channel("direct-tcpip", (nxt.host, nxt.port), ("127.0.0.1", 0))
                    )
        except BaseException:
            for c in reversed(clients):
                c.close()
            raise
        return clients

    def _session(self, timeout: float | None = None) -> Any:  # a paramiko.Channel
        paramiko = _paramiko()

        try:
            chan = self._client().get_transport().open_session(timeout=20)
        except (paramiko.SSHException, OSError, AttributeError) as exc:
            raise TargetError(
                f"target {self.name}: the SSH connection failed: {exc}",
                f"retry; if a command was interrupted, run `patchkeeper recover -t {self.name}`",
            ) from None
        chan.settimeout(timeout)
        return chan

    @property
    def agent(self) -> AgentProxy:
        if self._agent is None:
            self._agent = self._held(lambda h: h.agent()) or AgentProxy.over_ssh(
                self._session(), self.name, self.config.python, self.patience
            )
        return self._agent

    def run(
        self, argv: list[str], timeout: float = 60.0, input: bytes | None = None
    ) -> tuple[int, bytes, bytes]:
        """Run argv on the host: each argument quoted, so the login shell only ever sees words."""
        held = self._held(lambda h: h.run(argv, timeout, input))
        if held is not None:
            return held
        chan = self._session(timeout)
        try:
            chan.exec_command(" ".join(shlex.quote(a) for a in argv))
            err = bytearray()
            reader = threading.Thread(target=_drain_into, args=(chan.recv_stderr, err), daemon=True)
            reader.start()
            if input:
                chan.sendall(input)
            chan.shutdown_write()
            try:
                out = _drain(chan.recv)
            except TimeoutError:
                return 124, b"", f"timed out after {timeout}s".encode()
            reader.join(timeout)
            return chan.recv_exit_status(), out, bytes(err)
        finally:
            chan.close()

    def close(self) -> None:
        super().close()
        for client in reversed(self._clients):
            client.close()
        self._clients = []


def _drain(recv: Callable[[int], bytes]) -> bytes:
    out = bytearray()
    while True:
        chunk = recv(1 << 16)
        if not chunk:
            return bytes(out)
        out += chunk


def _drain_into(recv: Callable[[int], bytes], out: bytearray) -> None:
    try:
        out.extend(_drain(recv))
    except (TimeoutError, OSError):
        pass
