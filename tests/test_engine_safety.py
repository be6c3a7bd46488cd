"""Safety rules of the engine: pre-image check, hand edits, lock, versions, manifest-only states."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import edit_file

from patchkeeper.host.disk import hash_bytes
from patchkeeper.host.store import Store

SPEC = "sglang/srt/speculative/spec_info.py"
VERSION = "sglang/version.py"


def test_hand_edit_of_a_patched_file_is_refused_then_forced_and_backed_up(baselined):
    env = baselined
    env.pk("snapshot", "--name", "start")
    before = env.snapshot()
    edited = (env.site / SPEC).read_bytes() + b"\n# hand edit\n"
    edit_file(env.site / SPEC, edited)
    proc = env.pk("apply", "ddtree", check=2)
    assert SPEC in proc.stderr and "--force" in proc.stderr
    assert (env.site / SPEC).read_bytes() == edited  # nothing changed
    out = env.pk("apply", "ddtree", "--force").stdout
    assert SPEC in out and "backed up" in out
    assert Store(str(env.state_dir / "store")).get(hash_bytes(edited)) == edited
    env.pk("rollback", "--to", "start")
    assert env.snapshot() == before


def test_rollback_restores_hand_edits_and_names_them(baselined):
    env = baselined
    before = env.snapshot()
    env.pk("apply", "ddtree")
    hand = b"__version__ = 'hand'\n"
    edit_file(env.site / VERSION, hand)
    (env.site / "sglang/stray.py").write_text("print('copied in with scp')\n")
    out = env.pk("rollback", "--to", "baseline").stdout
    assert VERSION in out and "sglang/stray.py" in out and "changed by hand" in out
    assert env.snapshot() == before
    # the hand edit was backed up before it was undone: the rollback itself loses nothing
    assert Store(str(env.state_dir / "store")).get(hash_bytes(hand)) == hand
    log = json.loads(env.pk("log", "--json").stdout)
    assert set(log[0]["hand_edits"]) == {VERSION, "sglang/stray.py"}


def test_rollback_previous_and_by_state_id(baselined):
    env = baselined
    env.pk("apply", "ddtree")
    ddtree_state = json.loads(env.pk("status", "--json").stdout)["state"]["id"]
    env.pk("apply", "dflash")
    assert "DFLASH" in env.running()
    env.pk("rollback", "--to", "previous")
    assert "DDTREE" in env.running()
    env.pk("rollback", "--to", "baseline")
    env.pk("rollback", "--to", ddtree_state[:8])
    assert (env.site / "sglang/srt/speculative/ddtree_utils.py").exists()
    assert env.pk("rollback", "--to", "no-such-state", check=2).stderr.count("no state") == 1


def test_reapply_is_a_no_op_and_changed_content_needs_a_version_bump(baselined):
    env = baselined
    env.pk("apply", "ddtree")
    assert "nothing to do" in env.pk("apply", "ddtree").stdout
    env.pk("rollback", "--to", "baseline")
    unit = env.root / "patchsets/ddtree/dropin.conf"
    unit.write_text(unit.read_text() + "# changed\n")
    proc = env.pk("apply", "ddtree", check=2)
    assert "without a version bump" in proc.stderr
    toml = env.root / "patchsets/ddtree/patchset.toml"
    toml.write_text(toml.read_text().replace('version = "3.1.0"', 'version = "3.1.1"'))
    env.pk("apply", "ddtree")
    assert "# changed" in env.running()


def test_wrong_package_version_is_refused_unless_forced(baselined):
    env = baselined
    toml = env.root / "patchsets/nextn/patchset.toml"
    toml.write_text(toml.read_text().replace("==0.5.23", "==0.5.24"))
    before = env.snapshot()
    proc = env.pk("apply", "nextn", check=2)
    assert "0.5.24" in proc.stderr and "0.5.23" in proc.stderr
    assert env.snapshot() == before
    assert "warning" in env.pk("apply", "nextn", "--force").stdout


def test_manifest_only_state_refuses_rollback_it_cannot_do(env):
    env.pk("snapshot", "--name", "light", "--manifest-only")
    env.pk("apply", "ddtree")
    edit_file(env.site / VERSION, b"__version__ = 'hand'\n")
    before = env.snapshot()
    proc = env.pk("rollback", "--to", "light", check=2)
    assert VERSION in proc.stderr and "without bytes" in proc.stderr
    assert env.snapshot() == before
    # files changed through patchkeeper were backed up by the transaction, so those come back
    edit_file(env.site / VERSION, _pristine(env, VERSION))
    env.pk("rollback", "--to", "light")
    assert "DDTREE" not in (env.site / SPEC).read_text()


def _pristine(env, rel):
    from conftest import PRISTINE, SITE_REL

    return (PRISTINE / SITE_REL / rel).read_bytes()


def test_lock_names_its_holder_and_a_dead_holder_is_detected(baselined):
    env = baselined
    env.pk("status")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time; from patchkeeper.host.agent import Agent;"
            f"assert Agent().lock({str(env.state_dir / 'lock')!r}, {{'command': 'apply ddtree'}}) is None;"
            "print('locked', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = env.pk("apply", "nextn", check=2)
        assert f"pid {holder.pid}" in proc.stderr and "apply ddtree" in proc.stderr
    finally:
        holder.kill()
        holder.wait()
    assert (env.state_dir / "lock").exists()  # left behind by a dead process
    env.pk("apply", "nextn")  # detected as stale, not waited on
    assert not (env.state_dir / "lock").exists()


def test_corrupt_backup_object_is_an_error_never_restored(baselined):
    env = baselined
    env.pk("apply", "ddtree")
    original = _pristine(env, SPEC)
    store = Store(str(env.state_dir / "store"))
    digest = hash_bytes(original)
    pack, offset, size = store._where(digest)
    os.chmod(pack, 0o644)
    with open(pack, "r+b") as f:  # flip one byte of the object inside the pack
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    before = env.snapshot()
    proc = env.pk("rollback", "--to", "baseline", check=2)
    assert "corrupt" in proc.stderr
    assert env.snapshot() == before


def test_bytecode_of_touched_modules_is_removed(baselined):
    env = baselined
    cache = env.site / "sglang/srt/speculative/__pycache__"
    pycs = [p.name for p in cache.iterdir() if p.name.startswith("spec_info.")]
    assert pycs, "pip compiled the package, so there is bytecode to invalidate"
    env.pk("apply", "ddtree")
    assert not any(p.name.startswith("spec_info.") for p in cache.iterdir())


def test_mode_changes_deletes_and_adds_roll_back_exactly(baselined):
    env = baselined
    gone = "sglang/srt/speculative/spec_utils.py"
    lines = (env.site / gone).read_text().splitlines(keepends=True)
    removal = "".join("-" + l for l in lines)
    patch = (
        "diff --git a/sglang/launch_server.py b/sglang/launch_server.py\nold mode 100644\nnew mode 100755\n"
        f"diff --git a/{gone} b/{gone}\ndeleted file mode 100644\nindex 1111111..0000000\n--- a/{gone}\n+++ /dev/null\n"
        f"@@ -1,{len(lines)} +0,0 @@\n{removal}"
        "diff --git a/sglang/tool.sh b/sglang/tool.sh\nnew file mode 100755\nindex 0000000..2222222\n"
        "--- /dev/null\n+++ b/sglang/tool.sh\n@@ -0,0 +1 @@\n+echo hi\n"
    )
    d = env.root / "patchsets" / "modes"
    d.mkdir()
    (d / "patchset.toml").write_text('name = "modes"\nversion = "1.0.0"\npackage = "sglang"\n')
    (d / "0001-modes.patch").write_text(patch)
    before = env.snapshot()
    env.pk("apply", "modes")
    assert os.stat(env.site / "sglang/launch_server.py").st_mode & 0o777 == 0o755
    assert not (env.site / gone).exists()
    assert os.stat(env.site / "sglang/tool.sh").st_mode & 0o777 == 0o755
    assert "files match" in env.pk("status").stdout
    env.pk("rollback", "--to", "baseline")
    assert env.snapshot() == before
