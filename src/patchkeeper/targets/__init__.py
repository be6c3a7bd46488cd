"""Targets: where a package lives. `open_target` picks the local or SSH implementation."""

from __future__ import annotations

from ..workspace import TargetConfig
from .base import Target, TargetInfo


def open_target(config: TargetConfig) -> Target:
    if config.connect is not None:  # a target opened another way (Ansible's connection: ansible_link.py)
        target: Target = config.connect(config)
        return target
    if config.ssh:
        from .ssh import SshTarget  # paramiko is imported only for remote targets

        return SshTarget(config)
    from .local import LocalTarget

    return LocalTarget(config)


__all__ = ["Target", "TargetInfo", "open_target"]
