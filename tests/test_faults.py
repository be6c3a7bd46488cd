"""Faults: a full disk, damaged state files, interruptions, dead lock holders, leftover directories."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys

from checkout import git as run_git, init_repo
from conftest import Env

from patchkeeper.host.disk import hash_bytes


def _pk_limited(env: Env, max_file_bytes: int, *args: str) -> subprocess.CompletedProcess:
    """Run the CLI where no file may grow beyond `max_file_bytes`: every write past it fails in the
    kernel (EFBIG), as on a full disk, at whatever point the real code reaches it."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    return subprocess.run(
        [sys.executable, "-m", "patchkeeper", "--workspace", str(env.root), *args],
        capture_output=True,
        text=True,
        preexec_fn=limit,
    )


def _one_error(proc: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2 with one error line and a hint line, naming `words`, and no traceback."""
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr, proc.stderr
    assert lines[-2].startswith("patchkeeper: error: ") and lines[-1].startswith("  hint: "), proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# ---- 9: the lock -------------------------------------------------------------------------------
def test_a_write_failing_while_taking_the_lock_leaves_no_lock(baselined):
    env = baselined
    env.pk("status")  # the interpreter's description is cached: the next command starts without writing
    proc = _pk_limited(env, 0, "apply", "ddtree")  # not one byte may be written: the lock's first write fails
    _one_error(proc, "File too large")
    assert not (env.state_dir / "lock").exists()
    assert not [p for p in env.state_dir.iterdir() if p.name.startswith(".pk-tmp-")]
    env.pk("apply", "ddtree")  # space is back: nothing is in the way


def test_an_empty_or_damaged_lock_nobody_holds_is_taken_over(baselined):
    env = baselined
    env.pk("apply", "ddtree")
    for content in ("", "[1,2]", '{"pid": "x"}', '{"pid": 1'):  # older versions left the first on a full disk
        (env.state_dir / "lock").write_text(content)
        env.pk("recover")
        assert not (env.state_dir / "lock").exists()


def test_a_damaged_lock_whose_holder_lives_is_refused_by_name(baselined):
    env = baselined
    env.pk("status")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from patchkeeper.host.agent import Agent;"
            f"assert Agent().lock({str(env.state_dir / 'lock')!r}, {{'command': 'apply ddtree'}}) is None;"
            "print('locked', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        lock = env.state_dir / "lock"
        os.truncate(lock, 0)  # its record is gone, but its holder still runs
        _one_error(env.pk("apply", "nextn", check=None), "locked by pid ?", "damaged")
    finally:
        holder.stdin.close()
        holder.wait()
    env.pk("apply", "nextn")


# ---- 10: the workspace's copy on a full disk ----------------------------------------------------
def test_a_full_workspace_after_the_commit_says_the_change_happened_and_recover_copies_again(
    env, monkeypatch
):
    for var, value in (
        ("GIT_AUTHOR_NAME", "t"),
        ("GIT_AUTHOR_EMAIL", "t@example.test"),
        ("GIT_COMMITTER_NAME", "t"),
        ("GIT_COMMITTER_EMAIL", "t@example.test"),
    ):
        monkeypatch.setenv(var, value)
    init_repo(env.root)
    run_git(env.root, "add", "-A")
    run_git(env.root, "commit", "-qm", "workspace")
    proc = env.pk("apply", "ddtree", env={"PATCHKEEPER_DISK_FULL": "/manifests/"})  # exit 0: it is applied
    assert re.search(
        r"\n\d+ file\(s\) changed; state \w+ -> \w+", proc.stdout
    )  # the change happened and says so
    assert "No space left on device" in proc.stderr and "local was changed (transaction" in proc.stderr
    assert "patchkeeper recover -t local" in proc.stderr
    assert "files match the recorded state" in env.pk("status").stdout
    copies = env.root / "snapshots" / "local"
    assert not list((copies / "manifests").iterdir())  # nothing half-written

    env.pk("recover")
    state = json.loads((copies / "state.json").read_text())
    ledger = sorted(
        json.loads((env.state_dir / "ledger" / n).read_text())["after"]["manifest"]
        for n in os.listdir(env.state_dir / "ledger")
    )
    kept = sorted(hash_bytes(p.read_bytes()) for p in (copies / "manifests").iterdir())
    assert kept == ledger and (copies / "manifests" / f"{state['id']}.txt").exists()
    assert run_git(env.root, "status", "--porcelain", "--", "snapshots") == ""  # and committed

    damaged = copies / "manifests" / f"{state['id']}.txt"  # as an older version left it: cut short
    whole = damaged.read_bytes()
    damaged.write_bytes(whole[: len(whole) // 2])
    env.pk("recover")
    assert damaged.read_bytes() == whole
    assert run_git(env.root, "status", "--porcelain", "--", "snapshots") == ""


# ---- 11: damaged state files --------------------------------------------------------------------
def test_damaged_state_files_are_one_line_errors_with_a_hint(baselined):
    env = baselined
    env.pk("apply", "ddtree")
    before = env.snapshot()
    state = env.state_dir

    journal = state / "journal.json"
    journal.write_text("garbage{")
    for verb in ("status", "log"):  # read-only verbs say what is wrong and go on
        proc = env.pk(verb)
        assert "journal" in proc.stderr and "is damaged" in proc.stderr and "move it aside" in proc.stderr
        assert "Traceback" not in proc.stderr
    _one_error(env.pk("recover", check=None), "journal", "is damaged", "move it aside")
    _one_error(env.pk("rollback", "--to", "baseline", check=None), "journal")
    journal.unlink()

    newest = sorted((state / "ledger").iterdir())[-1]
    whole = newest.read_bytes()
    newest.write_bytes(whole[: len(whole) // 2])
    _one_error(env.pk("log", check=None), "ledger entry", newest.name, "is damaged")
    newest.write_bytes(whole)

    index = next((state / "store" / "packs").glob("*.idx"))
    whole = index.read_bytes()
    os.chmod(index, 0o644)
    index.write_bytes(whole[: len(whole) // 2])
    _one_error(env.pk("rollback", "--to", "baseline", check=None), "pack index", "is damaged")
    assert env.snapshot() == before
    index.write_bytes(whole)
    env.pk("rollback", "--to", "baseline")


# ---- 12: temporary files of an interrupted baseline ----------------------------------------------
def test_a_baseline_pack_that_cannot_be_written_leaves_nothing_behind(env):
    env.pk("status")  # the interpreter's description and the stat cache are written, below the limit
    proc = _pk_limited(env, 8 << 20, "apply", "ddtree")  # the baseline's pack is bigger than 8 MB
    _one_error(proc, "File too large")
    packs = env.state_dir / "store" / "packs"
    assert not [p.name for p in packs.iterdir()] if packs.exists() else True
    assert not (env.state_dir / "lock").exists()
    env.pk("apply", "ddtree")


def test_temporary_files_of_a_dead_process_are_removed_by_the_next_command(baselined):
    env = baselined
    env.pk("apply", "ddtree")
    packs = env.state_dir / "store" / "packs"
    dead = _dead_pid()
    env.pk("audit", check=None)  # the audit's and the fingerprint's caches exist
    leftovers = [
        packs / f".tmp-{dead}-1",
        packs / f".pk-tmp-{dead}-2",
        env.state_dir / f".pk-tmp-{dead}-3",
        env.state_dir / "ledger" / f".pk-tmp-{dead}-4",
        env.state_dir / "audit" / f".pk-tmp-{dead}-5",
        env.state_dir / "env" / "native" / f".pk-tmp-{dead}-6",
    ]  # caches a killed command was saving
    for p in leftovers:
        p.write_bytes(b"x" * 1000)
    mine = packs / f".tmp-{os.getpid()}-5"  # a live writer's (this test's) file stays
    mine.write_bytes(b"y")
    proc = env.pk("apply", "nextn")
    assert "removed 6 temporary file(s)" in proc.stderr
    assert not any(p.exists() for p in leftovers) and mine.exists()
    assert len(list(packs.glob("*.idx"))) == len(list(packs.glob("*.pack")))
    orphan = packs / (
        "0" * 32 + ".pack"
    )  # a finished pack without its index holds backups: kept, never cleaned
    orphan.write_bytes(b"z" * 100)
    env.pk("rollback", "--to", "baseline", check=None)
    assert orphan.exists()


# ---- 13: a zombie lock holder --------------------------------------------------------------------
def test_a_dead_but_unreaped_lock_holder_does_not_hold_the_lock(env):
    env.pk("status")
    proc = subprocess.Popen(
        [sys.executable, "-m", "patchkeeper", "--workspace", str(env.root), "apply", "ddtree"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PATCHKEEPER_CRASH_AT": "journal-committed", "PATCHKEEPER_CRASH_SIGNAL": "STOP"},
    )
    try:
        os.waitid(os.P_PID, proc.pid, os.WSTOPPED | os.WNOWAIT)  # stopped, holding the lock
        assert json.loads((env.state_dir / "lock").read_text())["pid"] == proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # dead, but not reaped: a zombie
        assert open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
        rec = env.pk("recover")
        assert "finished transaction" in rec.stdout
    finally:
        proc.wait()
    assert "files match the recorded state" in env.pk("status").stdout


# ---- 14: Ctrl-C ---------------------------------------------------------------------------------
def test_ctrl_c_exits_130_and_points_at_recover(baselined):
    env = baselined
    env.pk("status")
    before = env.snapshot()
    proc = env.pk(
        "apply",
        "ddtree",
        check=130,
        env={"PATCHKEEPER_CRASH_AT": "journal-prepared", "PATCHKEEPER_CRASH_SIGNAL": "INT"},
    )
    assert (
        "Aborted" not in proc.stderr and "interrupted" in proc.stderr and "patchkeeper recover" in proc.stderr
    )
    assert "undid transaction" in env.pk("recover").stdout
    assert env.snapshot() == before


# ---- 15: directories an apply created --------------------------------------------------------------
def _add(rel: str, text: str) -> str:
    return (
        f"diff --git a/{rel} b/{rel}\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n"
        f"+++ b/{rel}\n@@ -0,0 +1 @@\n+{text}\n"
    )


def test_rollback_removes_the_directories_an_apply_created_and_only_those(env):
    mine = env.site / "sglang" / "pk_user_dir"
    mine.mkdir()  # there before the apply: it stays, empty
    d = env.root / "patchsets" / "advpkg"
    d.mkdir()
    (d / "patchset.toml").write_text('name = "advpkg"\nversion = "1.0.0"\npackage = "sglang"\n')
    (d / "0001-add.patch").write_text(
        _add("sglang/pk_adv_pkg/x.py", "X = 1")
        + _add("sglang/pk_adv_pkg/sub/y.py", "Y = 2")
        + _add("sglang/pk_user_dir/z.py", "Z = 3")
    )
    killed = env.pk(
        "apply", "advpkg", check=None, env={"PATCHKEEPER_CRASH_AT": "staged sglang/pk_adv_pkg/sub/y.py"}
    )
    assert killed.returncode == -signal.SIGKILL and (env.site / "sglang" / "pk_adv_pkg" / "sub").is_dir()
    assert "undid transaction" in env.pk("recover").stdout  # not committed: its new directories go too
    assert not (env.site / "sglang" / "pk_adv_pkg").exists() and mine.is_dir()

    env.pk("apply", "advpkg")
    subprocess.run(
        [str(env.venv / "bin" / "python"), "-m", "compileall", "-q", str(env.site / "sglang" / "pk_adv_pkg")],
        check=True,
    )  # imported once: bytecode beside it
    assert (env.site / "sglang" / "pk_adv_pkg" / "sub" / "__pycache__").is_dir()
    env.pk("rollback", "--to", "baseline")
    assert not (env.site / "sglang" / "pk_adv_pkg").exists()
    assert mine.is_dir() and not list(mine.iterdir())
