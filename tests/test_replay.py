"""A plain audit's answer given again (replay.py): only while every input it read is as it was.

The CLI tests tell a replayed run from a full one by what it imports (a replay loads no audit code);
the recording tests check each kind of input, and what makes a run unfit to be kept."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zlib

import pytest

from conftest import edit_file
from patchkeeper import replay
from patchkeeper.host import disk

SETTLE = 2.2  # past the racily-clean window: inputs changed less than 2 s before a run are never kept


def audit(env, *args: str) -> tuple[subprocess.CompletedProcess, bool]:
    """(the finished `audit -q`, whether it was a replay: it loaded no audit code)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "patchkeeper", "--workspace", str(env.root),
                           "audit", "-q", *args], capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "patchkeeper.replay" in modules
    return proc, "patchkeeper.audit" not in modules


def kept(env, *args: str) -> subprocess.CompletedProcess:
    """Audit until the answer is kept (the first runs after a change write their caches; the next,
    past the racily-clean window, keeps it), and return the replay that follows: the same answer."""
    time.sleep(SETTLE)
    full = None
    for _ in range(5):
        proc, replayed = audit(env, *args)
        if replayed:
            assert full is not None and (proc.stdout, proc.returncode) == (full.stdout, full.returncode)
            return proc
        full = proc
    raise AssertionError("the answer was never kept")


def test_a_replayed_audit_changes_with_every_input(env):
    env.pk("snapshot", "--name", "base")
    pkg = env.site / "sglang" / "version.py"
    other = env.site / "pip" / "__init__.py"
    edit_file(pkg, pkg.read_bytes())  # inodes of their own: the edits below are in place
    edit_file(other, other.read_bytes())
    clean = kept(env)
    assert clean.returncode == 0 and "0 drift, 0 environment" in clean.stdout
    folder = disk.user_cache("replay")  # kept compressed: thousands of sorted paths sharing prefixes
    data = max((open(os.path.join(folder, n), "rb").read() for n in os.listdir(folder)), key=len)
    assert len(zlib.decompress(data)) > 4 * len(data)

    # the package, edited in place with its size and mtime kept: only its ctime tells
    st = pkg.stat()
    data = pkg.read_bytes()
    with open(pkg, "r+b") as f:
        f.write(bytes([data[0] ^ 0x20]) + data[1:])
    os.utime(pkg, ns=(st.st_atime_ns, st.st_mtime_ns))
    proc, replayed = audit(env)
    assert not replayed and proc.returncode == 1 and "sglang/version.py" in proc.stdout
    assert "sglang/version.py" in kept(env).stdout

    # another distribution's file, edited the same way
    st = other.stat()
    with open(other, "ab") as f:
        f.write(b"# by hand\n")
    proc, replayed = audit(env)
    assert not replayed and "pip/__init__.py" in proc.stdout

    # a new file in the package, the service unit, the workspace's configuration
    kept(env)
    (env.site / "sglang" / "srt" / "added_by_hand.py").write_text("X = 1\n")
    proc, replayed = audit(env)
    assert not replayed and "sglang/srt/added_by_hand.py" in proc.stdout
    kept(env)
    env.unit.write_text(env.unit.read_text() + "# by hand\n")
    proc, replayed = audit(env)
    assert not replayed and "@unit" in proc.stdout
    kept(env, "--json")
    toml = env.root / "patchkeeper.toml"
    toml.write_text(toml.read_text() + "\n[targets.other]\npython = \"/nonexistent/python\"\npackage = \"sglang\"\n")
    proc, replayed = audit(env, "--json")
    assert not replayed and '"drift"' in proc.stdout

    # a state recorded since: the ledger's new entry, which the hand edits are now part of
    before = kept(env)
    env.pk("snapshot", "--name", "by-hand")
    proc, replayed = audit(env)
    state = env.pk("status", "--json", check=None).stdout
    assert not replayed and proc.stdout != before.stdout and "by-hand" in state


@pytest.fixture
def settled_now(monkeypatch):
    """Keep answers over inputs changed just now (the tests' files are seconds old)."""
    monkeypatch.setattr(disk.StatCache, "GRANULARITY_NS", -10**12)


def record(run) -> tuple:
    k = ("test", os.urandom(8).hex())
    with replay.Recording() as rec:
        run()
    assert rec.keep_output(k, 3) is None
    return k


def replays(k: tuple, capfd) -> bool:
    try:
        replay.answer(k)
    except SystemExit as exc:
        assert exc.code == 3 and capfd.readouterr().out == "the answer\n"
        return True
    return False


