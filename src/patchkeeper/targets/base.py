"""The target contract: an interpreter, its package, its role files, and a near-disk agent."""

from __future__ import annotations

import json
import posixpath
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from ..errors import BadInput, NotInstalled, TargetError
from ..host.contract import (
    ROLE_PREFIX,
    AgentContract,
    DistInfo,
    Interpreter,
    InterpreterFacts,
)
from ..workspace import TargetConfig

T = TypeVar("T")


class memo(Generic[T]):
    """A property computed once per instance, as functools.cached_property, without its lock: before
    Python 3.12 that lock is one per class, so every target of a fleet waited for the one whose
    `info` (a connection, a held agent, round trips) was being computed."""

    def __init__(self, compute: Callable[[Any], T]) -> None:
        self.compute = compute
        self.name = compute.__name__
        self.__doc__ = compute.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]
        value = obj.__dict__[self.name] = self.compute(obj)  # later reads find it in the instance
        return value


_INFO = (
    "import json, sys, sysconfig\n"
    "p = sysconfig.get_paths()\n"
    "print(json.dumps({'prefix': sys.prefix, 'purelib': p['purelib'], 'platlib': p['platlib'],"
    " 'python': '%d.%d.%d' % sys.version_info[:3], 'cache_tag': sys.implementation.cache_tag}))\n"
)


@dataclass(frozen=True)
class TargetInfo:
    """What a target is, found once per command: its interpreter, package, layout, role files and state dir."""

    name: str
    host: str
    python: str
    python_version: str
    prefix: str
    site: str  # the site-packages directory that holds the package
    package: str
    version: str
    dist_info: str
    tops: tuple[str, ...]  # the distribution's top-level directories (from RECORD)
    loose: tuple[str, ...]  # RECORD paths inside site that a walk of `tops` does not reach
    roles: tuple[tuple[str, str], ...]  # role -> absolute path
    state_dir: str
    installation: dict[str, Any] | None = None  # host/distinfo.installation: installer, RECORD's identity

    @property
    def store(self) -> str:
        return posixpath.join(self.state_dir, "store")

    def top_dirs(self) -> list[str]:
        """Top-level directories of the distribution (from RECORD), walked to catch added files."""
        return list(self.tops)

    def loose_paths(self) -> list[str]:
        """RECORD paths the walk of the top directories does not find (top-level modules): the
        rest need not be listed, which keeps a remote scan's request small."""
        return list(self.loose)

    def path_of(self, key: str) -> str:
        if key.startswith(ROLE_PREFIX):
            return dict(self.roles)[key[1:]]
        return posixpath.join(self.site, key)

    def role_keys(self) -> dict[str, str]:
        return {ROLE_PREFIX + role: path for role, path in self.roles}


class Target(ABC):
    """Where a package lives. The engine talks only to this: `info`, `agent`, `run`."""

    def __init__(self, config: TargetConfig) -> None:
        self.config = config
        self.name = config.name

    @property
    @abstractmethod
    def agent(self) -> AgentContract:
        """The near-disk agent, running next to the files in the target's own interpreter."""

    @abstractmethod
    def run(self, argv: list[str], timeout: float = 60.0, input: bytes | None = None) -> tuple[int, bytes, bytes]:
        """Run a program on the target without any shell; return (exit code, stdout, stderr)."""

    def close(self) -> None:
        pass

    @memo
    def algorithm(self) -> str:
        """The hash the target's agent uses for its digests (blake3, or sha256 without blake3)."""
        return self.agent.algorithm()

    def hash_bytes(self, data: bytes) -> str:
        """The digest of `data` as this target's agent and store name it."""
        from ..host.disk import hash_bytes

        return hash_bytes(data, self.algorithm)

    def interpreter(self) -> Interpreter:
        """The target interpreter's prefix, purelib, platlib and version."""
        cfg = self.config
        try:
            code, out, err = self.run([cfg.python, "-I", "-c", _INFO], timeout=60)
        except FileNotFoundError:
            code, out, err = 127, b"", b"not found"
        if code != 0:
            raise TargetError(f"target {self.name}: cannot run its interpreter {cfg.python}: "
                              f"{err.decode(errors='replace').strip().splitlines()[-1:] or code}",
                              f"fix python = ... in [targets.{self.name}]")
        return Interpreter.from_wire(json.loads(out))

    def interpreter_facts(self) -> InterpreterFacts:
        """Implementation, version, tags, libc and site dirs of the target's interpreter
        (host/interp.py run in it)."""
        from importlib import resources

        source = resources.files("patchkeeper.host").joinpath("interp.py").read_text(encoding="utf-8")
        code, out, err = self.run([self.config.python, "-I", "-c", source], timeout=60)
        if code != 0:
            raise TargetError(f"target {self.name}: cannot run its interpreter {self.config.python}: "
                              f"{err.decode(errors='replace').strip().splitlines()[-1:] or code}",
                              f"fix python = ... in [targets.{self.name}]")
        return InterpreterFacts.from_wire(json.loads(out))

    def package_layout(self, sites: list[str], package: str) -> DistInfo | None:
        """The package's distribution in the site dirs: its layout, not its 10,000 RECORD paths."""
        return self.agent.dist_info(sites, package, False)

    @memo
    def info(self) -> TargetInfo:
        cfg = self.config
        py = self.interpreter()
        sites = list(dict.fromkeys([py.purelib, py.platlib]))
        dist = self.package_layout(sites, cfg.package)
        if dist is None:
            raise NotInstalled(f"target {self.name}: package {cfg.package!r} is not installed in {' or '.join(sites)}",
                               f"install it with {cfg.python} -m pip install {cfg.package}",
                               cfg.state_dir or posixpath.join(py.prefix, ".patchkeeper"))
        roles = []
        for role, path in sorted(cfg.files.items()):
            if not posixpath.isabs(path):
                raise BadInput(f"target {self.name}: role file {role} = {path!r} is not absolute")
            roles.append((role, path))
        return TargetInfo(
            name=self.name, host=self.agent.hostname(), python=cfg.python,
            python_version=py.python, prefix=py.prefix, site=dist.site,
            package=cfg.package, version=dist.version, dist_info=dist.dist_info,
            tops=dist.tops, loose=dist.loose, roles=tuple(roles),
            state_dir=cfg.state_dir or posixpath.join(py.prefix, ".patchkeeper"), installation=dist.installation,
        )
