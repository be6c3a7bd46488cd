"""Dry runs and `check` write nothing on the host: `apply --dry-run`, `rollback --dry-run` and `check`
leave every path of the target's venv (its state dir and bytecode caches included) and of its unit's
directory as they were, byte for byte, and create none (over SSH: tests/test_ssh.py; Ansible's check
mode: tests/test_ansible.py)."""

from __future__ import annotations

import pytest
from conftest import every_path


def _host(env) -> dict:
    return every_path(env.venv, env.unit.parent)


def _changed(before: dict, after: dict) -> list[str]:
    """The paths created, removed or changed (bytes, mode, size or mtime), for a readable failure."""
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


@pytest.mark.parametrize(
    "verb", [("apply", "ddtree", "--dry-run"), ("check", "ddtree"), ("apply", "ddtree", "--all", "--dry-run")]
)
def test_a_dry_run_on_a_pristine_target_creates_no_state_dir(env, verb):
    before = _host(env)
    env.pk(*verb)
    changed = _changed(before, _host(env))
    assert not changed, "\n".join(changed)
    assert not (env.venv / ".patchkeeper").exists()


@pytest.mark.parametrize(
    "verb",
    [("apply", "nextn", "--dry-run"), ("check", "nextn"), ("rollback", "--to", "baseline", "--dry-run")],
)
def test_a_dry_run_on_a_recorded_target_leaves_its_state_dir_byte_identical(baselined, verb):
    env = baselined
    env.pk("apply", "ddtree")
    before = _host(env)
    env.pk(*verb)
    changed = _changed(before, _host(env))
    assert not changed, "\n".join(changed)
