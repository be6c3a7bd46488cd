"""The controller: one process of this user's holding every held SSH connection, each with a ready agent.

Started by persist.start as `python -m patchkeeper.targets.holder SOCKET`: listens on that socket,
prints one JSON line (ready), serves each command on a thread; a request names its target
(persist.Holder.spec). A target's first request connects (one paramiko transport per target, all
here) and starts a spare agent; `agent` hands it to the command and relays both ways. A command that
ends cleanly parks the agent (locks released, what it remembered forgotten): the next command's
spare, no new process, no upload. Any other end closes the agent's input: it exits, releasing what
it held, and a new spare is started. `run` runs a program on the host; `ping` (this pid, the spare's);
`stop` ends one target's connection, `stop-all` every one (the controller exits once it answered).
A connection ends after its `persist` seconds idle or when the host drops it; the controller exits
once it holds none.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import sys
import threading
import time
import zlib
from typing import Any

from .. import faults
from ..errors import PatchkeeperError
from ..host import wire
from ..workspace import TargetConfig
from .persist import _read_exact, error_doc, peer
from .remote_agent import AgentProxy
from .ssh import SshTarget

EMPTY_GRACE = 2.0  # seconds the controller stays up holding nothing (a command may be on its way)


class Held:
    """One target's kept SSH transport, its spare agent, and the bookkeeping of idleness."""

    def __init__(self, spec: dict[str, Any]) -> None:
        config = TargetConfig(
            name=spec["name"],
            python=spec["python"],
            package="",
            ssh=spec["ssh"],
            identity_file=spec.get("identity"),
            timeout=float(spec.get("timeout", 30)),
        )
        self.target = SshTarget(config, persist=0)
        self.persist = float(spec["persist"])
        self.active = 0
        self.last = time.monotonic()
        self.spare: AgentProxy | None = None
        self.filling = threading.Condition()  # guards `spare`, `parks` and `active`
        self.starting = threading.Lock()  # one spare started at a time (never under `filling`)
        self.parks = 0  # agents a command has parked whose answer is still on its way back
        self.stopping = threading.Event()

    def begin(self, persist: float) -> None:
        with self.filling:
            self.active, self.persist = self.active + 1, persist

    def end(self) -> None:
        with self.filling:
            self.active -= 1
            self.last = time.monotonic()

    def idle(self) -> bool:
        """No command for `persist` seconds, or the host dropped the connection."""
        with self.filling:
            if self.active:
                return False
            expired = time.monotonic() - self.last > self.persist
        return expired or not self.alive()

    # ---- the spare agent ---------------------------------------------------------------------
    def start_agent(self) -> AgentProxy:
        """A new agent on the host (connecting first, when this target has no transport yet)."""
        return AgentProxy.over_ssh(
            self.target._session(), self.target.name, self.target.config.python, self.target.patience
        )

    def fill(self) -> None:
        """Start an agent for the next command, unless one is ready."""
        with self.starting:
            with self.filling:
                if self.spare is not None or self.stopping.is_set():
                    return
            agent = self.start_agent()
            with self.filling:
                if self.spare is None and not self.stopping.is_set():
                    self.spare = agent
                    return
            agent.close()

    def settled(self) -> AgentProxy | None:
        """The spare, once every park in flight has ended (so a command that follows one that
        parked gets that agent rather than starting another)."""
        with self.filling:
            self.filling.wait_for(lambda: self.parks == 0 or self.spare is not None, timeout=10)
            return self.spare

    def take(self) -> AgentProxy:
        self.settled()
        with self.filling:
            agent, self.spare = self.spare, None
        if agent is not None and (_chan(agent).closed or _chan(agent).exit_status_ready()):
            agent = None
        if agent is None:
            agent = self.start_agent()
        return agent

    def alive(self) -> bool:
        transport = self.target._clients[-1].get_transport() if self.target._clients else None
        return transport is not None and transport.is_active()

    def close(self) -> None:
        self.stopping.set()
        with self.filling:
            spare, self.spare = self.spare, None
        if spare is not None:
            _chan(spare).close()
        self.target.close()

    # ---- serving a command -------------------------------------------------------------------
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
        chan.settimeout(None)  # the command's end times its reads; between calls the agent may idle long
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
                        chan.settimeout(self.target.patience.silence)  # a frozen host never answers
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
                    pass  # the next command starts one, or finds the connection gone

    def park_begun(self) -> None:
        with self.filling:
            self.parks += 1


