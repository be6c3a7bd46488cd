"""The holder process of one SSH target: keeps the connection and a ready agent for later commands.

Started by persist.Holder.start as `python -m patchkeeper.targets.holder SPEC`. It connects, starts
a spare agent, publishes its socket, prints one JSON line (ready, or the error) and then serves
requests, one thread per command: `agent` hands the spare agent to the command and relays its
requests and answers. A command that finishes cleanly parks the agent (its locks released, what
it remembered for that command forgotten), which then stays the spare for the next command: no
new process, no upload.
Any other end (the command killed or interrupted mid-call) closes the agent's input, so it exits
and releases what it held, and a new spare is started. `run` runs a program on the host; `ping`
(the holder's pid and its spare agent's); `stop`. It exits after `persist` seconds without a
command, on `stop`, or when the host drops the connection.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading
import time
import zlib
from typing import Any

from ..errors import PatchkeeperError, TargetError
from ..host import wire
from ..workspace import TargetConfig
from .persist import _read_exact, error_doc, peer
from .remote_agent import AgentProxy
from .ssh import SshTarget


class Held:
    """One kept SSH transport, the spare agent, and the bookkeeping of idleness."""

    def __init__(self, target: SshTarget, persist: float) -> None:
        self.target = target
        self.persist = persist
        self.active = 0
        self.last = time.monotonic()
        self.lock = threading.Lock()
        self.spare: AgentProxy | None = None
        self.filling = threading.Condition()  # guards `spare` and `parks`
        self.parks = 0  # agents a command has parked whose answer is still on its way back
        self.stopping = threading.Event()
        self.public: tuple[str, int] | None = None  # the socket's public name and inode, once published

    def withdraw(self) -> None:
        """Remove our socket's public name (unless a replacement has taken it): no new command can
        reach this holder, and the next one starts another."""
        if self.public is not None:
            path, ident = self.public
            try:
                if os.stat(path).st_ino == ident:
                    os.unlink(path)
            except FileNotFoundError:
                pass

    # ---- the spare agent ---------------------------------------------------------------------
    def fill(self) -> None:
        """Start an agent for the next command, unless one is ready."""
        with self.filling:
            if self.spare is None and not self.stopping.is_set():
                self.spare = AgentProxy.over_ssh(
                    self.target._session(), self.target.name, self.target.config.python, self.target.patience
                )

    def settled(self) -> AgentProxy | None:
        """The spare, once every park in flight has ended (so a command that follows one that
        parked gets that agent rather than starting another)."""
        with self.filling:
            self.filling.wait_for(lambda: self.parks == 0 or self.spare is not None, timeout=10)
            return self.spare

    def take(self) -> AgentProxy:
        self.settled()
        with self.filling:
            if self.spare is None or _chan(self.spare).closed or _chan(self.spare).exit_status_ready():
                self.spare = None
        self.fill()
        with self.filling:
            agent, self.spare = self.spare, None
        if agent is None:
            raise TargetError(f"target {self.target.name}: the held connection is closing", "retry")
        return agent

    def alive(self) -> bool:
        transport = self.target._clients[-1].get_transport() if self.target._clients else None
        return transport is not None and transport.is_active()

    # ---- serving -----------------------------------------------------------------------------
    def serve(self, listener: socket.socket) -> None:
        listener.settimeout(0.5)
        while not self.stopping.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                with self.lock:
                    idle = self.active == 0 and time.monotonic() - self.last > self.persist
                if idle or not self.alive():
                    return
                continue
            if self.stopping.is_set():  # accepted as `stop` was answered: closed unanswered, so the
                conn.close()  # command starts a new holder instead of losing this one's
                return
            with self.lock:
                self.active += 1
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        try:
            if peer(conn)[1] != os.getuid():  # the directory is 0700; this holds even if it were not
                return
            conn.settimeout(10)
            header, value = wire.decode(_read_exact(conn))
            conn.sendall(wire.encode({"ack": 1}))
            conn.settimeout(None)
            op = header.get("op")
            if op == "agent":
                self.relay(conn)
            elif op == "run":
                argv, timeout, data = value
                try:
                    answer = wire.encode({"ok": 1}, list(self.target.run(argv, timeout, data)))
                except PatchkeeperError as exc:
                    answer = wire.encode({"error": error_doc(exc)})
                conn.sendall(answer)
            elif op == "ping":
                spare = self.settled()
                conn.sendall(
                    wire.encode(
                        {"ok": 1},
                        {
                            "pid": os.getpid(),
                            "target": self.target.name,
                            "spare": spare.hello["pid"] if spare else None,
                        },
                    )
                )
            elif op == "stop":
                self.stopping.set()
                self.withdraw()  # before answering: a command started after `disconnect` finds no socket
                conn.sendall(wire.encode({"ok": 1}))
        except (OSError, EOFError, ValueError):
            pass
        finally:
            conn.close()
            with self.lock:
                self.active -= 1
                self.last = time.monotonic()

    def relay(self, conn: socket.socket) -> None:
        """Give the spare agent to this command: its hello, then frames up and bytes down until one
        side ends. A command that ends by parking the agent (between two calls, its locks released)
        leaves it to be the next spare; any other end closes the agent's input and it exits."""
        try:
            agent = self.take()
        except PatchkeeperError as exc:
            conn.sendall(wire.MAGIC + wire.encode({"error": error_doc(exc)}))
            return
        chan = _chan(agent)
        chan.settimeout(
            None
        )  # the command's end times its reads; between its calls the agent may be idle for long
        parking = threading.Event()
        parked: bool | None = False
        keep: AgentProxy | None = agent
        try:
            conn.sendall(wire.MAGIC + wire.encode({"hello": 1}, agent.hello))
            pump = threading.Thread(
                target=_upstream, args=(conn, chan, parking, self.park_begun), daemon=True
            )
            pump.start()
            answer = bytearray()
            try:
                while data := chan.recv(1 << 16):
                    if parking.is_set():  # every earlier answer reached the command before it parked
                        answer += data
                        parked = _is_parked(answer)
                        if parked is not None:
                            break
                    else:
                        conn.sendall(data)
            except OSError:
                pass
            try:
                conn.shutdown(socket.SHUT_RDWR)  # the agent is gone or parked: so is the command's connection
            except OSError:
                pass
            pump.join()
        finally:
            with self.filling:
                if parked and not self.stopping.is_set() and self.spare is None:
                    self.spare, keep = agent, None
                if parking.is_set():
                    self.parks -= 1
                    self.filling.notify_all()
            if keep is not None:
                chan.close()
            if not self.stopping.is_set():
                try:
                    self.fill()
                except (PatchkeeperError, OSError, EOFError):
                    pass  # the next command starts one, or finds the holder gone

    def park_begun(self) -> None:
        with self.filling:
            self.parks += 1


