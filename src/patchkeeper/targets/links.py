"""How an agent is started and reached: the program the target's Python is sent (the sources of
`patchkeeper.host`, built there into a package), and the ends of the wire to it: an SSH exec channel
on a host, the pipes of a subprocess on this machine. (A holder's socket is persist.SocketLink.)
"""

from __future__ import annotations

import os
import select
import shlex
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from importlib import resources
from typing import Any, Protocol, cast

from ..host import blake3pipe

# The agent's modules, in import order; on the host they become the package `pkagent`.
AGENT_MODULES = (
    "errors",
    "queries",
    "answers",
    "contract",
    "blake3pipe",
    "progress",
    "disk",
    "filekeys",
    "manifest_text",
    "statcache",
    "fileops",
    "store",
    "manifests",
    "preflight",
    "compare",
    "distinfo",
    "seal",
    "elf",
    "distcheck",
    "pycompare",
    "bytecode",
    "interp",
    "startup",
    "gpu",
    "fingerprint",
    "treecheck",
    "statelock",
    "unitdirs",
    "agent",
    "wire",
)
_BOOT = """
import sys, types
pkg = types.ModuleType("pkagent"); pkg.__path__ = []; sys.modules["pkagent"] = pkg
for name, source in MODULES:
    mod = types.ModuleType("pkagent." + name); mod.__package__ = "pkagent"
    sys.modules[mod.__name__] = mod; setattr(pkg, name, mod)
    exec(compile(source, name + ".py", "exec"), mod.__dict__)
pkg.wire.serve(pkg.agent.Agent())
"""


def program() -> bytes:
    """The agent's modules as one script that builds them as a package and serves an Agent on
    stdin/stdout (relative imports between them work as they do locally)."""

    sources = [
        (name, resources.files("patchkeeper.host").joinpath(f"{name}.py").read_text(encoding="utf-8"))
        for name in AGENT_MODULES
    ]
    return f"MODULES = {sources!r}\n{_BOOT}".encode()


def argv(python: str, size: int) -> list[str]:
    """The interpreter, isolated, reading `size` bytes of program from stdin."""
    return [python, "-I", "-c", f"import sys;exec(sys.stdin.buffer.read({size}))"]


def command_line(python: str, size: int) -> str:
    """The exec request of an SSH channel: `argv`, quoted for the login shell."""
    return " ".join(shlex.quote(a) for a in argv(python, size))


class Link(Protocol):
    """A started agent's end of the wire: bytes in, bytes out, its stderr for an error message."""

    def send(self, data: bytes) -> None: ...

    def recv(self, n: int) -> bytes: ...  # b"" at the end; TimeoutError after `settimeout` seconds of silence

    def settimeout(self, seconds: float | None) -> None: ...

    def stderr(self) -> str: ...  # its last line

    def close(
        self, wait: bool = True
    ) -> None: ...  # wait=False: the agent is frozen or gone, do not wait for it


class SshLink:
    """The agent started on a host through an SSH exec channel (a paramiko Channel)."""

    def __init__(self, channel: Any, python: str, program: bytes, wait: float | None = None) -> None:
        self._chan = channel
        # paramiko waits for the exec request's reply without a bound: a host that froze after
        # opening the session would hold us forever, so the channel is closed after `wait`
        fired = threading.Event()

        def give_up() -> None:
            fired.set()
            channel.close()

        watchdog = threading.Timer(wait, give_up) if wait else None
        if watchdog is not None:
            watchdog.daemon = True
            watchdog.start()
        try:
            channel.exec_command(command_line(python, len(program)))
        except Exception as exc:  # paramiko's SSHException: "Channel closed." once the watchdog fired
            if fired.is_set():
                raise TimeoutError(f"the host did not start its interpreter within {wait:g} s") from exc
            raise
        finally:
            if watchdog is not None:
                watchdog.cancel()
        channel.sendall(program)

    def send(self, data: bytes) -> None:
        self._chan.sendall(data)

    def recv(self, n: int) -> bytes:
        return cast(bytes, self._chan.recv(n))

    def settimeout(self, seconds: float | None) -> None:
        self._chan.settimeout(seconds)

    def stderr(self) -> str:
        out = b""
        while self._chan.recv_stderr_ready():
            out += self._chan.recv_stderr(65536)
        return _last_line(out)

    def close(self, wait: bool = True) -> None:
        try:
            self._chan.shutdown_write()  # end of input: the agent returns and exits
            if wait:
                self._chan.status_event.wait(10)  # (one that floods its stdout unread never does)
        except Exception:
            pass
        self._chan.close()


class PipeLink:
    """The agent started on this machine in another interpreter, over its stdin and stdout; or, given
    `wrap`, through a program that runs it elsewhere (Ansible's ssh: targets/ansible_link.py)."""

    def __init__(
        self, python: str, program: bytes, wrap: Callable[[list[str]], list[str]] | None = None
    ) -> None:
        self._err = tempfile.TemporaryFile()  # a file, not a pipe: a chatty stderr cannot block it
        self._timeout: float | None = None
        # on this machine, an interpreter without blake3 hashes through this one's, so a local target's
        # blake3 records stay readable whichever Python runs its agent (host/blake3pipe.py)
        helper = {blake3pipe.VARIABLE: sys.executable} if sys.executable and wrap is None else {}
        try:
            command = argv(python, len(program))
            self._proc = subprocess.Popen(
                wrap(command) if wrap else command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._err,
                env={**os.environ, **helper},
            )
        except OSError:
            self._err.close()
            raise
        # sent on a thread: an interpreter that prints much before it reads (a sitecustomize) would
        # otherwise fill its stdout while this process fills its stdin, each waiting for the other
        self._sending = threading.Thread(target=self._send_program, args=(program,), daemon=True)
        self._sending.start()

    def _send_program(self, program: bytes) -> None:
        try:
            self._write(program)
        except OSError:
            pass  # the interpreter is gone: reading its hello says so

    def _write(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(data)
        self._proc.stdin.flush()

    def send(self, data: bytes) -> None:
        self._sending.join()
        self._write(data)

    def recv(self, n: int) -> bytes:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        if self._timeout is not None and not select.select([fd], [], [], self._timeout)[0]:
            raise TimeoutError(f"nothing for {self._timeout:g} s")
        return os.read(fd, n)

    def settimeout(self, seconds: float | None) -> None:
        self._timeout = seconds

    def stderr(self) -> str:
        self._err.seek(0)
        return _last_line(self._err.read())

    def close(self, wait: bool = True) -> None:
        if not wait:  # frozen (SIGSTOP is no obstacle to SIGKILL) or gone: its journal stays for `recover`
            self._proc.kill()
        try:
            if self._proc.stdout is not None:
                self._proc.stdout.close()  # nothing more is read: an interpreter still printing stops too
            self._sending.join(5)
            if self._sending.is_alive():  # it never read its program: closing stdin under the writer would
                self._proc.kill()  # wait on the writer's lock for as long as the process lives
                self._sending.join()
            if self._proc.stdin is not None:
                self._proc.stdin.close()  # end of input: the agent returns and exits
            self._proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()
        self._err.close()


def _last_line(out: bytes) -> str:
    lines = out.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""
