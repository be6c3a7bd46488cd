"""The target contract: an interpreter, its package, its role files, and a near-disk agent."""

from __future__ import annotations

import json
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from ..errors import BadInput, NotInstalled, TargetError
from ..host import interp
from ..host.contract import (
    ROLE_PREFIX,
    AgentContract,
    DistInfo,
    Interpreter,
    InterpreterFacts,
)
from ..host.disk import hash_bytes
from ..workspace import TargetConfig
from .shapes import answer_from_wire

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


# What a program run by run_python prints first: anything before it came from the interpreter's own
# start (a sitecustomize, a .pth), not from the program, and is dropped.
OUTPUT_MARK = b"\x00patchkeeper-output\x00"
_BOOT = (
    "import sys;sys.stdout.write(%r);sys.stdout.flush();__pk=sys.argv.pop(1);"
    "exec(compile(__pk,'<patchkeeper>','exec'))"
) % OUTPUT_MARK.decode()


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
        self.fresh = False  # believe no answer kept between commands (audit --rehash): ask again

    @property
    @abstractmethod
    def agent(self) -> AgentContract:
        """The near-disk agent, running next to the files in the target's own interpreter."""

    @abstractmethod
    def run(
        self, argv: list[str], timeout: float = 60.0, input: bytes | None = None
    ) -> tuple[int, bytes, bytes]:
        """Run a program on the target without any shell; return (exit code, stdout, stderr)."""

    def close(self) -> None:  # noqa: B027
        pass

    def run_python(
        self,
        source: str,
        args: tuple[str, ...] = (),
        timeout: float = 60.0,
        input: bytes | None = None,
        isolated: bool = True,
        python: str | None = None,
    ) -> tuple[int, bytes, bytes]:
        """Run `source` in the target's interpreter (`python -I`, unless not `isolated`) with `args`
        as sys.argv[1:]: (exit code, what the program printed, stderr). What the interpreter printed
        before the program ran (a sitecustomize or .pth that prints) is dropped; when the program
        never ran its exit code is kept and the output is all there was."""
        argv = [python or self.config.python, *(["-I"] if isolated else []), "-c", _BOOT, source, *args]
        code, out, err = self.run(argv, timeout=timeout, input=input)
        noise, mark, said = out.partition(OUTPUT_MARK)
        if mark:
            return code, said, err
        if code == 0:  # it exited 0 without running the program: a sitecustomize that calls exit()?
            return (
                1,
                b"",
                err
                + (
                    b"the interpreter exited before running patchkeeper's program; it printed: "
                    + noise[-200:]
                ),
            )
        return code, out, err

    def run_json(self, source: str, what: str, timeout: float = 60.0) -> Any:
        """The JSON document `source` prints in the target's interpreter (`python -I`)."""
        cfg = self.config
        try:
            code, out, err = self.run_python(source, timeout=timeout)
        except FileNotFoundError:
            code, out, err = 127, b"", b"no such file"
        if code != 0:
            said = err.decode(errors="replace").strip().splitlines()
            raise TargetError(
                f"target {self.name}: cannot run its interpreter {cfg.python}: "
                f"{said[-1] if said else f'exit {code}'}",
                f"fix python = ... in [targets.{self.name}]",
            )
        try:
            return json.loads(out)
        except ValueError:
            raise TargetError(
                f"target {self.name}: {what} from its interpreter {cfg.python} is not JSON: {out[:120]!r}",
                f"run {cfg.python} -I on the target and see what it prints",
            ) from None

    @memo
    def algorithm(self) -> str:
        """The hash the target's agent uses for its digests (blake3, or sha256 without blake3)."""
        return self.agent.algorithm()

    def hash_bytes(self, data: bytes) -> str:
        """The digest of `data` as this target's agent and store name it."""

        return hash_bytes(data, self.algorithm)

    def interpreter(self) -> Interpreter:
        """The target interpreter's prefix, purelib, platlib and version."""
        return cast(
            Interpreter, self._answer("interpreter", self.run_json(_INFO, "the facts of its interpreter"))
        )

    def interpreter_facts(self) -> InterpreterFacts:
        """Implementation, version, tags, libc and site dirs of the target's interpreter
        (host/interp.py run in it)."""

        with open(interp.__file__, encoding="utf-8") as f:  # its source, sent to run there
            source = f.read()
        return cast(
            InterpreterFacts,
            self._answer("interpreter_facts", self.run_json(source, "the facts of its interpreter")),
        )

    def _answer(self, method: str, doc: Any) -> Any:
        """A document the target's interpreter printed, as the contract's answer to `method` (checked)."""

        try:
            return answer_from_wire(method, doc)
        except ValueError as exc:  # shapes.Malformed
            raise TargetError(
                f"target {self.name}: the answer of its interpreter {self.config.python} to "
                f"{method} is malformed: {exc}",
                f"run {self.config.python} -I on the target and see what it prints",
            ) from None

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
            raise NotInstalled(
                f"target {self.name}: package {cfg.package!r} is not installed in {' or '.join(sites)}",
                f'wrong venv? python = "{cfg.python}" in [targets.{self.name}] names the interpreter '
                f"whose site-packages holds {cfg.package}: point it at that venv's bin/python; or "
                f"install it there: `{cfg.python} -m pip install {cfg.package}`",
                cfg.state_dir or posixpath.join(py.prefix, ".patchkeeper"),
            )
        roles = []
        for role, path in sorted(cfg.files.items()):
            if not posixpath.isabs(path):
                raise BadInput(f"target {self.name}: role file {role} = {path!r} is not absolute")
            if (posixpath.normpath(path) + "/").startswith(dist.site.rstrip("/") + "/"):
                raise BadInput(
                    f"target {self.name}: role file {role} = {path!r} is inside site-packages "
                    f"({dist.site}), among the files of the package that patchkeeper manages: one file "
                    "cannot be both",
                    f"name a file outside site-packages in [targets.{self.name}.files]",
                )
            roles.append((role, path))
        return TargetInfo(
            name=self.name,
            host=self.agent.hostname(),
            python=cfg.python,
            python_version=py.python,
            prefix=py.prefix,
            site=dist.site,
            package=cfg.package,
            version=dist.version,
            dist_info=dist.dist_info,
            tops=dist.tops,
            loose=dist.loose,
            roles=tuple(roles),
            state_dir=cfg.state_dir or posixpath.join(py.prefix, ".patchkeeper"),
            installation=dist.installation,
        )
