"""The agent in the target's own Python, reached over the wire: on a host through an SSH exec
channel, on this machine through the pipes of a subprocess.

Nothing is installed on the host. The target's interpreter is started with a bootstrap that
reads a given number of bytes from stdin and executes them: the sources of the agent's modules
(everything in `patchkeeper.host`), built there into a package, then answering framed requests
on stdin/stdout. `AgentProxy` declares the agent contract (`host.contract.AgentContract`) method
by method and returns the same answer values as the in-process agent (rebuilt by the contract); exceptions come back as the same types where that matters (FileNotFoundError,
AgentError) and as TargetError otherwise.
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
from typing import Any, Protocol

from ..errors import AgentError, TargetError
from ..host import blake3pipe, wire
from ..host import contract as c

# The agent's modules, in import order; on the host they become the package `pkagent`.
AGENT_MODULES = ("errors", "contract", "blake3pipe", "disk", "store", "distinfo", "seal", "distcheck", "treecheck", "manifest_text",
                 "manifests", "compare", "preflight", "elf", "interp", "fingerprint", "agent", "wire")
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
    from importlib import resources

    sources = [(name, resources.files("patchkeeper.host").joinpath(f"{name}.py").read_text(encoding="utf-8"))
               for name in AGENT_MODULES]
    return f"MODULES = {sources!r}\n{_BOOT}".encode("utf-8")


def argv(python: str, size: int) -> list[str]:
    """The interpreter, isolated, reading `size` bytes of program from stdin."""
    return [python, "-I", "-c", f"import sys;exec(sys.stdin.buffer.read({size}))"]


def command_line(python: str, size: int) -> str:
    """The exec request of an SSH channel: `argv`, quoted for the login shell."""
    return " ".join(shlex.quote(a) for a in argv(python, size))


class Link(Protocol):
    """A started agent's end of the wire: bytes in, bytes out, its stderr for an error message."""

    def send(self, data: bytes) -> None: ...

    def recv(self, n: int) -> bytes: ...  # b"" at the end

    def stderr(self) -> str: ...  # its last line

    def close(self) -> None: ...


class SshLink:
    """The agent started on a host through an SSH exec channel (a paramiko Channel)."""

    def __init__(self, channel: Any, python: str, program: bytes) -> None:
        self._chan = channel
        channel.exec_command(command_line(python, len(program)))
        channel.sendall(program)

    def send(self, data: bytes) -> None:
        self._chan.sendall(data)

    def recv(self, n: int) -> bytes:
        return self._chan.recv(n)

    def stderr(self) -> str:
        out = b""
        while self._chan.recv_stderr_ready():
            out += self._chan.recv_stderr(65536)
        return _last_line(out)

    def close(self) -> None:
        try:
            self._chan.shutdown_write()  # end of input: the agent returns and exits
            self._chan.recv_exit_status()
        except Exception:
            pass
        self._chan.close()


