"""A role file whose directory is a symlink (`<unit>.d` -> elsewhere) is refused (change/plans.py:
refuse_linked_role_dir). systemd chases a drop-in directory's symlinks (src/shared/dropin.c,
unit_file_find_dir), so the drop-in written through it landed in the directory it points to, which other
units may share (its ExecStart= reset applied to them all), and a rollback removed a file there."""

from __future__ import annotations

import os

from conftest import every_path
from livesystemd import record


def test_a_dropin_directory_that_is_a_symlink_is_refused_by_apply_and_rollback(baselined, tmp_path):
    env = baselined
    env.pk("snapshot", "--name", "base")
    shared = tmp_path / "shared.d"  # a directory other units' drop-in directories point to
    shared.mkdir()
    (shared / "10-other.conf").write_text("[Service]\nEnvironment=OTHER=1\n")
    dropin_dir = env.dropin.parent
    assert dropin_dir.name.endswith(".service.d") and not dropin_dir.exists()
    dropin_dir.symlink_to(shared)
    before = every_path(env.site, shared, env.root / "systemd", env.state_dir / "ledger")

    proc = env.pk("apply", "nextn", check=2)
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and f"the dropin file {env.dropin}, but its directory is a symlink" in lines[0]
    assert f"(to {shared})" in lines[0] and lines[1].startswith(f"  hint: replace the symlink {dropin_dir}")
    assert (
        every_path(env.site, shared, env.root / "systemd", env.state_dir / "ledger") == before
    )  # nothing written, here or there

    # a drop-in applied into a directory of its own, which later became a symlink: rollback removes nothing there
    dropin_dir.unlink()
    env.pk("apply", "nextn", "--no-verify")
    os.replace(env.dropin, shared / env.dropin.name)
    dropin_dir.rmdir()
    dropin_dir.symlink_to(shared)
    before = every_path(env.site, shared, env.root / "systemd", env.state_dir / "ledger")
    proc = env.pk("rollback", "--to", "base", check=2)
    assert "its directory is a symlink" in proc.stderr and len(proc.stderr.splitlines()) == 2, proc.stderr
    assert every_path(env.site, shared, env.root / "systemd", env.state_dir / "ledger") == before
    assert (shared / env.dropin.name).exists() and (shared / "10-other.conf").exists()


def test_the_live_manager_follows_a_symlinked_dropin_directory(live_systemd):
    """The refusal's premise, asked of systemd itself: a drop-in in the directory a `<unit>.d` symlink
    points to applies to the unit (DropInPaths names it by its chased path, the service runs with it), so a drop-in written
    through that symlink would apply to every unit whose directory points there."""
    m, root = live_systemd, live_systemd.root
    assert root is not None
    units = root / "etc/systemd/system"
    m.write(
        root,
        {
            f"etc/systemd/system/{name}.service": f"[Service]\nType=oneshot\nExecStart={m.recorder} {name}\n"
            for name in ("one", "two")
        }
        | {"srv/shared.d/50-patchkeeper.conf": "[Service]\nEnvironment=SHARED=yes\n"},
    )
    for name in ("one", "two"):
        (units / f"{name}.service.d").symlink_to(root / "srv/shared.d")
    m.daemon_reload()
    for name in ("one", "two"):
        shown = m.show(f"{name}.service", "LoadState", "DropInPaths")
        assert shown["LoadState"] == "loaded", m.log()[-2000:]
        assert shown["DropInPaths"] == str(root / "srv/shared.d/50-patchkeeper.conf"), shown  # chased
        done = m.start_unit(f"{name}.service")
        assert done.returncode == 0, (done.stderr, m.log()[-2000:])
        got = record(m.records, f"{name}.service")
        assert got is not None and got[1]["SHARED"] == "yes", got
