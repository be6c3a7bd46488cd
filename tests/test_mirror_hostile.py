"""`recover` copies a target's records into the workspace (change/mirror.py: snapshots/<target>/), and every
command reads the ledger (host/statcache.read_changed): a hostile or damaged state dir is data there too.
An entry that is a FIFO once made every command wait for ever, and a manifest with a setuid mode or a key
that climbs was copied over the workspace's good copy (the one the refusal's hint says to put back),
exit 0; an entry whose name or ids climb is refused, and nothing is written outside snapshots/<target>/."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import every_path
from helpers import plant_manifests, put_back_ledger


def _recover(env, *args: str) -> subprocess.CompletedProcess:
    """`recover` (or `args`), which must end by itself: a CLI left waiting on a FIFO is let go and fails."""
    argv = [sys.executable, "-m", "patchkeeper", "--workspace", str(env.root), *(args or ("recover",))]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=300)  # a liveness bound, not a speed one: it waits for ever
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"`{' '.join(args or ('recover',))}` waits on a state dir's file") from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_a_hostile_ledger_is_refused_or_ignored_and_the_workspace_copy_is_kept(baselined, tmp_path):
    env = baselined
    env.pk("snapshot", "--name", "base")
    ledger_dir = env.state_dir / "ledger"
    ledger = {p.name: p.read_bytes() for p in sorted(ledger_dir.glob("*.json"))}
    last = json.loads(ledger[max(ledger)])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary").write_bytes(b"CANARY\n")
    big = outside / "big.json"
    with open(big, "wb") as f:
        f.truncate(17 << 20)  # sparse: over the 16 MiB a state file may hold
    copies = env.root / "snapshots" / "local"
    kept = every_path(copies, outside)

    # not regular files, or too big: ignored with one warning naming them, never waited on nor read
    odd = ledger_dir / "000009-20260101T000000-aaaaaa.json"
    makers = {"a FIFO": os.mkfifo, "a directory": os.mkdir, "over the 16 MiB": lambda p: os.symlink(big, p)}
    for why, make in makers.items():
        make(odd)
        for command in (("recover",), ("status",)):
            proc = _recover(env, *command)
            assert proc.returncode in (0, 1), (why, proc.stderr)
            warning = [line for line in proc.stderr.splitlines() if line.startswith("patchkeeper: warning:")]
            assert len(warning) == 1 and "1 ledger entry ignored (000009-" in warning[0] and why in warning[0]
        odd.rmdir() if odd.is_dir() and not odd.is_symlink() else odd.unlink()
    assert every_path(copies, outside) == kept

    # values that would name a file outside snapshots/<target>/, or an absurd one: the entry is refused
    hostile = [
        ("id", "../../../outside/x"),
        ("seq", 10**40),
        ("after", {**last["after"], "id": "../../outside"}),
    ]
    for field, value in hostile:
        (ledger_dir / "000009-hostile.json").write_text(json.dumps({**last, "seq": 9, field: value}))
        proc = _recover(env)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2 and len(lines) == 2 and "000009-hostile.json" in lines[0], proc.stderr
        assert "is damaged" in lines[0] and lines[1].startswith("  hint: put back the workspace's copy")
        assert every_path(copies, outside) == kept, field
        (ledger_dir / "000009-hostile.json").unlink()

    # a manifest with a setuid mode and a key that climbs: not copied over the workspace's good copy
    def hostile_rows(text: bytes) -> bytes:
        return text.replace(b"644 ", b"4755 ", 1) + b"644 1 blake3:" + b"ab" * 32 + b" ../../outside/canary\n"

    plant_manifests(env.state_dir, ledger, hostile_rows)
    proc = _recover(env)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 2, proc.stderr
    assert "records could not be copied" in lines[0] and "is damaged: the line '4755 " in lines[0]
    assert (
        lines[1].startswith("  hint: the state dir's record is damaged")
        and "snapshots/local/ledger/" in lines[1]
    )
    assert every_path(copies, outside) == kept
    put_back_ledger(env.state_dir, ledger)
    assert _recover(env).returncode == 0 and every_path(copies, outside) == kept