def test_each_kind_of_input_ends_the_replay(tmp_path, settled_now, monkeypatch, capfd):
    opened, listed, stated = tmp_path / "opened", tmp_path / "listed", tmp_path / "stated"
    opened.write_text("a")
    listed.mkdir()
    (listed / "entry").write_text("e")
    stated.write_text("s")
    monkeypatch.delenv("PK_TEST_VAR", raising=False)

    def run() -> None:
        opened.read_text()
        with os.scandir(listed) as it:  # the entries' own stat comes from the listing: no call to see
            [e.is_file() for e in it]
        os.path.exists(stated)
        os.path.exists(tmp_path / "absent")
        os.environ.get("PK_TEST_VAR")
        print("the answer")

    changes = [lambda: opened.write_text("b"),
               lambda: (listed / "new").write_text("n"),
               lambda: (listed / "entry").write_text("f"),
               lambda: os.chmod(stated, 0o600),
               lambda: (tmp_path / "absent").write_text("now here"),
               lambda: monkeypatch.setenv("PK_TEST_VAR", "set")]
    for change in changes:
        k = record(run)
        capfd.readouterr()
        assert replays(k, capfd)
        change()
        assert not replays(k, capfd), change
    # an unrelated file in the directory holding them all changes nothing: it was never listed
    k = record(run)
    capfd.readouterr()
    (tmp_path / "unrelated").write_text("u")
    assert replays(k, capfd)


def test_variables_read_are_inputs_and_a_copied_environment_all_of_them(settled_now, monkeypatch, capfd):
    monkeypatch.setenv("PK_READ", "1")
    k = record(lambda: (os.environ.get("PK_READ"), print("the answer")))
    capfd.readouterr()
    monkeypatch.setenv("PK_UNREAD", "1")
    assert replays(k, capfd)  # a variable it never read
    k = record(lambda: (dict(os.environ), print("the answer")))
    capfd.readouterr()
    monkeypatch.setenv("PK_UNREAD", "2")
    assert not replays(k, capfd)


def test_a_directory_realpath_passes_through_is_not_listed(tmp_path, settled_now, capfd):
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    k = record(lambda: (os.path.realpath(deep / "f"), (deep / "f").read_text(), print("the answer")))
    capfd.readouterr()
    (tmp_path / "a" / "sibling").write_text("y")  # a's times move; it is still the same directory
    assert replays(k, capfd)
    (tmp_path / "a" / "b").rename(tmp_path / "a" / "c")
    (tmp_path / "a" / "b").mkdir()
    (tmp_path / "a" / "b" / "f").write_text("x")
    assert not replays(k, capfd)  # another directory (and file) under the same name


def test_a_run_that_could_not_see_all_it_read_is_not_kept(tmp_path, settled_now, capfd):
    def save(run) -> str | None:
        with replay.Recording() as rec:
            run()
        return rec.keep_output(("test", os.urandom(8).hex()), 0)

    assert "subprocess.Popen" in save(lambda: subprocess.run(["true"]))
    assert "stderr" in save(lambda: print("warning", file=sys.stderr))
    assert "caches" in save(lambda: (tmp_path / "cache").write_text("c"))
    import socket

    def connect() -> None:
        with socket.socket() as s:
            try:
                s.connect(("127.0.0.1", 9))
            except OSError:
                pass

    assert "socket.connect" in save(connect)
    assert "buffer" in save(lambda: sys.stdout.buffer.write(b"around the recording\n"))
    assert save(lambda: print("the answer")) is None  # and the checks above are not blind


def test_inputs_changed_while_the_run_went_on_are_never_kept(tmp_path, capfd):
    fresh = tmp_path / "fresh"
    fresh.write_text("just written")
    with replay.Recording() as rec:
        fresh.read_text()
    assert "granularity" in rec.keep_output(("test", "fresh"), 0)
    assert not os.path.exists(replay.path_of(("test", "fresh")))


def test_all_gives_a_local_targets_kept_report_again(env, monkeypatch):
    from patchkeeper import workspace
    from patchkeeper.commands import audit as audit_command

    env.pk("snapshot", "--name", "base")
    ws = workspace.load(env.root)
    computed = []
    real = audit_command._audit_one
    monkeypatch.setattr(audit_command, "_audit_one", lambda *a: computed.append(real(*a)) or computed[-1])
    time.sleep(SETTLE)
    for _ in range(5):
        before = len(computed)
        report = audit_command._audit_quiet(ws, "local", [])
        if len(computed) == before:  # recalled, not computed: the same report as the last one computed
            assert report == computed[-1] and report.exit_code == 0
            break
    else:
        raise AssertionError("the report was never kept")
    pkg = env.site / "sglang" / "version.py"
    edit_file(pkg, pkg.read_bytes() + b"# by hand\n")
    report = audit_command._audit_quiet(ws, "local", [])
    assert len(computed) == before + 1 and "sglang/version.py" in report.differences


def test_equal_keys_name_one_file():
    shared = "x" * 40
    twice = ("k", shared, shared)  # marshal writes the second as a reference to the first
    apart = ("k", "x" * 40, "".join(["x"] * 40))
    assert twice == apart and replay.path_of(twice) == replay.path_of(apart)


def test_at_most_keep_answers_are_kept_the_least_recent_go_first(tmp_path, settled_now, monkeypatch, capfd):
    monkeypatch.setattr(replay, "KEEP", 3)
    oldest = ("test", "oldest")
    replay.mark(oldest)
    time.sleep(0.01)
    for i in range(3):
        replay.mark(("test", i))
        time.sleep(0.01)
    assert not os.path.exists(replay.path_of(oldest)) and os.path.exists(replay.path_of(("test", 0)))
    k = record(lambda: print("the answer"))  # a kept answer prunes the same way, and is kept itself
    capfd.readouterr()
    assert len(os.listdir(os.path.dirname(replay.path_of(k)))) == 3 and replays(k, capfd)
