"""The agent in the target's own Python, reached over the wire: on a host through an SSH exec
channel, on this machine through the pipes of a subprocess.

Nothing is installed on the host. The target's interpreter is started with a bootstrap that
reads a given number of bytes from stdin and executes them: the sources of the agent's modules
(everything in `patchkeeper.host`), built there into a package, then answering framed requests
on stdin/stdout. `AgentProxy` declares the agent contract (`host.contract.AgentContract`, method
by method in contract_calls.py) and returns the same answer values as the in-process agent
(rebuilt and checked by the contract); exceptions come back as the same types where that matters
(FileNotFoundError, AgentError) and as TargetError otherwise. The agent speaks first: whatever its
interpreter printed before (wire.MAGIC) is skipped up to a bound; every read of the wire has a
timeout.
"""

from __future__ import annotations

import threading
import time
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, cast

from ..errors import TargetError
from ..host import contract as c, wire
from . import shapes
from .agent_errors import _exception, _quoted
from .base import Target, memo
from .contract_calls import ContractCalls
from .links import Link, PipeLink, SshLink, program
from .patience import Patience as Patience  # re-exported: where targets import it from

PATIENT = Patience()  # the default: a target's `timeout` of 30 s


class AgentProxy(ContractCalls):
    """The agent contract, each call one request over one link, one at a time."""

    def __init__(self, link: Link, target_name: str, python: str, patience: Patience = PATIENT) -> None:
        self._link = link
        self._name = target_name
        self._lock = threading.Lock()
        self._buf = bytearray()
        self._idle = True  # no request is half sent or half answered: the wire is between frames
        self._lost: TargetError | None = None  # why the wire is no longer usable, once it is not
        self._interrupted = False  # a call was interrupted (Ctrl-C) half sent or half answered
        self._patience = patience
        self._python = python
        self._noise = b""
        self._watch: Callable[[int, int, str], None] | None = None  # told each heartbeat's count of files
        try:
            link.settimeout(patience.hello)
            noise = self._greeting()
            header, hello = wire.decode(self._read_exact)
            if not isinstance(hello, dict) or not isinstance(hello.get("python"), str):
                raise wire.FrameError("a hello without the agent's facts")
            self.remote_algorithm: str = shapes.answer_from_wire("algorithm", hello.get("algorithm"))
            link.settimeout(patience.silence)
        except (TargetError, ValueError) as exc:
            err = link.stderr()
            link.close()
            if isinstance(exc, _Said):
                raise
            if isinstance(exc, ValueError):
                raise self._malformed("its hello", exc) from None
            raise TargetError(
                f"target {target_name}: cannot start its interpreter {python}"
                + (" on the host" if isinstance(link, SshLink) else "")
                + (f": {err}" if err else "")
                + (f" (it printed {_quoted(self._noise)} first)" if self._noise else ""),
                f"fix python = ... in [targets.{target_name}]",
            ) from None
        self.hello: dict[str, Any] = hello  # a holder hands it on to the command it gives this agent to
        self.noise = noise  # what the interpreter printed before the agent spoke (skipped)

    def _greeting(self) -> bytes:
        """Read up to the agent's magic (wire.MAGIC); return what the interpreter printed before it
        (a sitecustomize or a .pth that prints), refused once it passes wire.NOISE_MAX bytes."""
        buf = self._buf
        self._noise = b""
        while True:
            at = buf.find(wire.MAGIC)
            if at >= 0:
                noise = bytes(buf[:at])
                del buf[: at + len(wire.MAGIC)]
                return noise
            self._noise = bytes(buf)
            if len(buf) > wire.NOISE_MAX + len(wire.MAGIC):
                raise _Said(
                    f"target {self._name}: the target's Python ({self._python}) printed "
                    f"{_quoted(bytes(buf))} before the agent started: a sitecustomize or .pth?",
                    "make the target's Python print nothing when it starts (see the sitecustomize.py "
                    "and *.pth files of its site-packages)",
                )
            chunk = self._recv(1 << 16)
            if not chunk:
                raise TargetError(f"the connection to target {self._name} was lost")
            buf += chunk

    def _recv(self, n: int) -> bytes:
        try:
            return self._link.recv(n)
        except TimeoutError:
            if self._idle:  # still waiting for its hello
                raise _Said(
                    f"target {self._name}: its agent sent nothing for {self._patience.hello:g} s; "
                    "gave up waiting",
                    f"check the host and its Python ({self._python}); then run "
                    f"`patchkeeper recover -t {self._name}` (or any command on it)",
                ) from None
            raise self._give_up(  # noqa: B904 (the silence is the cause; none is chained)
                f"its agent went silent mid-call (no answer, no heartbeat for "
                f"{self._patience.silence:g} s: the host, its agent or the connection is frozen)"
            )

    def _malformed(self, what: str, exc: Exception) -> TargetError:
        return TargetError(
            f"target {self._name}: {what} from its agent is malformed: {exc}",
            f"the agent runs in {self._python} on the host, from this patchkeeper: a host that "
            "answers so is not running it as sent; nothing was changed by this answer",
        )

    @classmethod
    def over_ssh(
        cls, channel: Any, target_name: str, python: str, patience: Patience = PATIENT
    ) -> AgentProxy:
        try:
            link = SshLink(channel, python, program(), patience.silence)
        except (TimeoutError, OSError) as exc:
            channel.close()
            raise TargetError(
                f"target {target_name}: gave up: {exc} (the host, its sshd or the connection is frozen)",
                f"check the host; then run `patchkeeper recover -t {target_name}` (or any command on it); "
                "`timeout` in [targets.NAME] sets the wait",
            ) from None
        return cls(link, target_name, python, patience)

    @classmethod
    def in_subprocess(cls, target_name: str, python: str, patience: Patience = PATIENT) -> AgentProxy:
        try:
            link = PipeLink(python, program())
        except OSError as exc:
            raise TargetError(
                f"target {target_name}: cannot start its interpreter {python}: {exc}",
                f"fix python = ... in [targets.{target_name}]",
            ) from None
        return cls(link, target_name, python, patience)

    def _read_exact(self, n: int) -> bytes:
        buf = self._buf
        while len(buf) < n:
            chunk = self._recv(min(max(n - len(buf), 1 << 18), 1 << 24))
            if not chunk:
                raise self._lost_connection()
            buf += chunk
        data = bytes(buf[:n])
        del buf[:n]
        return data

    def _give_up(self, why: str) -> TargetError:
        """The error that ends this agent's use: every later call fails at once with it."""
        self._lost = TargetError(
            f"target {self._name}: gave up: {why}",
            f"run `patchkeeper recover -t {self._name}` once the host answers again: its journal "
            "finishes or undoes what was interrupted; `timeout` in [targets.NAME] sets the wait",
        )
        return self._lost

    def _lost_connection(self, detail: str = "") -> TargetError:
        self._lost = TargetError(
            f"the connection to target {self._name} was lost" + (f" {detail}" if detail else ""),
            f"run `patchkeeper recover -t {self._name}` (or any command on it): "
            "the host keeps its journal and finishes or undoes what was interrupted",
        )
        return self._lost

    def _call(self, method: str, *args: Any) -> Any:
        """The answer of one call, rebuilt as the agent's own value (host.shapes.answer_from_wire).
        Heartbeats are skipped; silence longer than the target's timeout, heartbeats without
        progress for as long (their `work` unchanged: wire._Heart), or a call running past its
        deadline (Patience.deadline), gives the agent up. A call interrupted (Ctrl-C) leaves the wire
        mid-frame: this call and every later one raise KeyboardInterrupt, and closing ends the agent."""
        with self._lock:
            if self._interrupted:  # the wire is mid-frame: what it carries now answers nothing we ask
                raise KeyboardInterrupt
            if self._lost is not None:
                raise self._lost
            try:
                return self._exchange(method, args)
            except BaseException as exc:
                if not isinstance(exc, Exception):  # Ctrl-C (or an exit) mid-call: the wire is unusable,
                    self._interrupted = True  # and every later call of this command is interrupted too
                raise

    def _exchange(self, method: str, args: tuple[Any, ...]) -> Any:
        self._idle = False
        request = wire.encode({"m": method}, [[c.to_wire(a) for a in args], {}])
        try:
            self._link.send(request)
        except OSError as exc:
            raise self._lost_connection(f"({exc})") from None
        until = time.monotonic() + self._patience.deadline(len(request))
        # the agent's work as its last heartbeats counted it, and since when
        work, since = None, time.monotonic()
        try:
            while True:
                header, value = wire.decode(self._read_exact)
                if not wire.is_beat(header):
                    break
                done, total = header.get("done"), header.get("total")
                if self._watch is not None and isinstance(done, int) and isinstance(total, int):
                    phase = header.get("phase")
                    self._watch(done, total, phase if isinstance(phase, str) else "")
                now = time.monotonic()
                if now > until:
                    raise self._give_up(  # noqa: B904 (the silence is the cause; none is chained)
                        f"{method} ran past its deadline of {self._patience.deadline(len(request)):g} s"
                    )
                counted = header.get("work")  # absent where the host's /proc does not say (not Linux)
                if type(counted) is not int or counted != work:
                    work, since = counted, now
                elif now - since > self._patience.silence:
                    raise self._give_up(
                        f"its agent made no progress for {self._patience.silence:g} s in {method}: it "
                        "sends heartbeats but reads, writes and computes nothing (a read blocked on a "
                        "FIFO or a device, a hung network mount, a lock held elsewhere)"
                    )
        except wire.FrameError as exc:
            raise self._malformed(f"the answer to {method}", exc) from None
        self._idle = not self._buf
        if "error" in header:
            raise _exception(header["error"], self._name, method)
        try:
            return shapes.answer_from_wire(method, value)
        except ValueError as exc:  # shapes.Malformed
            raise self._malformed(f"the answer to {method}", exc) from None

    def close(self) -> None:
        """End this command's use of the agent. Over a holder's socket, an agent left between two
        frames is parked (its locks released, its caches forgotten) for the holder to give to the
        next command; any other end (an interrupted call, a killed command) ends the agent."""
        park = getattr(self._link, "park", None)  # a holder's socket (persist.SocketLink) can keep the agent
        if self._lost is not None or self._interrupted:
            self._link.close(wait=False)  # a frozen agent, a dead connection, a call cut off: no waiting
            return
        if self._idle and park is not None:
            try:
                park(wire.encode({"m": "park"}, [[], {}]))
            except OSError:
                pass
        self._link.close()

    # ---- what the wire answers itself (the rest of the contract: contract_calls.py) -----------
    def hostname(self) -> str:
        if (
            "hostname" in self.hello
        ):  # the agent's answers that cannot change while it runs came with its hello
            return cast(str, self._from_hello("hostname"))
        return super().hostname()

    def interpreter(self) -> c.Interpreter:
        if "interpreter" in self.hello:
            return cast("c.Interpreter", self._from_hello("interpreter"))
        return super().interpreter()

    def _from_hello(self, method: str) -> Any:
        try:
            return shapes.answer_from_wire(method, self.hello[method])
        except ValueError as exc:
            raise self._malformed(f"the {method} in its hello", exc) from None

    def watch(self, listener: Callable[[int, int, str], None] | None) -> None:
        self._watch = listener  # no call: the heartbeats of every later call carry the count


class _Said(TargetError):
    """An error that already says what went wrong with the agent's start (not: its interpreter failed)."""


class AgentTarget(Target):
    """A target whose agent runs on the host (over SSH, or an Ansible connection): the interpreter, its
    facts and the hash algorithm are asked of that agent, and closing the target ends it."""

    _agent: AgentProxy | None = None

    @property
    @abstractmethod
    def agent(self) -> AgentProxy: ...

    def interpreter(self) -> c.Interpreter:
        """Asked of the agent, which already runs in the target's Python: no second exec."""
        return self.agent.interpreter()

    def interpreter_facts(self) -> c.InterpreterFacts:
        return self.agent.interpreter_facts()

    @memo
    def algorithm(self) -> str:
        return self.agent.remote_algorithm

    def close(self) -> None:
        if self._agent is not None:
            self._agent.close()
            self._agent = None
