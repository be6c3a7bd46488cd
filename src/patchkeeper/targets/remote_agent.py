"""The agent on a remote host: started in the target's Python over an SSH exec channel.

Nothing is installed on the host. The target's interpreter is started with a bootstrap that
reads a given number of bytes from stdin and executes them: the sources of the agent's modules
(everything in `patchkeeper.host`), built there into a package, then answering framed requests
on stdin/stdout. Calls look exactly like calls on
`patchkeeper.host.agent.Agent`; exceptions come back as the same types where that matters
(FileNotFoundError, AgentError) and as TargetError otherwise.
"""

from __future__ import annotations

import shlex
import threading
from importlib import resources

from ..host import wire
from ..errors import AgentError
from ..errors import TargetError

# The agent's modules, in import order; on the host they become the package `pkagent`.
AGENT_MODULES = ("errors", "disk", "store", "distcheck", "elf", "interp", "fingerprint", "agent", "wire")
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
    sources = [(name, resources.files("patchkeeper.host").joinpath(f"{name}.py").read_text(encoding="utf-8"))
               for name in AGENT_MODULES]
    return f"MODULES = {sources!r}\n{_BOOT}".encode("utf-8")


def command_line(python: str, size: int) -> str:
    """The exec request: the interpreter, isolated, reading `size` bytes of program from stdin."""
    boot = f"import sys;exec(sys.stdin.buffer.read({size}))"
    return " ".join(shlex.quote(a) for a in [python, "-I", "-c", boot])


class RemoteAgent:
    """Proxy with the methods of Agent; one request at a time over one channel."""

    def __init__(self, channel, target_name: str, python: str) -> None:
        self._chan = channel
        self._name = target_name
        self._lock = threading.Lock()
        self._buf = bytearray()
        code = program()
        channel.exec_command(command_line(python, len(code)))
        channel.sendall(code)
        try:
            header, hello = wire.decode(self._read_exact)
        except TargetError:
            err = self._stderr()
            raise TargetError(f"target {target_name}: cannot start its interpreter {python} on the host"
                              + (f": {err}" if err else ""),
                              f"fix python = ... in [targets.{target_name}]") from None
        self.remote_algorithm: str = hello["algorithm"]

    def _stderr(self) -> str:
        out = b""
        while self._chan.recv_stderr_ready():
            out += self._chan.recv_stderr(65536)
        lines = out.decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    def _read_exact(self, n: int) -> bytes:
        buf = self._buf
        while len(buf) < n:
            chunk = self._chan.recv(max(n - len(buf), 1 << 18))
            if not chunk:
                raise TargetError(f"the connection to target {self._name} was lost",
                                  f"run `patchkeeper recover -t {self._name}` (or any command on it): "
                                  "the host keeps its journal and finishes or undoes what was interrupted")
            buf += chunk
        data = bytes(buf[:n])
        del buf[:n]
        return data

    def call(self, method: str, *args, **kwargs):
        with self._lock:
            try:
                self._chan.sendall(wire.encode({"m": method}, [list(args), kwargs]))
            except OSError as exc:
                raise TargetError(f"the connection to target {self._name} was lost ({exc})",
                                  f"run `patchkeeper recover -t {self._name}`") from None
            header, value = wire.decode(self._read_exact)
        if "error" in header:
            raise _exception(header["error"], self._name, method)
        return value

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.call(method, *args, **kwargs)

    def close(self) -> None:
        try:
            self._chan.shutdown_write()  # end of input: the agent returns and exits
            self._chan.recv_exit_status()
        except Exception:
            pass
        self._chan.close()


def _exception(doc: dict, target: str, method: str) -> Exception:
    kind = doc["type"]
    if kind == "FileNotFoundError":
        return FileNotFoundError(doc.get("errno") or 2, doc.get("strerror") or doc["message"], doc.get("filename"))
    if kind == "AgentError" and "kind" in doc:
        return AgentError(doc["kind"], doc["message"])
    detail = doc.get("trace", "").strip().splitlines()[-1:] or [f"{kind}: {doc['message']}"]
    return TargetError(f"target {target}: {method} failed on the host: {detail[0]}",
                       "check the path and permissions on the host")
