"""Held SSH connections, as OpenSSH's ControlPersist: find, start, ask and stop a target's holder.

The first command to an SSH target starts a holder (targets/holder.py), a small process that keeps
the paramiko transport and a ready agent, listening on a Unix socket in a directory only this user
can enter (0700; the holder checks each peer's uid with SO_PEERCRED, and so does the client).
Later commands ask it over that socket: no paramiko import, no handshake, no agent upload. Each
command has the agent to itself; a command that ends cleanly parks it (releasing every lock) for
the next one, and a command that dies leaves it to exit, so a lock still dies with the command
that took it. A holder that is gone is replaced; one that does not
answer is killed and replaced; anything else falls back to a direct connection.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from ..errors import BadInput, PatchkeeperError, TargetError, Unreachable
from ..host import wire
from .remote_agent import AgentProxy, Patience

DEFAULT_PERSIST = 60.0
ACK_TIMEOUT = 5.0  # a holder that does not acknowledge a request within this is wedged
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class Unavailable(Exception):
    """No holder can be used here (an unsafe socket directory, a path too long): connect directly."""


def socket_dir() -> str:
    """$XDG_RUNTIME_DIR/patchkeeper, else /tmp/patchkeeper-<uid>: created 0700, refused unless it
    is a real directory of this user that no one else can enter."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    path = (
        os.path.join(base, "patchkeeper")
        if base and os.path.isdir(base)
        else f"/tmp/patchkeeper-{os.getuid()}"
    )
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise Unavailable(f"cannot create {path}: {exc}") from None
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise Unavailable(f"{path} is not a directory only this user can enter")
    return path


def socket_path(ssh: str | None, python: str) -> str:
    """One holder per (ssh spec, interpreter, home: whose ~/.ssh/config says how to connect)."""
    key = hashlib.sha256(json.dumps([ssh, python, os.path.expanduser("~")]).encode()).hexdigest()[:24]
    path = os.path.join(socket_dir(), key + ".sock")
    if len(path.encode()) >= 100:  # sun_path holds 108 bytes; leave room for the holder's temp name
        raise Unavailable(f"socket path {path} is too long")
    return path


def peer(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket."""
    pid, uid, _ = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    return pid, uid


def _read_exact(sock: socket.socket) -> Callable[[int], bytes]:
    """read(n) of exactly n bytes, never more: what follows a frame stays in the socket."""
    buf = bytearray()

    def read(n: int) -> bytes:
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf.extend(chunk)
        data = bytes(buf[:n])
        del buf[:n]
        return data

    return read


class SocketLink:
    """The wire to an agent through its holder's socket (a remote_agent.Link)."""

    def __init__(self, sock: socket.socket, first: bytes = b"") -> None:
        self.sock = sock
        self.first = first  # bytes already read from the socket, given back first

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, n: int) -> bytes:
        if self.first:
            data, self.first = self.first[:n], self.first[n:]
            return data
        try:
            return self.sock.recv(n)
        except ConnectionResetError:
            return b""

    def settimeout(self, seconds: float | None) -> None:
        self.sock.settimeout(seconds)

    def stderr(self) -> str:
        return ""

    def park(self, request: bytes) -> None:
        """Send the park request and wait until the holder has it (it shuts its side at once, and
        counts the park as in flight), so the command that follows is given this agent."""
        self.sock.sendall(request)
        self.sock.settimeout(2)  # a local socket: a holder that does not answer by then is wedged
        while self.sock.recv(1 << 12):
            pass

    def close(self, wait: bool = True) -> None:
        self.sock.close()  # the holder ends the agent's input: it returns and exits


