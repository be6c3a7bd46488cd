"""Find the workspace and read patchkeeper.toml into frozen target descriptions."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import inventory as ansible, names
from .errors import BadInput, did_you_mean

CONFIG = "patchkeeper.toml"
DROPIN_NAME = "50-patchkeeper.conf"  # a target's systemd drop-in, by default in <unit>.d/ beside its unit

# systemd's unit search path for the system manager, highest priority first: what `systemd-analyze unit-paths`
# prints on Debian 12's systemd 252 (src/basic/path-lookup.c; Debian puts /lib before /usr/lib).
SYSTEMD_UNIT_PATH = (
    "/etc/systemd/system.control",
    "/run/systemd/system.control",
    "/run/systemd/transient",
    "/run/systemd/generator.early",
    "/etc/systemd/system",
    "/etc/systemd/system.attached",
    "/run/systemd/system",
    "/run/systemd/system.attached",
    "/run/systemd/generator",
    "/usr/local/lib/systemd/system",
    "/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/run/systemd/generator.late",
)

# which manager is asked what runs (`systemd = ...` in [targets.NAME]): the system's (systemctl), the
# user's of the login patchkeeper runs as (systemctl --user), or none (the unit files' reading only)
SYSTEMD_SCOPES = ("system", "user", "off")

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
    files: dict[str, str] = field(default_factory=dict)  # role -> path (`dropin` defaults to beside `unit`)
    state_dir: str | None = None
    ssh: str | None = None
    persist: float = 60.0  # seconds an SSH target's held connection outlives its last command; 0: none
    timeout: float = 30.0  # seconds its agent may stay silent (no answer, no heartbeat) before it is given up
    vars: dict[str, str] = field(default_factory=dict)  # [targets.NAME.vars]: values for role-file templates
    unit_path: tuple[str, ...] = (
        SYSTEMD_UNIT_PATH  # where systemd looks for units and drop-ins, highest first
    )
    systemd: str = (
        "system"  # the manager asked for the unit: system (systemctl), user (systemctl --user), off
    )
    raw: dict[str, Any] = field(
        default_factory=dict
    )  # the whole table ([defaults] merged in), for verbs with their own keys
    identity_file: str | None = None  # an SSH key of its own (an inventory's ansible_ssh_private_key_file)
    connect: Callable[[TargetConfig], Any] | None = field(default=None, compare=False)  # opens it another way


@dataclass(frozen=True)
class Workspace:
    """A workspace as loaded from its patchkeeper.toml: its root, targets and options."""

    root: Path
    default_target: str | None
    targets: dict[str, TargetConfig]
    wheels: Path | None = None  # release wheels for repair and --restore-pristine (`wheels = "dir"`)
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)  # [groups], and an inventory's groups
    recovered: tuple[
        str, ...
    ] = ()  # what finishing an interrupted save of a patch set did, as the command began

    @property
    def patchsets_dir(self) -> Path:
        return self.root / "patchsets"

    @property
    def snapshots_dir(self) -> Path:
        return self.root / "snapshots"

    def target(self, name: str | None) -> TargetConfig:
        name = name or self.default_target
        if not self.targets:
            raise BadInput(
                f"no targets: {self.root / CONFIG} defines none",
                'add one: [targets.local] with python = "VENV/bin/python" (the venv holding the package), '
                'and default_target = "local" at the top',
            )
        if not name:
            raise BadInput(
                f"no target given and {self.root / CONFIG} sets no default_target "
                f"(targets: {', '.join(sorted(self.targets))})",
                f'pass -t NAME, or set default_target = "{sorted(self.targets)[0]}" at its top',
            )
        if name not in self.targets:
            known = ", ".join(sorted(self.targets))
            close = did_you_mean(name, sorted(self.targets))
            raise BadInput(
                f"unknown target {name!r} (known: {known})" + (f"; did you mean {close!r}?" if close else ""),
                (f"-t {close}, or " if close else "") + f"add [targets.{name}] to {self.root / CONFIG}",
            )
        return self.targets[name]

    def select(self, names: tuple[str, ...] = (), group: str | None = None, every: bool = False) -> Workspace:
        """This workspace with only the targets chosen by -t NAME (repeated), -g GROUP or --all."""
        if every:
            return self
        chosen = list(names)
        if group is not None:
            if group not in self.groups:
                known = ", ".join(sorted(self.groups)) or "none"
                raise BadInput(
                    f"unknown group {group!r} (known: {known})",
                    f'add {group} = ["TARGET", ...] under [groups] in {self.root / CONFIG}',
                )
            chosen += self.groups[group]
        for name in chosen:
            self.target(name)  # an unknown name is refused here, with the known ones
        return replace(self, targets={n: self.targets[n] for n in sorted(set(chosen))})


def find(explicit: str | None = None, cwd: Path | None = None) -> Path:
    """The workspace root: --workspace, else $PATCHKEEPER_WORKSPACE, else cwd and its parents."""
    given = explicit or os.environ.get("PATCHKEEPER_WORKSPACE")
    if given:
        root = Path(given).resolve()
        if not root.is_dir():
            how = "--workspace" if explicit else "$PATCHKEEPER_WORKSPACE"
            raise BadInput(
                f"{root} does not exist" if not root.exists() else f"{root} is not a directory",
                f"point {how} at a workspace's directory, or create one: patchkeeper -w {given} init",
            )
        if not (root / CONFIG).is_file():
            raise BadInput(
                f"{root} is not a workspace: it has no {CONFIG}",
                "point --workspace at a directory holding patchkeeper.toml",
            )
        return root
    here = (cwd or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / CONFIG).is_file():
            return candidate
    raise BadInput(
        f"no {CONFIG} in {here} or its parents",
        "run inside a workspace, or pass --workspace DIR; `patchkeeper init` makes one here",
    )


DEFAULT_KEYS = (
    "python",
    "package",
    "vars",
    "service",
    "files",
    "persist",
    "timeout",
    "unit_path",
    "systemd",
)  # what [defaults] may hold


def load(
    root: Path, inventory: str | None = None, hosts: dict[str, dict[str, Any]] | None = None
) -> Workspace:
    """The workspace at `root`; `inventory` (--inventory) overrides its `inventory = "FILE"`; `hosts`
    (the Ansible action's host and its `patchkeeper` variable) stands in for the inventory."""
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
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, dict):
        problems.append("[defaults] must be a table")
        defaults = {}
    problems += [
        f"[defaults] has unknown key {k!r} (known: {', '.join(DEFAULT_KEYS)})"
        for k in defaults
        if k not in DEFAULT_KEYS
    ]
    groups, group_problems = _groups(doc.get("groups"))
    problems += group_problems
    source = inventory or doc.get("inventory")
    if source is not None and not isinstance(source, str):
        problems.append("inventory must be a string (an Ansible inventory, relative to the workspace)")
        source = None
    if hosts is not None:
        source, groups = None, {}  # one host of Ansible's: no groups to check against the others
        for name, table in hosts.items():
            tables[name] = merged(table, tables[name]) if isinstance(tables.get(name), dict) else table
    if source is not None and not problems:
        found = ansible.read(root / source)
        for name, table in found.targets.items():  # a [targets.NAME] of the same name adds to the host's
            tables[name] = merged(table, tables[name]) if isinstance(tables.get(name), dict) else table
        for name, members in found.groups.items():
            groups.setdefault(name, members)
    for name, table in tables.items():
        bad_name = names.component_problem(name, "the target name")
        if bad_name:  # snapshots/<target>/ holds its ledger's copy
            problems.append(f"[targets] {bad_name}")
            continue
        if not isinstance(table, dict):
            problems.append(f"[targets.{name}] is not a table")
            continue
        table = merged(defaults, table)
        missing = [k for k in ("python", "package") if not isinstance(table.get(k), str)]
        wrong: list[str] = [
            k for k in ("ssh", "state_dir", "identity_file") if k in table and not isinstance(table[k], str)
        ]
        if not _seconds(table.get("persist", 0)):
            wrong.append("persist (seconds >= 0)")
        if not _seconds(table.get("timeout", 3)) or table.get("timeout", 3) < 3:
            wrong.append("timeout (seconds >= 3: the agent's heartbeat comes every second)")
        unit_path = table.get("unit_path", list(SYSTEMD_UNIT_PATH))
        if not isinstance(unit_path, list) or not all(
            isinstance(d, str) and d.startswith("/") for d in unit_path
        ):
            wrong.append("unit_path (a list of absolute directories, highest priority first)")
            unit_path = []
        if table.get("systemd", "system") not in SYSTEMD_SCOPES:
            wrong.append(f"systemd (one of {', '.join(map(repr, SYSTEMD_SCOPES))})")
        files = table.get("files") or {}
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            wrong.append('files (a table of role = "path")')
            files = {}
        if missing or wrong:
            problems.append(
                f"[targets.{name}] "
                + "; ".join(
                    ([f"lacks {', '.join(missing)}"] if missing else [])
                    + ([f"has a bad {', '.join(wrong)}"] if wrong else [])
                )
            )
            continue
        values = table.get("vars", {})
        bad_vars = check_values(values, f"[targets.{name}.vars]")
        if bad_vars:
            problems += bad_vars
            continue
        ssh = table.get("ssh")
        state_dir = table.get("state_dir")
        roles = {role: _local_path(root, p, ssh) for role, p in files.items()}
        if (
            "unit" in roles and "dropin" not in roles
        ):  # the host's unit is read; the patch sets' drop-in goes beside it
            roles["dropin"] = default_dropin(roles["unit"])
        targets[name] = TargetConfig(
            name=name,
            python=_local_path(root, table["python"], ssh),
            package=table["package"],
            files=roles,
            state_dir=_local_path(root, state_dir, ssh) if state_dir else None,
            ssh=ssh,
            persist=float(table.get("persist", persist if _seconds(persist) else 60)),
            timeout=float(table.get("timeout", 30)),
            vars={k: value_text(v) for k, v in values.items()},
            unit_path=tuple(p.rstrip("/") or "/" for p in unit_path),
            systemd=table.get("systemd", "system"),
            raw=table,
            identity_file=table.get("identity_file"),
        )
    for group, members in groups.items():
        unknown = [m for m in members if m not in tables]
        if unknown:
            problems.append(f"group {group} names unknown target(s): {', '.join(unknown)}")
    if problems:
        raise BadInput(
            f"{path}: " + "; ".join(problems), "see docs/configuration.md for the keys of a target"
        )
    wheels = doc.get("wheels")
    return Workspace(
        root=root,
        default_target=doc.get("default_target"),
        targets=targets,
        wheels=root / wheels if wheels else None,
        groups=groups,
    )


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`: tables merge key by key (vars, files, service and its smoke), a
    value of `over` replaces the one of `base`."""
    out = dict(base)
    for key, value in over.items():
        out[key] = (
            merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def _groups(table: object) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """[groups]: name = ["target", ...]."""
    if table is None:
        return {}, []
    if not isinstance(table, dict):
        return {}, ['[groups] must be a table of name = ["target", ...]']
    groups, problems = {}, []
    for name, members in table.items():
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            problems.append(f"[groups] {name} must be a list of target names")
            continue
        groups[name] = tuple(members)
    return groups, problems


def default_dropin(unit: str) -> str:
    """Where the `dropin` role goes when a target maps only `unit`: <unit>.d/50-patchkeeper.conf."""
    return unit.rstrip("/") + ".d/" + DROPIN_NAME


def _seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def _local_path(root: Path, value: str, ssh: str | None) -> str:
    """Paths of local targets are relative to the workspace; remote ones are taken as given."""
    if ssh or os.path.isabs(value):
        return value
    return str(root / value)