def _upstream(conn: socket.socket, chan: Any, parking: threading.Event, begun: Any) -> None:
    """The command's requests to the agent, frame by frame (wire.py's framing), until the command
    ends: at a `park` request, counted as a park in flight, sent on with `parking` set first, and
    the command's side shut (it may exit: whoever comes next waits for the park); at anything else
    (the command gone, a broken frame), the agent's input is closed and it exits."""
    read = _read_exact(conn)
    try:
        while True:
            prefix = read(4)
            (size,) = struct.unpack(">I", prefix)
            head = read(size & ~wire.SQUEEZED)
            doc = json.loads(zlib.decompress(head) if size & wire.SQUEEZED else head)
            if doc.get("m") == "park" and not doc.get("n"):
                begun()
                parking.set()
                chan.sendall(prefix + head)
                try:
                    conn.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            chan.sendall(prefix + head)
            for n in doc.get("n") or ():
                while n > 0:
                    chunk = read(min(n, 1 << 20))
                    chan.sendall(chunk)
                    n -= len(chunk)
    except (OSError, EOFError, ValueError, TypeError, zlib.error):
        pass
    try:
        chan.shutdown_write()  # the command is gone or done: the agent reads EOF and exits
        if not chan.status_event.wait(10):  # one frozen (SIGSTOP) never does: the relay must not wait for it
            chan.close()
    except Exception:
        pass


def _is_parked(answer: bytearray) -> bool | None:
    """None while the park answer is incomplete; then whether it is exactly the agent's "parked"."""
    view = memoryview(answer)
    pos = 0

    def read(n: int) -> bytes:
        nonlocal pos
        if pos + n > len(view):
            raise EOFError
        pos += n
        return bytes(view[pos - n : pos])

    try:
        header, value = wire.decode(read)
        while wire.is_beat(header):  # the park itself ran long enough to send a heartbeat
            header, value = wire.decode(read)
    except EOFError:
        return None
    except ValueError:
        return False
    return header.get("ok") == 1 and value == "parked" and pos == len(answer)


def _chan(agent: AgentProxy) -> Any:
    """The paramiko channel an agent started by this holder runs on."""
    return agent._link._chan  # type: ignore[attr-defined]


def _publish(listener_path: str, path: str) -> bool:
    """Link our socket under its public name; False when a live holder already has it."""
    for _ in range(3):
        try:
            os.link(listener_path, path)
            return True
        except FileExistsError:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
                return False
            except (ConnectionRefusedError, FileNotFoundError):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            finally:
                probe.close()
    return False


def main(spec: dict[str, Any]) -> int:
    report = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # nothing may reach the starter's pipe but the one report line
    os.dup2(devnull, 0)
    config = TargetConfig(
        name=spec["name"],
        python=spec["python"],
        package="",
        ssh=spec["ssh"],
        identity_file=spec.get("identity"),
        timeout=float(spec.get("timeout", 30)),
    )
    target = SshTarget(config, persist=0)
    path = spec["path"]
    temp = f"{path}.{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    os.umask(0o077)
    listener.bind(temp)
    listener.listen(64)
    held = Held(target, float(spec["persist"]))
    try:
        try:
            target._client()
            held.fill()
        except PatchkeeperError as exc:
            report.write(json.dumps({"error": error_doc(exc)}) + "\n")
            return 1
        published = _publish(temp, path)
        if published:
            held.public = (path, os.stat(path).st_ino)
        report.write(json.dumps({"ready": os.getpid(), "published": published}) + "\n")
        report.close()
        if published:  # else another holder won the race: commands use that one
            held.serve(listener)
        return 0
    finally:
        held.stopping.set()
        listener.close()
        held.withdraw()  # still ours (a replacement may have taken the name)
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        if not report.closed:
            report.close()
        target.close()


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