class PipeLink:
    """The agent started on this machine in another interpreter, over its stdin and stdout."""

    def __init__(self, python: str, program: bytes) -> None:
        import subprocess  # here: a command that reaches its agent through a holder starts no process
        import tempfile

        self._err = tempfile.TemporaryFile()  # a file, not a pipe: a chatty stderr cannot block it
        # an interpreter without blake3 hashes through this one's, so a local target's blake3 records stay
        # readable whichever Python runs its agent (host/blake3pipe.py)
        helper = {blake3pipe.VARIABLE: sys.executable} if sys.executable else {}
        try:
            self._proc = subprocess.Popen(argv(python, len(program)), stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=self._err, env={**os.environ, **helper})
        except OSError:
            self._err.close()
            raise
        self.send(program)

    def send(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(data)
        self._proc.stdin.flush()

    def recv(self, n: int) -> bytes:
        assert self._proc.stdout is not None
        return os.read(self._proc.stdout.fileno(), n)

    def stderr(self) -> str:
        self._err.seek(0)
        return _last_line(self._err.read())

    def close(self) -> None:
        import subprocess

        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()  # end of input: the agent returns and exits
            self._proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._err.close()


def _last_line(out: bytes) -> str:
    lines = out.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""


class AgentProxy(c.AgentContract):
    """The agent contract, each call one request over one link, one at a time."""

    concurrent = False  # (the contract's) one channel: calls never overlap, and a forked copy would share it

    def __init__(self, link: Link, target_name: str, python: str) -> None:
        self._link = link
        self._name = target_name
        self._lock = threading.Lock()
        self._buf = bytearray()
        self._idle = True  # no request is half sent or half answered: the wire is between frames
        try:
            header, hello = wire.decode(self._read_exact)
        except TargetError:
            err = link.stderr()
            link.close()
            raise TargetError(f"target {target_name}: cannot start its interpreter {python}"
                              + (" on the host" if isinstance(link, SshLink) else "")
                              + (f": {err}" if err else ""),
                              f"fix python = ... in [targets.{target_name}]") from None
        self.hello: dict[str, Any] = hello  # a holder hands it on to the command it gives this agent to
        self.remote_algorithm: str = hello["algorithm"]
        self.remote_python: str = hello["python"]

    @classmethod
    def over_ssh(cls, channel: Any, target_name: str, python: str) -> "AgentProxy":
        return cls(SshLink(channel, python, program()), target_name, python)

    @classmethod
    def in_subprocess(cls, target_name: str, python: str) -> "AgentProxy":
        try:
            link = PipeLink(python, program())
        except OSError as exc:
            raise TargetError(f"target {target_name}: cannot start its interpreter {python}: {exc}",
                              f"fix python = ... in [targets.{target_name}]") from None
        return cls(link, target_name, python)

    def _read_exact(self, n: int) -> bytes:
        buf = self._buf
        while len(buf) < n:
            chunk = self._link.recv(max(n - len(buf), 1 << 18))
            if not chunk:
                raise TargetError(f"the connection to target {self._name} was lost",
                                  f"run `patchkeeper recover -t {self._name}` (or any command on it): "
                                  "the host keeps its journal and finishes or undoes what was interrupted")
            buf += chunk
        data = bytes(buf[:n])
        del buf[:n]
        return data

    def _call(self, method: str, *args: Any) -> Any:
        """The answer of one call, rebuilt as the agent's own value (host.contract.answer_from_wire)."""
        with self._lock:
            self._idle = False
            try:
                self._link.send(wire.encode({"m": method}, [[c.to_wire(a) for a in args], {}]))
            except OSError as exc:
                raise TargetError(f"the connection to target {self._name} was lost ({exc})",
                                  f"run `patchkeeper recover -t {self._name}`") from None
            header, value = wire.decode(self._read_exact)
            self._idle = not self._buf
        if "error" in header:
            raise _exception(header["error"], self._name, method)
        return c.answer_from_wire(method, value)

    def close(self) -> None:
        """End this command's use of the agent. Over a holder's socket, an agent left between two
        frames is parked (its locks released, its caches forgotten) for the holder to give to the
        next command; any other end (an interrupted call, a killed command) ends the agent."""
        park = getattr(self._link, "park", None)  # a holder's socket (persist.SocketLink) can keep the agent
        if self._idle and park is not None:
            try:
                park(wire.encode({"m": "park"}, [[], {}]))
            except OSError:
                pass
        self._link.close()

    # ---- the contract, method by method (host.contract.AgentContract) -------------------------
    def hostname(self) -> str:
        if "hostname" in self.hello:  # the agent's answers that cannot change while it runs came with its hello
            return self.hello["hostname"]
        return self._call("hostname")

    def interpreter(self) -> c.Interpreter:
        if "interpreter" in self.hello:
            return c.Interpreter.from_wire(self.hello["interpreter"])
        return self._call("interpreter")

    def algorithm(self) -> str:
        return self._call("algorithm")

    def pid(self) -> int:
        return self._call("pid")

    def read(self, path: str) -> bytes:
        return self._call("read", path)

    def lstat(self, path: str) -> c.FileStat | None:
        return self._call("lstat", path)

    def realpath(self, path: str) -> str:
        return self._call("realpath", path)

    def escaping(self, root: str, rels: list[str]) -> dict[str, str]:
        return self._call("escaping", root, rels)

    def write_atomic(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._call("write_atomic", path, data, mode)

    def write_new(self, path: str, data: bytes, mode: int, durable: bool = True) -> None:
        self._call("write_new", path, data, mode, durable)

    def sync_files(self, paths: list[str]) -> None:
        self._call("sync_files", paths)

    def obstacles(self, writes: list[str], removes: list[str]) -> dict[str, str]:
        return self._call("obstacles", writes, removes)

    def read_changed(self, directory: str, suffix: str, known: dict[str, Any]) -> c.ChangedFiles:
        return self._call("read_changed", directory, suffix, known)

    def rename(self, src: str, dst: str, durable: bool = True) -> None:
        self._call("rename", src, dst, durable)

    def unlink(self, path: str, durable: bool = True) -> bool:
        return self._call("unlink", path, durable)

    def sync_dirs(self, paths: list[str]) -> None:
        self._call("sync_dirs", paths)

    def listdir(self, path: str) -> list[str]:
        return self._call("listdir", path)

    def remove_bytecode(self, paths: list[str]) -> int:
        return self._call("remove_bytecode", paths)

    def missing_dirs(self, paths: list[str]) -> list[str]:
        return self._call("missing_dirs", paths)

    def remove_empty_dirs(self, dirs: list[str]) -> list[str]:
        return self._call("remove_empty_dirs", dirs)

    def dist_info(self, site_dirs: list[str], package: str, paths: bool = True) -> c.DistInfo | None:
        return self._call("dist_info", site_dirs, package, paths)

    def scan(self, request: c.ScanRequest) -> c.ScanResult:
        return self._call("scan", request)

    def compare_many(self, request: c.CompareRequest) -> list[c.Comparison]:
        return self._call("compare_many", request)

    def store_put(self, store: str, data: bytes, digest: str | None = None) -> str:
        return self._call("store_put", store, data, digest)

    def store_get(self, store: str, digest: str) -> bytes:
        return self._call("store_get", store, digest)

    def manifest_rows(self, store: str, digest: str) -> c.Rows:
        return self._call("manifest_rows", store, digest)

    def store_missing(self, store: str, digests: list[str]) -> list[str]:
        return self._call("store_missing", store, digests)

    def store_damage(self, store: str) -> list[str]:
        return self._call("store_damage", store)

    def store_put_files(self, store: str, files: dict[str, str]) -> dict[str, str]:
        return self._call("store_put_files", store, files)

    def stage(self, store: str, digest: str, path: str, mode: int, durable: bool = True) -> None:
        self._call("stage", store, digest, path, mode, durable)

    def state_dir_owner(self, prefix: str, state_dir: str, site: str, claim: bool) -> c.StateDirOwner:
        return self._call("state_dir_owner", prefix, state_dir, site, claim)

    def lock(self, path: str, holder: dict[str, Any]) -> c.LockHolder | None:
        return self._call("lock", path, holder)

    def unlock(self, path: str) -> None:
        self._call("unlock", path)

    def clean_temps(self, state_dir: str, store: str) -> list[c.Removed]:
        return self._call("clean_temps", state_dir, store)

    def dist_infos(self, site: str) -> list[str]:
        return self._call("dist_infos", site)

    def audit_record(self, site: str, dist_infos: list[str], cache_dir: str | None = None) -> dict[str, c.RecordCheck]:
        return self._call("audit_record", site, dist_infos, cache_dir)

    def audit_installation(self, site: str, dist_info: str, cache_dir: str | None = None) -> c.RecordCheck:
        return self._call("audit_installation", site, dist_info, cache_dir)  # type: ignore[no-any-return]

    def audit_bytecode(self, site: str, cache_tag: str, verify: list[str], cache: str | None = None) -> c.BytecodeCheck:
        return self._call("audit_bytecode", site, cache_tag, verify, cache)

    def audit_tree(self, request: c.TreeRequest) -> c.TreeCheck:
        return self._call("audit_tree", request)

    def interpreter_facts(self) -> c.InterpreterFacts:
        return self._call("interpreter_facts")

    def fingerprint(self, sites: list[str], cache_root: str | None, main_site: str | None = None,
                    parts: list[str] | None = None, managed: str | None = None) -> c.Fingerprint:
        return self._call("fingerprint", sites, cache_root, main_site, parts, managed)


def _exception(doc: dict, target: str, method: str) -> Exception:
    kind = doc["type"]
    if kind == "FileNotFoundError":
        return FileNotFoundError(doc.get("errno") or 2, doc.get("strerror") or doc["message"], doc.get("filename"))
    if kind == "AgentError" and "kind" in doc:
        return AgentError(doc["kind"], doc["message"])
    detail = doc.get("trace", "").strip().splitlines()[-1:] or [f"{kind}: {doc['message']}"]
    return TargetError(f"target {target}: {method} failed on the host: {detail[0]}",
                       "check the path and permissions on the host")
