"""`patchkeeper clear-caches` (commands/clear_caches.py): every cache of the target's state dir and the
user cache goes, every record stays, and the commands after it answer as before."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from conftest import edit_file

RECORDS = {"ledger", "store", "state_dir", "lock", "lock.guard", "journal.json"}  # docs/files-and-caches.md


def _files(root: Path) -> set[str]:
    return {str(Path(d, n).relative_to(root)) for d, _, names in os.walk(root) for n in names}


def test_clear_caches_removes_every_cache_and_the_next_commands_answer_the_same(baselined):
    env = baselined
    env.pk("apply", "ddtree", "--no-verify")
    time.sleep(2.2)  # past the racily-clean window of the apply's writes, or no cache may keep them
    for args in (("audit", "-q"), ("env",), ("status",), ("audit", "-q"), ("log",), ("diff", "local")):
        env.pk(*args, check=None)  # every cache these write (the tree's seal once the stat cache is there)
    user = Path(os.environ["HOME"]) / ".cache" / "patchkeeper"
    state = _files(env.state_dir)
    cached = {p for p in state if p.split("/")[0] not in RECORDS}
    for kind in ("statcache.json", "audit/tree.seal", "audit/records.seal", "env/"):
        assert any(p.startswith(kind) for p in cached), (kind, sorted(cached))
    assert {"ledgers", "interpreters.marshal", "dist-infos.marshal"} <= {
        p.split("/")[0] for p in _files(user)
    }
    status, audit = env.pk("status", "--json").stdout, env.pk("audit", "--json", check=None)

    proc = env.pk("clear-caches")
    assert f"local: removed {len(cached)} cache file(s) from {env.state_dir}" in proc.stdout
    assert f"cache file(s) from {user}" in proc.stdout
    assert sorted(set(os.listdir(env.state_dir)) - RECORDS) == []  # only records are left
    assert _files(env.state_dir) == state - cached and not user.exists()

    assert env.pk("status", "--json").stdout == status
    again = env.pk("audit", "--json", check=None)
    assert (again.returncode, json.loads(again.stdout)) == (audit.returncode, json.loads(audit.stdout))
    # the caches written again by that audit are no stale answers: a hand edit shows
    edit_file(env.site / "sglang" / "version.py", b"__version__ = 'by hand'\n")
    assert "sglang/version.py" in env.pk("audit", "-q", check=None).stdout
    assert env.pk("clear-caches").stdout.startswith("local: removed ")


def test_clear_caches_of_a_target_without_state_removes_nothing_and_says_so(env):
    proc = env.pk("clear-caches", "-t", "local")
    assert f"local: removed 0 cache file(s) from {env.state_dir}" in proc.stdout
    assert not env.state_dir.exists() or sorted(set(os.listdir(env.state_dir)) - RECORDS) == []