class Controller:
    """Every held target of this user, by key (persist.held_key), behind one socket."""

    def __init__(self) -> None:
        self.held: dict[str, Held] = {}
        self.lock = threading.Lock()  # guards `held` and `active`
        self.active = 0  # commands being served
        self.stopping = threading.Event()
        self.stopped = threading.Event()  # stop-all answered its command and closed every connection
        self.public: tuple[str, int] | None = None  # the socket's public name and inode, once published

    def withdraw(self) -> None:
        """Remove our socket's public name (unless a replacement took it): the next command starts another."""
        if self.public is not None:
            path, ident = self.public
            try:
                if os.stat(path).st_ino == ident:
                    os.unlink(path)
            except FileNotFoundError:
                pass

    def serve(self, listener: socket.socket) -> None:
        listener.settimeout(0.5)
        empty_since = time.monotonic()
        while not self.stopping.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                self.reap()
                with self.lock:
                    busy = bool(self.held) or self.active > 0
                if busy:
                    empty_since = time.monotonic()
                elif time.monotonic() - empty_since > EMPTY_GRACE:
                    self.withdraw()  # before exiting: a command from now on starts a new controller
                    return
                continue
            if self.stopping.is_set():  # accepted as `stop-all` was answered: closed unanswered, so the
                conn.close()  # command starts a new controller instead of losing this one's
                break
            with self.lock:
                self.active += 1
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()
        self.stopped.wait(30)  # exiting would end the stop-all's thread before it answered

    def reap(self) -> None:
        """End the connections idle for their `persist`, or dropped by their host."""
        with self.lock:
            gone = [(key, held) for key, held in self.held.items() if held.idle()]
            for key, _ in gone:
                del self.held[key]
        for _, held in gone:
            threading.Thread(target=held.close, daemon=True).start()  # a frozen host must not stall us

    def target(self, spec: dict[str, Any]) -> Held:
        with self.lock:
            held = self.held.get(spec["key"])
            if held is None:
                held = self.held[spec["key"]] = Held(spec)
            held.begin(float(spec["persist"]))
            return held

    def handle(self, conn: socket.socket) -> None:
        held: Held | None = None
        try:
            if peer(conn)[1] != os.getuid():  # the directory is 0700; this holds even if it were not
                return
            conn.settimeout(10)
            header, value = wire.decode(_read_exact(conn))
            op = header.get("op")
            if op == "stop-all":
                self.stop_all(conn)
                return
            spec = header.get("target")
            if not isinstance(spec, dict) or not isinstance(spec.get("key"), str):
                return
            if op == "stop":
                with self.lock:
                    found = self.held.pop(spec["key"], None)
                conn.sendall(wire.encode({"ack": 1}))
                if found is not None:  # removed before answering: a command after `disconnect` connects anew
                    threading.Thread(target=found.close, daemon=True).start()
                conn.sendall(wire.encode({"ok": 1}, found is not None))
                return
            held = self.target(spec)
            conn.sendall(wire.encode({"ack": 1}))
            conn.settimeout(None)
            if op == "agent":
                held.relay(conn)
            elif op == "run":
                argv, timeout, data = value
                try:
                    answer = wire.encode({"ok": 1}, list(held.target.run(argv, timeout, data)))
                except PatchkeeperError as exc:
                    answer = wire.encode({"error": error_doc(exc)})
                conn.sendall(answer)
            elif op == "ping":
                spare = held.settled()
                conn.sendall(
                    wire.encode(
                        {"ok": 1},
                        {
                            "pid": os.getpid(),
                            "target": held.target.name,
                            "spare": spare.hello["pid"] if spare else None,
                            "held": len(self.held),
                        },
                    )
                )
        except (OSError, EOFError, ValueError, KeyError, TypeError):
            pass
        finally:
            conn.close()
            if held is not None:
                held.end()
            with self.lock:
                self.active -= 1

    def stop_all(self, conn: socket.socket) -> None:
        self.withdraw()  # first: a command from now on, or one closed unanswered below, starts another
        with self.lock:
            every, self.held = list(self.held.values()), {}
            self.stopping.set()
        try:
            faults.pause("stop-all")
            conn.sendall(wire.encode({"ack": 1}))
            conn.sendall(wire.encode({"ok": 1}, len(every)))  # before closing them (slow under load)
            closing = [threading.Thread(target=h.close, daemon=True) for h in every]
            for thread in closing:
                thread.start()
            for thread in closing:
                thread.join(5)
        finally:
            self.stopped.set()


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


def _chan(agent: AgentProxy) -> Any:  # the paramiko channel an agent started here runs on
    return agent._link._chan  # type: ignore[attr-defined]


def _publish(listener_path: str, path: str) -> bool:
    """Link our socket under its public name; False when a live controller already has it."""
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


def main(path: str) -> int:
    report = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # nothing may reach the starter's pipe but the one report line
    os.dup2(devnull, 0)
    temp = f"{path}.{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    os.umask(0o077)
    listener.bind(temp)
    listener.listen(128)
    controller = Controller()
    try:
        published = _publish(temp, path)
        if published:
            controller.public = (path, os.stat(path).st_ino)
        report.write(json.dumps({"ready": os.getpid(), "published": published}) + "\n")
        report.close()
        if published:  # else another controller won the race: commands use that one
            controller.serve(listener)
        return 0
    finally:
        controller.stopping.set()
        controller.withdraw()  # before closing: a command it leaves unanswered finds it going away
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        if not report.closed:
            report.close()
        with controller.lock:
            every, controller.held = list(controller.held.values()), {}
        for held in every:
            held.close()
        log = os.path.join(os.path.dirname(path), "controller.log")
        with contextlib.suppress(FileNotFoundError):  # our log, if it holds nothing (a traceback stays)
            if os.stat(log).st_size == 0:
                os.unlink(log)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1]))
    except KeyboardInterrupt:  # a signal meant for the command's terminal: not ours to print
        sys.exit(130)
