"""Targets: where a package lives. `open_target` picks the local or SSH implementation."""

from __future__ import annotations

from ..workspace import TargetConfig
from .base import Target, TargetInfo
from .local import LocalTarget


def open_target(config: TargetConfig) -> Target:
    if config.connect is not None:  # a target opened another way (Ansible's connection: ansible_link.py)
        target: Target = config.connect(config)
        return target
    if config.ssh:
        from .ssh import SshTarget  # lazy own: a local target's command loads no SSH client code

        return SshTarget(config)

    return LocalTarget(config)


__all__ = ["Target", "TargetInfo", "open_target"]
