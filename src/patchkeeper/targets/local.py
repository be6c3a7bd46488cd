"""A target on this machine: its agent runs in its own interpreter; programs run as subprocesses.

When the target's interpreter is this very Python version and implementation, the agent runs
in-process (the same answers, no process to start); otherwise it runs in the target's
interpreter, over the wire the remote agent uses, so that bytecode is judged by the
MAGIC_NUMBER and `compile` of the Python that will run it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..host import seal
from ..host.agent import Agent
from ..host.contract import (
    AgentContract,
    Answer,
    DistInfo,
    Interpreter,
    InterpreterFacts,
)
from ..host.statcache import identity, load_cache, save_cache, user_cache, write_caches
from ..workspace import TargetConfig
from .base import Target, memo

if TYPE_CHECKING:  # the proxy (and the wire under it) loads only for another interpreter
    from .remote_agent import AgentProxy

THIS_PYTHON = "%d.%d.%d" % sys.version_info[:3]


class LocalTarget(Target):
    _in_process = Agent()

    def __init__(self, config: TargetConfig) -> None:
        super().__init__(config)
        self._proxy: AgentProxy | None = None

    @property
    def agent(self) -> AgentContract:
        if self._proxy is not None:
            return self._proxy
        if self.same_interpreter:
            return self._in_process

        from .remote_agent import AgentProxy, Patience  # lazy own: the wire only for another interpreter

        self._proxy = AgentProxy.in_subprocess(self.name, self.config.python, Patience(self.config.timeout))
        return self._proxy

    @memo
    def same_interpreter(self) -> bool:
        """Whether the target's Python is this one (version and implementation): then the agent
        can run in-process and give the answers the target's own interpreter would."""
        py = self.interpreter()
        return py.python == THIS_PYTHON and py.cache_tag == sys.implementation.cache_tag

    def close(self) -> None:
        if self._proxy is not None:
            self._proxy.close()
            self._proxy = None
        write_caches(True)  # the in-process agent's hands_off (a dry run) ends with the command's use of it

    def run(
        self, argv: list[str], timeout: float = 60.0, input: bytes | None = None
    ) -> tuple[int, bytes, bytes]:
        return run_here(argv, timeout, input)

    def interpreter(self) -> Interpreter:
        """As Target.interpreter, remembered per interpreter in ~/.cache/patchkeeper (the answer
        depends only on the executable and its pyvenv.cfg, whose identities key the entry)."""
        if self.fresh:
            return super().interpreter()
        return _remembered(
            self.config.python,
            "interpreters.marshal",
            "info",
            Interpreter,
            super().interpreter,
            lambda info: "cache_tag" in info,
        )

    def package_layout(self, sites: list[str], package: str) -> DistInfo | None:
        """As Target.package_layout; with the agent in this process, remembered across commands in
        ~/.cache/patchkeeper, sealed with the stat identities of the site dirs, the dist-info dir, its
        RECORD and METADATA, which any install, removal or rewrite moves; only when every one is older
        than the clock's granularity before the answer was sought (the racily-clean rule: then each
        identity is the one the files had when they were read)."""
        if not self.same_interpreter or self.fresh:
            return super().package_layout(sites, package)

        cache, known = _read_cache("dist-infos.marshal")
        key = (self.config.python, package, tuple(sites))
        hit = known.get(key)
        if hit is not None:
            try:
                if seal.stat_identities(hit["watched"], os.stat).hex() == hit["ids"]:
                    return DistInfo.from_wire(hit["answer"]) if hit["answer"] is not None else None
            except (KeyError, TypeError, ValueError):
                pass  # written by another version: asked again
        started = time.time_ns()
        found = super().package_layout(sites, package)
        watched = list(sites) + (
            [os.path.join(found.site, found.dist_info, f) for f in ("", "RECORD", "METADATA")]
            if found
            else []
        )
        ids = seal.stat_identities(watched, os.stat)
        if not seal.settled(
            ids, started
        ):  # only files unchanged since before `started` are as they were read
            return found
        known[key] = {"watched": watched, "ids": ids.hex(), "answer": found.to_wire() if found else None}
        _write_cache(cache, known)
        return found

    def interpreter_facts(self) -> InterpreterFacts:
        """As Target.interpreter_facts, remembered per interpreter like `interpreter()` (the facts
        depend only on the executable and its pyvenv.cfg)."""
        if self.fresh:
            return super().interpreter_facts()
        return _remembered(
            self.config.python,
            "interpreter-facts.marshal",
            "facts",
            InterpreterFacts,
            super().interpreter_facts,
            lambda facts: "stdlib" in facts.get("where", {}),
        )


A = TypeVar("A", bound=Answer)
_STAMP = (
    "pk-local-target",
    3,
)  # 3: a package layout holds its installation; the caches of interpreters and package layouts in ~/.cache/patchkeeper


def _remembered(
    python: str,
    file: str,
    field: str,
    kind: type[A],
    compute: Callable[[], A],
    valid: Callable[[dict[str, Any]], bool] = lambda _: True,
) -> A:
    """compute(), remembered in ~/.cache/patchkeeper/FILE per interpreter, keyed by the identities of
    its executable and its pyvenv.cfg (what the answer depends on); a cache we cannot use only costs time."""
    try:
        key = [
            list(_identity(os.path.realpath(python))),
            list(_identity(os.path.join(os.path.dirname(os.path.dirname(python)), "pyvenv.cfg"))),
        ]
    except OSError:
        return compute()  # a missing interpreter: let the real run say why
    cache, known = _read_cache(file)
    hit = known.get(python)
    if hit and hit["key"] == key and field in hit and valid(hit[field]):
        try:
            return kind.from_wire(hit[field])
        except (KeyError, TypeError):
            pass  # written by another version: compute it again
    value = compute()
    known[python] = {"key": key, field: value.to_wire()}
    _write_cache(cache, known)
    return value


def _read_cache(name: str) -> tuple[str, dict[Any, Any]]:
    """The path of a cache in ~/.cache/patchkeeper and what it holds ({} when absent or not ours)."""
    path = user_cache(name)
    return path, load_cache(path, _STAMP) or {}


def _write_cache(path: str, known: dict[Any, Any]) -> None:
    save_cache(path, _STAMP, known)


def _identity(path: str) -> tuple[int, ...]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if path.endswith("pyvenv.cfg"):
            return (0, 0, 0, 0, 0)
        raise
    return identity(st)


def run_here(argv: list[str], timeout: float = 60.0, input: bytes | None = None) -> tuple[int, bytes, bytes]:
    """Run argv on this machine. Output goes to files, not pipes, so a daemon the command leaves
    running (a restart command's service) cannot hold us; on timeout the command's whole process
    group is killed."""

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        try:
            proc.communicate(input, timeout=timeout)
            code, note = proc.returncode, b""
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            code, note = 124, f"\ntimed out after {timeout}s".encode()
        out.seek(0)
        err.seek(0)
        return code, out.read(), err.read() + note