class Holder:
    """The holder of one SSH target's connection, seen from a command."""

    def __init__(
        self,
        name: str,
        ssh: str | None,
        python: str,
        persist: float,
        identity: str | None = None,
        patience: Patience | None = None,
    ) -> None:
        self.name, self.ssh, self.python, self.persist, self.identity = name, ssh, python, persist, identity
        self.patience = patience or Patience()
        self.path = socket_path(ssh, python)

    # ---- asking ------------------------------------------------------------------------------
    def _connect(self) -> socket.socket | None:
        """A socket to a live holder of our uid, or None when none listens (a stale file is removed)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.path)
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            try:
                os.unlink(self.path)  # nobody listens: a holder that died without cleaning up
            except FileNotFoundError:
                pass
            return None
        except OSError as exc:
            sock.close()
            raise Unavailable(f"cannot connect to {self.path}: {exc}") from None
        if peer(sock)[1] != os.getuid():
            sock.close()
            raise Unavailable(f"{self.path} is held by another user")
        return sock

    def _ask(self, op: str, value: Any = None) -> socket.socket | None:
        """Send one request; return the socket once the holder acknowledged it, or None when no
        holder is there or it did not answer (a wedged one is killed and its socket removed)."""
        sock = self._connect()
        if sock is None:
            return None
        try:
            sock.settimeout(ACK_TIMEOUT)
            sock.sendall(wire.encode({"op": op}, value))
            header, _ = wire.decode(_read_exact(sock))
            if "ack" in header:
                sock.settimeout(None)
                return sock
        except (OSError, EOFError, ValueError):
            pass
        self._kill(sock)
        return None

    def _kill(self, sock: socket.socket) -> None:
        """End a holder that does not answer: SIGKILL to the pid the kernel names as the peer."""
        pid, uid = peer(sock)
        sock.close()
        if uid == os.getuid() and pid > 0:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _open(self, op: str, value: Any = None) -> socket.socket:
        """An acknowledged request to a live holder, starting one when there is none."""
        for _ in range(3):
            sock = self._ask(op, value)
            if sock is not None:
                return sock
            self.start()
        raise Unavailable("the holder did not answer after being started")

    def agent(self) -> AgentProxy:
        """An agent of this command's own, reached through the holder, which first sends its hello
        (or the error that kept it from starting one)."""

        sock = self._open("agent")
        seen = bytearray()
        read = _read_exact(sock)

        def keep(n: int) -> bytes:
            data = read(n)
            seen.extend(data)
            return data

        try:
            sock.settimeout(self.patience.hello)
            if keep(len(wire.MAGIC)) != wire.MAGIC:
                raise EOFError
            header, _ = wire.decode(keep)
        except (OSError, EOFError, ValueError):
            sock.close()
            raise TargetError(
                f"the connection to target {self.name} was lost before its agent started",
                f"retry; `patchkeeper disconnect -t {self.name}` ends the held connection",
            ) from None
        if "error" in header:
            sock.close()
            raise _error(header["error"])
        sock.settimeout(None)
        return AgentProxy(SocketLink(sock, bytes(seen)), self.name, self.python, self.patience)

    def run(self, argv: list[str], timeout: float, input: bytes | None) -> tuple[int, bytes, bytes]:
        sock = self._open("run", [argv, timeout, input])
        try:
            sock.settimeout(
                timeout + self.patience.hello
            )  # the holder answers when the program is done or timed out
            header, value = wire.decode(_read_exact(sock))
        except (OSError, EOFError, ValueError):
            raise TargetError(
                f"the connection to target {self.name} was lost while running {argv[0]}",
                f"retry; `patchkeeper disconnect -t {self.name}` ends the held connection",
            ) from None
        finally:
            sock.close()
        if "error" in header:
            raise _error(header["error"])
        code, out, err = value
        return code, out, err

    def stop(self) -> bool:
        """Ask the holder to exit; True when one was there."""
        sock = self._ask("stop")
        if sock is None:
            return False
        try:
            sock.settimeout(ACK_TIMEOUT)
            wire.decode(_read_exact(sock))
        except (OSError, EOFError, ValueError):
            pass
        finally:
            sock.close()
        return True

    # ---- starting ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start a holder and wait until it is connected (or says why it cannot be)."""

        spec = json.dumps(
            {
                "name": self.name,
                "ssh": self.ssh,
                "python": self.python,
                "persist": self.persist,
                "path": self.path,
                "identity": self.identity,
                "timeout": self.patience.silence,
            }
        )
        log = open(self.path[:-5] + ".log", "wb")  # the holder's own stderr, for a post-mortem
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "patchkeeper.targets.holder", spec],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            log.close()
        assert proc.stdout is not None
        with proc.stdout:
            line = proc.stdout.readline()
        try:
            doc = json.loads(line)
        except ValueError:
            proc.wait()
            raise Unavailable(f"the holder exited ({proc.returncode}) before it was ready") from None
        if "error" in doc:
            proc.wait()
            raise _error(doc["error"])


def error_doc(exc: PatchkeeperError) -> dict[str, str]:
    """How a holder tells a command why it failed (the same error, raised again there)."""
    return {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}


def _error(doc: dict[str, str]) -> PatchkeeperError:
    kind = {
        "BadInput": BadInput,
        "TargetError": TargetError,
        "_Said": TargetError,
        "Unreachable": Unreachable,
    }.get(doc.get("type", ""), PatchkeeperError)
    return kind(doc.get("message", "the held connection failed"), doc.get("hint", ""))


def stop_all() -> list[int]:
    """Ask every holder in this user's socket directory to exit; return the pids that were asked."""
    try:
        directory = socket_dir()
    except Unavailable:
        return []
    pids = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".sock"):
            continue
        path = os.path.join(directory, name)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            continue
        pid, uid = peer(sock)
        if uid != os.getuid():
            sock.close()
            continue
        try:
            sock.settimeout(ACK_TIMEOUT)
            sock.sendall(wire.encode({"op": "stop"}))
            wire.decode(_read_exact(sock))
            wire.decode(_read_exact(sock))
        except (OSError, EOFError, ValueError):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        finally:
            sock.close()
        pids.append(pid)
    return pids
