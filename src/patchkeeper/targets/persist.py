"""Held SSH connections, as OpenSSH's ControlPersist: find, start, ask and stop the controller.

The first command to an SSH target starts the controller (targets/holder.py), one process per user
session that keeps a paramiko transport and a ready agent for every held target, listening on one
Unix socket, `$XDG_RUNTIME_DIR/patchkeeper/controller-<code>.sock` (0700; the controller checks each peer's
uid with SO_PEERCRED, and so does the client). Each request names its target; later commands ask the
controller over that socket: no paramiko import, no handshake, no agent upload. Each command has
the agent to itself; a command that ends cleanly parks it (releasing every lock) for the next one,
and a command that dies leaves it to exit, so a lock still dies with the command that took it. A
controller that is gone, or going away (it withdrew its socket's name as it began to exit), is
replaced; one that still has its name and does not answer is killed and replaced; anything else (no
runtime directory, an unsafe one) falls back to a direct connection.
"""

from __future__ import annotations

import functools
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

ACK_TIMEOUT = 5.0  # a holder that does not acknowledge a request within this is wedged
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class Unavailable(Exception):
    """No holder can be used here (an unsafe socket directory, a path too long): connect directly."""


def socket_dir() -> str:
    """$XDG_RUNTIME_DIR/patchkeeper (the user's runtime directory, as systemd and OpenSSH scope
    theirs; without one nothing is held): created 0700, refused unless it is a real directory of
    this user that no one else can enter."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if not base or not os.path.isabs(base) or not os.path.isdir(base):
        raise Unavailable("no $XDG_RUNTIME_DIR")
    path = os.path.join(base, "patchkeeper")
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


def socket_path() -> str:
    """The controller's socket, named by the code it runs (code_digest): a controller that another
    version of patchkeeper started runs that version's agents, whose calls need not be this one's, so
    each version asks its own (the other idles out after its `persist`)."""
    path = os.path.join(socket_dir(), f"controller-{code_digest()}.sock")
    if len(path.encode()) >= 100:  # sun_path holds 108 bytes; leave room for the controller's temp name
        raise Unavailable(f"socket path {path} is too long")
    return path


@functools.cache
def code_digest() -> str:
    """12 hex digits of the sha256 of the controller's code and its agents': every module of
    patchkeeper.targets and patchkeeper.host (read once a process)."""
    h = hashlib.sha256()
    for package in ("targets", "host"):
        folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), package)
        for name in sorted(n for n in os.listdir(folder) if n.endswith(".py")):
            with open(os.path.join(folder, name), "rb") as f:
                h.update(b"%s/%s:%d:" % (package.encode(), name.encode(), os.fstat(f.fileno()).st_size))
                h.update(f.read())
    return h.hexdigest()[:12]


def held_key(ssh: str | None, python: str, identity: str | None = None) -> str:
    """One held connection per (ssh spec, interpreter, key, home: whose ~/.ssh/config says how)."""
    doc = json.dumps([ssh, python, identity, os.path.expanduser("~")])
    return hashlib.sha256(doc.encode()).hexdigest()[:24]


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
    """One SSH target's held connection in the controller, seen from a command."""

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
        self.path = socket_path()
        self.spec = {
            "key": held_key(ssh, python, identity),
            "name": name,
            "ssh": ssh,
            "python": python,
            "persist": persist,
            "identity": identity,
            "timeout": self.patience.silence,
        }

    # ---- asking ------------------------------------------------------------------------------
    def _connect(self) -> tuple[socket.socket, int] | None:
        """A socket to the live controller of our uid (and its socket's inode), or None when none
        listens (a stale file is removed)."""
        return _connect(self.path)

    def _ask(self, op: str, value: Any = None) -> socket.socket | None:
        """Send one request; return the socket once the controller acknowledged it, or None when no
        controller is there or it did not answer (a wedged one is killed and its socket removed)."""
        found = self._connect()
        if found is None:
            return None
        sock, inode = found
        try:
            sock.settimeout(ACK_TIMEOUT)
            sock.sendall(wire.encode({"op": op, "target": self.spec}, value))
            header, _ = wire.decode(_read_exact(sock))
            if "ack" in header:
                sock.settimeout(None)
                return sock
        except (OSError, EOFError, ValueError):
            pass
        if _withdrawn(self.path, inode):  # it is going away (it withdrew its name first): start another
            sock.close()
            return None
        _kill(sock, self.path, inode)
        return None

    def _open(self, op: str, value: Any = None) -> socket.socket:
        """An acknowledged request to the live controller, starting one when there is none."""
        for _ in range(3):
            sock = self._ask(op, value)
            if sock is not None:
                return sock
            start(self.path)
        raise Unavailable("the controller did not answer after being started")

    def agent(self) -> AgentProxy:
        """An agent of this command's own, reached through the controller, which first sends its
        hello (or the error that kept it from starting one)."""

        sock = self._open("agent")
        seen = bytearray()
        read = _read_exact(sock)

        def keep(n: int) -> bytes:
            data = read(n)
            seen.extend(data)
            return data

        waited = self.patience.silence + self.patience.hello + ACK_TIMEOUT
        try:
            # the controller connects (each step bounded by the timeout) and starts an agent (hello)
            sock.settimeout(waited)
            if keep(len(wire.MAGIC)) != wire.MAGIC:
                raise EOFError
            header, _ = wire.decode(keep)
        except TimeoutError:
            sock.close()
            raise TargetError(
                f"target {self.name}: gave up: no agent started within {waited:g} s "
                "(the host, its sshd or the connection is frozen)",
                f"check the host; then run `patchkeeper recover -t {self.name}` (or any command on it); "
                "`timeout` in [targets.NAME] sets the wait",
            ) from None
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
                timeout + self.patience.silence + ACK_TIMEOUT
            )  # the controller answers when the program is done or timed out
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
        """End this target's held connection; True when there was one."""
        sock = self._ask("stop")
        if sock is None:
            return False
        try:
            sock.settimeout(ACK_TIMEOUT)
            _, value = wire.decode(_read_exact(sock))
            return bool(value)
        except (OSError, EOFError, ValueError):
            return True
        finally:
            sock.close()


