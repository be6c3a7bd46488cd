"""Where a target's state lives: never among the files it manages, and one state dir per venv."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from ..errors import BadInput, Refused
from ..targets import Target


def check(target: Target, claim: bool) -> None:
    """Refuse a state dir inside site-packages, and a second state dir for a venv already managed
    from another one (named by the venv's marker, which `claim` creates when it is missing)."""
    info = target.info
    found = target.agent.state_dir_owner(info.prefix, info.state_dir, info.site, claim)
    real, site, owner = found.state_dir, found.site, found.owner
    if real == site or real.startswith(site.rstrip("/") + "/"):
        raise BadInput(
            f"target {target.name}: state_dir {info.state_dir} is inside site-packages ({info.site}), "
            "where patchkeeper manages the files: its own records would count as changes to the package",
            f"set state_dir outside site-packages in [targets.{target.name}] "
            f"(the default is {posixpath.join(info.prefix, '.patchkeeper')})",
        )
    if owner is not None and owner != real:
        marker = posixpath.join(info.prefix, ".patchkeeper", "state_dir")
        raise Refused(
            f"target {target.name}: the venv {info.prefix} is managed from the state dir {owner} "
            f"(named in {marker}), not from this workspace's {info.state_dir}",
            f'set state_dir = "{owner}" in [targets.{target.name}], so that one ledger and one lock '
            f"guard these files; if {owner} is gone for good, remove {marker}",
        )


def check_workspace(target: Target, root: Path) -> None:
    """Refuse a workspace inside the site-packages of a target on this machine: its patchkeeper.toml,
    patch sets and notes would be files of the package, which a change puts back as they were."""
    if target.config.ssh:
        return  # another machine's files
    info = target.info
    real, site = os.path.realpath(root), os.path.realpath(info.site)
    if real == site or real.startswith(site.rstrip("/") + "/"):
        raise BadInput(
            f"target {target.name}: the workspace {root} is inside its site-packages ({info.site}), "
            "whose files patchkeeper manages: a change would count the workspace's own files as hand "
            "edits of the package, and remove them",
            "move the workspace out of site-packages (anywhere else: its own git repository is best)",
        )
