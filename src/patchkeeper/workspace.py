"""Find the workspace and read patchkeeper.toml into frozen target descriptions."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import BadInput

CONFIG = "patchkeeper.toml"

VAR_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")  # a template variable's name


def value_text(value: object) -> str:
    """A TOML value as it is written into a file: strings as they are, numbers in their usual form."""
    return value if isinstance(value, str) else str(value)


def check_values(table: object, where: str) -> list[str]:
    """Problems with a vars table: a table of lowercase names to strings or numbers."""
    if not isinstance(table, dict):
        return [f"{where} must be a table of name = value"]
    problems = []
    for key, value in table.items():
        if not VAR_NAME.match(key):
            problems.append(f"{where} {key!r} is not a variable name ([a-z_][a-z0-9_]*)")
        elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
            problems.append(f"{where} {key} must be a string or a number, not {value!r}")
    return problems



@dataclass(frozen=True)
class TargetConfig:
    """One target as the workspace describes it."""

    name: str
    python: str
    package: str
    files: dict[str, str] = field(default_factory=dict)  # role -> path
    state_dir: str | None = None
    ssh: str | None = None
    persist: float = 60.0  # seconds an SSH target's held connection outlives its last command; 0: none
    vars: dict[str, str] = field(default_factory=dict)  # [targets.NAME.vars]: values for role-file templates
    raw: dict = field(default_factory=dict)  # the whole table, for verbs with their own keys


@dataclass(frozen=True)
class Workspace:
    """A workspace as loaded from its patchkeeper.toml: its root, targets and options."""

    root: Path
    default_target: str | None
    targets: dict[str, TargetConfig]
    wheels: Path | None = None  # release wheels for repair and --restore-pristine (`wheels = "dir"`)

    @property
    def patchsets_dir(self) -> Path:
        return self.root / "patchsets"

    @property
    def snapshots_dir(self) -> Path:
        return self.root / "snapshots"

    def target(self, name: str | None) -> TargetConfig:
        name = name or self.default_target
        if not name:
            raise BadInput(f"no target given and {self.root / CONFIG} sets no default_target",
                           "pass -t NAME or set default_target")
        if name not in self.targets:
            known = ", ".join(sorted(self.targets)) or "none"
            raise BadInput(f"unknown target {name!r} (known: {known})",
                           f"add [targets.{name}] to {self.root / CONFIG}")
        return self.targets[name]


def find(explicit: str | None = None, cwd: Path | None = None) -> Path:
    """The workspace root: --workspace, else $PATCHKEEPER_WORKSPACE, else cwd and its parents."""
    given = explicit or os.environ.get("PATCHKEEPER_WORKSPACE")
    if given:
        root = Path(given).resolve()
        if not (root / CONFIG).is_file():
            raise BadInput(f"{root} is not a workspace: it has no {CONFIG}",
                           "point --workspace at a directory holding patchkeeper.toml")
        return root
    here = (cwd or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / CONFIG).is_file():
            return candidate
    raise BadInput(f"no {CONFIG} in {here} or its parents",
                   "run inside a workspace, or pass --workspace DIR")


def load(root: Path) -> Workspace:
    path = root / CONFIG
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # UnicodeDecodeError, tomllib.TOMLDecodeError
        raise BadInput(f"cannot read {path}: {exc}", "fix the file's TOML syntax") from None
    targets: dict[str, TargetConfig] = {}
    problems: list[str] = []
    tables = doc.get("targets") or {}
    if not isinstance(tables, dict):
        tables, problems = {}, ["targets must be a table of [targets.NAME] tables"]
    if not isinstance(doc.get("default_target", ""), str):
        problems.append("default_target must be a string")
    persist = doc.get("persist", 60)
    if not _seconds(persist):
        problems.append("persist must be a number of seconds >= 0")
    if not isinstance(doc.get("wheels", ""), str):
        problems.append("wheels must be a string (a directory of wheels, relative to the workspace)")
    for name, table in tables.items():
        if not isinstance(table, dict):
            problems.append(f"[targets.{name}] is not a table")
            continue
        missing = [k for k in ("python", "package") if not isinstance(table.get(k), str)]
        wrong = [k for k in ("ssh", "state_dir") if k in table and not isinstance(table[k], str)]
        if not _seconds(table.get("persist", 0)):
            wrong.append("persist (seconds >= 0)")
        files = table.get("files") or {}
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            wrong.append("files (a table of role = \"path\")")
            files = {}
        if missing or wrong:
            problems.append(f"[targets.{name}] " + "; ".join(
                ([f"lacks {', '.join(missing)}"] if missing else []) + ([f"has a bad {', '.join(wrong)}"] if wrong else [])))
            continue
        values = table.get("vars", {})
        bad_vars = check_values(values, f"[targets.{name}.vars]")
        if bad_vars:
            problems += bad_vars
            continue
        ssh = table.get("ssh")
        state_dir = table.get("state_dir")
        targets[name] = TargetConfig(
            name=name,
            python=_local_path(root, table["python"], ssh),
            package=table["package"],
            files={role: _local_path(root, p, ssh) for role, p in files.items()},
            state_dir=_local_path(root, state_dir, ssh) if state_dir else None,
            ssh=ssh,
            persist=float(table.get("persist", persist if _seconds(persist) else 60)),
            vars={k: value_text(v) for k, v in values.items()},
            raw=table,
        )
    if problems:
        raise BadInput(f"{path}: " + "; ".join(problems), "see docs/configuration.md for the keys of a target")
    wheels = doc.get("wheels")
    return Workspace(root=root, default_target=doc.get("default_target"), targets=targets,
                     wheels=root / wheels if wheels else None)


def _seconds(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def _local_path(root: Path, value: str, ssh: str | None) -> str:
    """Paths of local targets are relative to the workspace; remote ones are taken as given."""
    if ssh or os.path.isabs(value):
        return value
    return str(root / value)
