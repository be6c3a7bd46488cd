"""Targets: where a package lives. `open_target` picks the local or SSH implementation."""

from __future__ import annotations

from ..workspace import TargetConfig
from .base import Target, TargetInfo
from .local import LocalTarget
from .ssh import SshTarget


def open_target(config: TargetConfig) -> Target:
    if config.connect is not None:  # a target opened another way (Ansible's connection: ansible_link.py)
        target: Target = config.connect(config)
        return target
    if config.ssh:
        return SshTarget(config)

    return LocalTarget(config)


__all__ = ["Target", "TargetInfo", "open_target"]
