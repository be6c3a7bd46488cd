"""Targets and groups from an Ansible inventory, read with `ansible-inventory --list`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import BadInput

VARIABLE = "patchkeeper"  # the host or group variable that holds a target's table


@dataclass(frozen=True)
class Inventory:
    """What an inventory gives a workspace: a target table per host that has the `patchkeeper`
    variable, and its groups (their members that are targets)."""

    targets: dict[str, dict[str, Any]]
    groups: dict[str, tuple[str, ...]]


def command() -> str:
    """ansible-inventory beside this interpreter (patchkeeper[ansible] in one venv), else on PATH."""
    beside = Path(sys.executable).parent / "ansible-inventory"
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("ansible-inventory")
    if found is None:
        raise BadInput(
            "an inventory is configured but ansible-inventory is not installed",
            "pip install 'patchkeeper[ansible]' (ansible-core) into patchkeeper's environment",
        )
    return found


def read(path: Path) -> Inventory:
    """The inventory at `path` (a file, a directory, or a script: whatever Ansible reads)."""
    if not path.exists():
        raise BadInput(
            f"inventory {path} does not exist", "fix inventory = ... in patchkeeper.toml or --inventory"
        )
    try:
        proc = subprocess.run(
            [command(), "-i", str(path), "--list"],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInput(
            f"cannot run ansible-inventory on {path}: {exc}", "run `ansible-inventory -i FILE --list`"
        ) from None
    errors = [
        line for line in proc.stderr.splitlines() if "ERROR" in line or "[WARNING]: Unable to parse" in line
    ]
    if proc.returncode != 0 or errors:
        detail = (errors or proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[0]
        raise BadInput(
            f"ansible-inventory cannot read {path}: {detail}",
            f"run `ansible-inventory -i {path} --list` to see the whole message",
        )
    return parse(json.loads(proc.stdout), str(path))


def parse(doc: dict[str, Any], where: str) -> Inventory:
    """`ansible-inventory --list`'s document -> targets and groups."""
    hostvars: dict[str, dict[str, Any]] = doc.get("_meta", {}).get("hostvars", {})
    targets: dict[str, dict[str, Any]] = {}
    for host, hv in sorted(hostvars.items()):
        if VARIABLE not in hv:
            continue  # a host that is no target of patchkeeper's (a database, a proxy)
        table = hv[VARIABLE]
        if not isinstance(table, dict):
            raise BadInput(
                f"inventory {where}: host {host}'s variable {VARIABLE} is not a mapping",
                "give it the keys a [targets.NAME] table has (python, package, files, vars, service)",
            )
        targets[host] = dict(table)
        if "ssh" not in table and hv.get("ansible_connection") != "local":
            targets[host]["ssh"] = ssh_spec(
                str(hv.get("ansible_host", host)), hv.get("ansible_port"), hv.get("ansible_user")
            )
            key = hv.get("ansible_ssh_private_key_file") or hv.get("ansible_private_key_file")
            if key and "identity_file" not in table:
                targets[host]["identity_file"] = os.path.expanduser(str(key))
    return Inventory(targets, _groups(doc, set(targets)))


def ssh_spec(host: str, port: object, user: object) -> str:
    """user@host:port as targets/ssh.py reads it ([v6]:port)."""
    if ":" in host and port is not None:
        host = f"[{host}]"
    return f"{str(user) + '@' if user else ''}{host}{':' + str(port) if port is not None else ''}"


def _groups(doc: dict[str, Any], targets: set[str]) -> dict[str, tuple[str, ...]]:
    """Each group's hosts that are targets, its children's included."""

    def members(group: str, seen: frozenset[str]) -> set[str]:
        node = doc.get(group) or {}
        found = set(node.get("hosts", []))
        for child in node.get("children", []):
            if child not in seen:
                found |= members(child, seen | {child})
        return found

    groups = {}
    for name, node in doc.items():
        if name == "_meta" or not isinstance(node, dict):
            continue
        chosen = sorted(members(name, frozenset([name])) & targets)
        if chosen:
            groups[name] = tuple(chosen)
    return groups