def _connect(path: str) -> tuple[socket.socket, int] | None:
    try:
        inode = os.stat(path).st_ino
    except FileNotFoundError:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        _unlink_if(path, inode)  # nobody listens: a controller that died without cleaning up
        return None
    except OSError as exc:
        sock.close()
        raise Unavailable(f"cannot connect to {path}: {exc}") from None
    if peer(sock)[1] != os.getuid():
        sock.close()
        raise Unavailable(f"{path} is held by another user")
    return sock, inode


def _withdrawn(path: str, inode: int) -> bool:
    """Whether the controller whose socket had `inode` no longer has the public name: it withdrew it
    as it began to exit (holder.Controller withdraws before it stops accepting), or another one took
    it. Such a controller did not answer because it is going away, not because it is wedged."""
    try:
        return os.stat(path).st_ino != inode
    except FileNotFoundError:
        return True


def _unlink_if(path: str, inode: int) -> None:
    """Remove `path` if it is still the file we found (not a new controller's socket)."""
    try:
        if os.stat(path).st_ino == inode:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _kill(sock: socket.socket, path: str, inode: int) -> None:
    """End a controller that does not answer: SIGKILL to the pid the kernel names as the peer."""
    pid, uid = peer(sock)
    sock.close()
    if uid == os.getuid() and pid > 0:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _unlink_if(path, inode)


def start(path: str) -> None:
    """Start the controller and wait until it listens (a controller started meanwhile by another
    command wins: this one then exits, and commands use that one)."""
    log_path = os.path.join(os.path.dirname(path), "controller.log")
    log = open(log_path, "ab")  # the controller's own stderr, for a post-mortem; removed when empty
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "patchkeeper.targets.holder", path],
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
        json.loads(line)["ready"]
    except (ValueError, KeyError, TypeError):
        proc.wait()
        raise Unavailable(f"the controller exited ({proc.returncode}) before it was ready") from None


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


def stop_all() -> int | None:
    """End every held connection of this user (the controller exits); return how many there were, or
    None when the controller did not answer in time and was stopped (its connections end with it, but
    how many it held is not known)."""
    try:
        path = socket_path()
        found = _connect(path)
    except Unavailable:
        return 0
    if found is None:
        return 0
    sock, inode = found
    acked = False
    try:
        sock.settimeout(ACK_TIMEOUT)
        sock.sendall(wire.encode({"op": "stop-all"}))
        read = _read_exact(sock)
        wire.decode(read)
        acked = True
        _, count = wire.decode(read)
        return int(count)
    except (OSError, EOFError, ValueError, TypeError) as exc:
        unheard = isinstance(exc, (ConnectionResetError, BrokenPipeError))  # closed before it read ours
        if not acked and unheard and _withdrawn(path, inode):
            return 0  # by a controller going away on its own, holding nothing
        _kill(sock, path, inode)
        return None
    finally:
        sock.close()
