"""Remote targets through a real OpenSSH sshd on 127.0.0.1: two hosts (ssh aliases), each a real
sglang venv; every verb, diff, host keys, a connection cut mid-apply, hostile file names."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HOSTS, SITE_REL, copy_venv, edit_file, every_path, tree
from helpers import FAKE, free_port, pk_background, proc_state, wait_for
from sshd import agent_session_pid, keygen, sshd, write_client_config  # noqa: F401 (sshd is a fixture)


def _chmod(path: Path, mode: int) -> None:
    """chmod a file of a hardlinked venv without changing the pristine venv's inode."""
    edit_file(path, path.read_bytes())
    path.chmod(mode)


def _ops(out: str) -> list[str]:
    """The per-file lines of a printed plan ("  M key  size"), which do not depend on the target."""
    return sorted(
        line.split("  (/")[0] for line in out.splitlines() if line[:4] in ("  M ", "  A ", "  D ", "  m ")
    )


def test_verbs_over_ssh_work_as_locally(fleet, pristine_venv):
    copy_venv(pristine_venv, fleet.env.venv)
    pristine = fleet.state("ct129")
    for args in (["apply", "ddtree"], ["apply", "nextn"], ["rollback", "--to", "previous"]):
        local = fleet.pk(*args, "-t", "local").stdout
        remote = fleet.pk(*args, "-t", "ct129").stdout
        assert _ops(remote) == _ops(local) and _ops(remote)
        assert tree(fleet.venvs["ct129"]) == tree(fleet.env.venv)
        assert fleet.units["ct129"].read_bytes() == fleet.env.unit.read_bytes()
        assert fleet.dropin_text("ct129") == fleet.dropin_text(
            "local"
        ) and b"\nExecStart=PYTHON -m " in fleet.dropin_text("ct129")  # each runs its own interpreter

    st = json.loads(fleet.pk("status", "-t", "ct129", "--json").stdout)
    assert [p["name"] for p in st["state"]["stack"]] == ["ddtree"] and st["differences"] == {}
    assert st["site"] == str(fleet.site("ct129"))
    fleet.pk("rollback", "-t", "ct129", "--to", "baseline")
    assert fleet.state("ct129") == pristine
    log = json.loads(fleet.pk("log", "-t", "ct129", "--json").stdout)
    assert [e["kind"] for e in log] == ["rollback", "rollback", "switch", "apply", "baseline"]
    assert [e["kind"] for e in log[1:]] == [
        e["kind"] for e in json.loads(fleet.pk("log", "-t", "local", "--json").stdout)
    ]
    # the venv's Python has no blake3: the host's store and manifests say sha256, and compare by it
    objects = fleet.venvs["ct129"] / ".patchkeeper" / "store" / "objects"
    assert [p.name for p in objects.iterdir()] == ["sha256"]
    assert log[0]["after"]["manifest"].startswith("sha256:")
    mirrored = fleet.env.root / "snapshots" / "ct129"
    assert len(list((mirrored / "ledger").iterdir())) == 5 and (mirrored / "manifest.txt").is_file()
    # the host's pristine inodes were never written through
    assert tree(pristine_venv) == tree(fleet.venvs["ct129"])


def test_diff_host_against_its_record_names_kinds_and_owners(fleet):
    assert "ct129" in fleet.pk("diff", "ct129", check=2).stderr  # nothing recorded yet: refused
    fleet.pk("apply", "ddtree", "-t", "ct129")
    assert fleet.pk("diff", "ct129").stdout.startswith("ct129 against state")
    site = fleet.site("ct129")
    spec = site / "sglang/srt/speculative/spec_info.py"
    edit_file(spec, spec.read_bytes() + b"# tuned by hand\n")
    edit_file(site / "sglang/srt/extra_by_hand.py", b"x = 1\n")
    _chmod(site / "sglang/version.py", 0o600)
    (site / "sglang/srt/utils/common.py").unlink()

    out = fleet.pk("diff", "ct129", "--json", check=1)
    doc = json.loads(out.stdout)
    got = {d["key"]: (d["kind"], d["owners"].get("ct129")) for d in doc["differences"]}
    assert got == {
        "sglang/srt/speculative/spec_info.py": ("changed", "ddtree@3.1.0"),
        "sglang/srt/extra_by_hand.py": ("added", None),
        "sglang/version.py": ("mode", None),
        "sglang/srt/utils/common.py": ("removed", None),
    }
    assert doc["algorithm"] == "sha256"

    text = fleet.pk("diff", "ct129", "--patch", check=1).stdout
    assert "  changed  sglang/srt/speculative/spec_info.py  [ddtree@3.1.0]" in text
    assert "+# tuned by hand\n" in text and "+x = 1\n" in text

    base = json.loads(fleet.pk("diff", "ct129", "--against", "baseline", "--json", check=1).stdout)
    owned = {d["key"]: d["owners"].get("ct129") for d in base["differences"]}
    assert (
        owned["@dropin"] == "ddtree@3.1.0"
        and owned["sglang/srt/speculative/ddtree_utils.py"] == "ddtree@3.1.0"
    )
    assert owned["sglang/srt/extra_by_hand.py"] is None and len(owned) == 18 + 3

    fleet.pk("rollback", "-t", "ct129", "--to", "baseline")
    state = json.loads(fleet.pk("status", "-t", "ct129", "--json").stdout)["state"]["id"]
    assert f"ct129: files match state {state} (baseline)" in fleet.pk("diff", "ct129").stdout


def _expected(a: dict, b: dict) -> dict[str, str]:
    out = {}
    for key in set(a) | set(b):
        if a.get(key) == b.get(key):
            continue
        out[key] = (
            "added"
            if key not in a
            else "removed"
            if key not in b
            else "mode"
            if a[key][0] == b[key][0]
            else "changed"
        )
    return out


def _site_keys(states: dict, site_rel: str = SITE_REL + "/") -> dict:
    return {
        k[len(site_rel) :] if k.startswith(site_rel) else k: v
        for k, v in states.items()
        if k.startswith(site_rel)
        and not k.startswith(site_rel + "sglang-0.5.23.dist-info/")
        or k.startswith("@")
    }


def test_diff_two_hosts_reports_exactly_the_files_that_differ(fleet, pristine_venv):
    fleet.pk("apply", "ddtree", "-t", "ct129")
    site = fleet.site("ct200")
    edit_file(
        site / "sglang/srt/server_args.py", (site / "sglang/srt/server_args.py").read_bytes() + b"# ct200\n"
    )
    edit_file(site / "sglang/srt/only_on_ct200.py", b"print('hi')\n")
    _chmod(site / "sglang/lang/api.py", 0o755)
    expected = _expected(_site_keys(fleet.state("ct129")), _site_keys(fleet.state("ct200")))
    assert len(expected) == 21  # ddtree's 18 files (17 and the drop-in), one edit, one added file, one mode

    doc = json.loads(fleet.pk("diff", "ct129", "ct200", "--json", check=1).stdout)
    assert {d["key"]: d["kind"] for d in doc["differences"]} == expected
    owners = {d["key"]: d["owners"] for d in doc["differences"]}
    assert owners["sglang/srt/speculative/ddtree_utils.py"] == {"ct129": "ddtree@3.1.0"}
    assert owners["sglang/srt/only_on_ct200.py"] == {}

    text = fleet.pk("diff", "ct129", "ct200", "--patch", check=1).stdout
    assert "--- ct129/sglang/srt/server_args.py\n+++ ct200/sglang/srt/server_args.py\n" in text
    assert (
        "+# ct200\n" in text and "--- ct129/sglang/srt/speculative/ddtree_utils.py\n+++ /dev/null\n" in text
    )

    # a local target hashes with blake3, the hosts with sha256: they are compared by sha256
    copy_venv(pristine_venv, fleet.env.venv)
    shutil.copy(fleet.units["ct200"], fleet.env.unit)
    doc = json.loads(fleet.pk("diff", "local", "ct200", "--json", check=1).stdout)
    assert doc["algorithm"] == "sha256"
    assert {d["key"]: d["kind"] for d in doc["differences"]} == {
        "sglang/srt/server_args.py": "changed",
        "sglang/srt/only_on_ct200.py": "added",
        "sglang/lang/api.py": "mode",
    }
    fleet.pk("rollback", "-t", "ct129", "--to", "baseline")
    assert "have the same files" in fleet.pk("diff", "ct129", "local").stdout


def test_unknown_or_changed_host_key_is_refused(fleet, tmp_path):
    known = Path(os.environ["HOME"]) / ".ssh" / "known_hosts"
    known.unlink()
    err = fleet.pk("status", "-t", "ct129", check=2).stderr
    assert "host key of [127.0.0.1]:%d is unknown" % fleet.sshd.port in err
    hint = f"ssh-keyscan -p {fleet.sshd.port} 127.0.0.1 >> ~/.ssh/known_hosts"
    assert hint in err

    other = keygen(tmp_path / "impostor")
    kind, blob = other.with_suffix(".pub").read_text().split()[:2]
    known.write_text(f"[127.0.0.1]:{fleet.sshd.port} {kind} {blob}\n")
    err = fleet.pk("diff", "ct129", "ct200", check=2).stderr
    assert "has CHANGED" in err and f"ssh-keygen -R '[127.0.0.1]:{fleet.sshd.port}'" in err
    assert not (fleet.venvs["ct129"] / ".patchkeeper").exists()

    known.unlink()  # the hint, followed, is enough to connect
    subprocess.run(hint.replace("~", os.environ["HOME"]), shell=True, check=True, capture_output=True)
    assert "no recorded state" in fleet.pk("status", "-t", "ct129").stdout


@pytest.mark.parametrize("step, outcome", [("journal-prepared", "old"), ("journal-committed", "new")])
def test_connection_killed_mid_apply_leaves_host_recoverable(fleet, step, outcome):
    fleet.pk("apply", "ddtree", "-t", "ct200")  # the reference for the new state
    before = fleet.state("ct129")
    proc = pk_background(fleet.env.root, "apply", "ddtree", "-t", "ct129", crash_at=step)
    try:
        wait_for(lambda: proc_state(proc.pid) in ("T", "gone"), "the controller to stop at " + step)
        assert proc.poll() is None, proc.stderr.read()
        state_dir = fleet.venvs["ct129"] / ".patchkeeper"
        holder = json.loads((state_dir / "lock").read_text())  # the agent on the host holds the lock
        agent = holder["pid"]
        os.kill(agent_session_pid(agent), signal.SIGKILL)  # cut the connection under the agent
        wait_for(lambda: proc_state(agent) == "gone", "the host's agent to exit")
    finally:
        proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and b"connection to target ct129 was lost" in err, err
    assert json.loads((state_dir / "journal.json").read_text())["status"] == step.split("-")[1]

    if outcome == "old":  # not committed: recover undoes it
        out = fleet.pk("recover", "-t", "ct129").stdout
        assert "undid transaction" in out
        assert fleet.state("ct129") == before
    else:  # committed: the next command (any) finishes it
        err = fleet.pk("status", "-t", "ct129").stderr
        assert "finished transaction" in err
        assert fleet.state("ct129") == fleet.state("ct200")
    assert not (state_dir / "journal.json").exists() and not (state_dir / "lock").exists()
    assert not [p for p in fleet.site("ct129").rglob(".pk-stage-*")]
    fleet.pk("rollback", "-t", "ct129", "--to", "baseline")
    assert fleet.state("ct129") == before


HOSTILE = "we ird 'q\" $(touch {marker}) `touch {marker}` é ü.py"
MARKER = "pk-pwned"  # a relative name, so it can be part of a file name


def test_hostile_file_names_are_data_everywhere(fleet, tmp_path):
    name = HOSTILE.format(marker=MARKER)
    # a patch set that adds a file with that name, in a new directory with a space
    ps = fleet.env.root / "patchsets" / "hostile"
    ps.mkdir()
    (ps / "patchset.toml").write_text('name = "hostile"\nversion = "1"\npackage = "sglang"\n')
    rel = f"sglang/odd dir $(x)/{name}"
    (ps / "0001-add.patch").write_bytes(
        f"diff --git a/{rel} b/{rel}\nnew file mode 100644\n--- /dev/null\n"
        f"+++ b/{rel}\n@@ -0,0 +1,2 @@\n+A = 1\n+B = 'é'\n".encode()
    )
    fleet.pk("apply", "hostile", "-t", "ct129")
    added = fleet.site("ct129") / rel
    assert added.read_bytes() == "A = 1\nB = 'é'\n".encode()

    by_hand = fleet.site("ct129") / "sglang" / name
    edit_file(by_hand, b"\x00\xff binary \n")
    doc = json.loads(fleet.pk("diff", "ct129", "--json", check=1).stdout)
    assert [(d["key"], d["kind"]) for d in doc["differences"]] == [(f"sglang/{name}", "added")]
    assert json.loads(fleet.pk("status", "-t", "ct129", "--json").stdout)["differences"] == {
        f"sglang/{name}": "added"
    }
    fleet.pk("snapshot", "-t", "ct129", "--name", "with odd names")
    assert "Binary files differ" in fleet.pk("diff", "ct129", "ct200", "--patch", check=1).stdout

    fleet.pk("rollback", "-t", "ct129", "--to", "baseline")
    assert not by_hand.exists() and not added.exists()
    fleet.pk("rollback", "-t", "ct129", "--to", "with odd names")
    assert by_hand.read_bytes() == b"\x00\xff binary \n" and added.is_file()
    assert not [p for p in (Path.cwd(), Path("~root").expanduser(), fleet.env.root) if (p / MARKER).exists()]


def test_ssh_target_in_process(fleet, tmp_path):
    """SshTarget itself: run() quotes every argument, errors map back, ProxyJump, one agent."""
    from patchkeeper.errors import TargetError
    from patchkeeper.host.contract import ScanRequest
    from patchkeeper.host.disk import AgentError
    from patchkeeper.targets import open_target
    from patchkeeper.workspace import load

    marker = tmp_path / "pwned"
    with (Path(os.environ["HOME"]) / ".ssh" / "config").open("a") as f:
        f.write(
            "\nHost jumped\n  HostName 127.0.0.1\n  ProxyJump ct129\n  Port %d\n  User root\n"
            "  IdentityFile %s\n" % (fleet.sshd.port, fleet.sshd.client_key)
        )
    shutil.copy(fleet.sshd.client_key, Path(os.environ["HOME"]) / ".ssh" / "id_ed25519")  # for user@host:port
    ws = load(fleet.env.root)
    config = ws.targets["ct129"]
    for via in ("ct129", f"root@127.0.0.1:{fleet.sshd.port}", "jumped"):
        target = open_target(type(config)(**{**config.__dict__, "ssh": via}))
        try:
            word = HOSTILE.format(marker=marker)
            code, out, err = target.run(["printf", "%s|", word, "", "a\nb"], input=b"ignored")
            assert (code, out, err) == (0, f"{word}||a\nb|".encode(), b"")
            assert target.run(["sh", "-c", "cat; exit 3"], input=b"\x00\xff" * 70000)[:2] == (
                3,
                b"\x00\xff" * 70000,
            )
            assert target.info.version == "0.5.23" and target.algorithm == "sha256"
            data = bytes(range(256)) * 1000
            path = str(tmp_path / f"out {via}" / word)
            target.agent.write_atomic(path, data, 0o640)
            assert target.agent.read(path) == data and target.agent.lstat(path).mode == 0o640
            with pytest.raises(FileNotFoundError):
                target.agent.read(path + ".missing")
            with pytest.raises(AgentError) as exc:
                target.agent.store_get(str(tmp_path / "store"), "sha256:" + "0" * 64)
            assert exc.value.kind == "missing-object"
            with pytest.raises(AgentError) as exc:  # the host's Python has no blake3
                target.agent.scan(ScanRequest(str(tmp_path / f"out {via}"), (word,), algorithm="blake3"))
            assert exc.value.kind == "no-algorithm"
            with pytest.raises(TargetError, match="listdir failed on the host: NotADirectoryError"):
                target.agent.listdir(path)
            assert target.agent.pid() == target.agent.pid() != os.getpid()
        finally:
            target.close()
    assert not marker.exists()


def test_verification_runs_on_the_host_and_rolls_back_over_ssh(fleet, tmp_path):
    """The restart, readiness and generation checks run on the host's side of the SSH connection;
    a degenerate service after apply is rolled back there to exact bytes."""
    import shlex

    port, pidfile, log = free_port(), tmp_path / "fake.pid", tmp_path / "fake.log"
    restart = shlex.join(
        [
            sys.executable,
            str(FAKE),
            "start",
            "--state",
            str(fleet.units["ct129"]),
            "--state",
            str(fleet.dropin("ct129")),
            "--port",
            str(port),
            "--pidfile",
            str(pidfile),
            "--log",
            str(log),
            "--default",
            "healthy",
            "--when",
            "DDTREE=degenerate",
        ]
    )
    with open(fleet.env.root / "patchkeeper.toml", "a") as f:
        f.write(
            f'\n[targets.ct129.service]\nrestart = {json.dumps(restart)}\nbase_url = "http://127.0.0.1:{port}"\n'
            f"ready_timeout = 10\nrestart_timeout = 20\nmatch_unit = false\n[targets.ct129.service.smoke]\nmax_tokens = 24\n"
            f"timeout = 5\nmin_tokens = 16\nmin_tokens_per_s = 20\n"
        )
    try:
        before = fleet.state("ct129")
        proc = fleet.pk("apply", "ddtree", "-t", "ct129", check=3)
        assert "verification FAILED (degenerate)" in proc.stdout and "FAILED and rolled back" in proc.stdout
        assert fleet.state("ct129") == before
        assert "verification passed" in fleet.pk("verify", "-t", "ct129").stdout
    finally:
        subprocess.run(
            [sys.executable, str(FAKE), "stop", "--pidfile", str(pidfile), "--port", str(port)], check=False
        )


def test_audit_record_check_and_show_over_ssh(fleet):
    """The authoring and audit verbs on hosts whose Python has no blake3 (digests are sha256 there)."""
    fleet.pk("snapshot", "-t", "ct129", "--name", "s0")
    rel = "sglang/srt/speculative/spec_utils.py"
    edited = (fleet.site("ct129") / rel).read_bytes().replace(b"import ", b"import  ", 1)
    edit_file(fleet.site("ct129") / rel, edited)
    code = fleet.pk("audit", "-t", "ct129", "--json", check=1)
    doc = json.loads(code.stdout)
    assert [f["path"] for f in doc["findings"] if f["class"] == "drift"] == [rel]
    fleet.pk("record", "fix", "-t", "ct129", "--from", "s0")
    assert (fleet.env.root / "patchsets" / "fix" / "patchset.toml").exists()
    assert "fix@" in fleet.pk("show", "fix").stdout
    fleet.pk("check", "fix", "-t", "ct200")
    fleet.pk("apply", "fix", "-t", "ct200")
    assert (fleet.site("ct200") / rel).read_bytes() == edited
    linked = fleet.site("ct200") / "sglang/version.py"  # a link in a file's place: said so, over the wire
    linked.rename(linked.with_name("version.py.real"))
    linked.symlink_to("version.py.real")
    doc = json.loads(fleet.pk("audit", "-t", "ct200", "--json", check=1).stdout)
    drift = {f["path"]: f["detail"] for f in doc["findings"] if f["class"] == "drift"}
    assert drift["sglang/version.py"].endswith(
        ": a symbolic link (to version.py.real) stands in its place, not a regular file"
    )


def test_backups_come_back_over_ssh(fleet):
    fleet.pk("apply", "nextn", "-t", "ct129")
    mine = fleet.dropin("ct129").read_bytes() + b"# my hand edit\n"
    fleet.dropin("ct129").write_bytes(mine)
    out = fleet.pk("rollback", "-t", "ct129", "--to", "baseline").stdout
    digest = next(l for l in out.splitlines() if l.startswith("  backup of @dropin: ")).split(": ", 1)[1]
    assert digest.startswith("sha256:")  # the host's own algorithm
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "patchkeeper",
            "--workspace",
            str(fleet.env.root),
            "show-backup",
            digest,
            "-t",
            "ct129",
        ],
        capture_output=True,
        check=True,
    )
    assert got.stdout == mine
    assert "ct129: files match state" in fleet.pk("diff", "-t", "ct129").stdout


@pytest.mark.parametrize("fault, max_fail, persist", [("frozen", 1, 60), ("cut", 0, 60), ("frozen", 0, 0)])
def test_a_frozen_or_cut_host_is_given_up_and_the_rollout_follows_its_rules(
    fleet, pristine_venv, fault, max_fail, persist
):
    """ct129's agent is frozen (SIGSTOP) or its SSH session killed between two calls of its transaction,
    in `apply --all --serial 1`: ct129 is given up with a one-line reason (its silence outlasting the
    target's timeout of 5 s), counted against --max-fail, its journal left for `recover`; the rollout
    goes on to the others (--max-fail 1) or stops (--max-fail 0). Through a held connection or not."""
    copy_venv(pristine_venv, fleet.env.venv)
    with (fleet.env.root / "patchkeeper.toml").open("a") as f:
        f.write(f"\n[defaults]\ntimeout = 5\npersist = {persist}\n")
    before = {host: fleet.state(host) for host in HOSTS}
    state_dir = fleet.venvs["ct129"] / ".patchkeeper"
    proc = pk_background(
        fleet.env.root,
        *("apply", "ddtree", "--all", "--serial", "1", "--max-fail", str(max_fail)),
        crash_at="journal-prepared",
    )
    agent = None
    try:
        wait_for(lambda: proc_state(proc.pid) in ("T", "gone"), "the controller to stop at journal-prepared")
        assert proc.poll() is None, proc.stderr.read()
        agent = json.loads((state_dir / "lock").read_text())[
            "pid"
        ]  # ct129 comes first; its agent holds the lock
        if fault == "frozen":
            os.kill(agent, signal.SIGSTOP)
            wait_for(lambda: proc_state(agent) == "T", "the host's agent to freeze")
        else:
            os.kill(agent_session_pid(agent), signal.SIGKILL)  # cut the connection under the agent
            wait_for(lambda: proc_state(agent) == "gone", "the host's agent to exit")

        def finished() -> bool:  # the other targets stop at the same step: let them go on
            if proc_state(proc.pid) == "T":
                proc.send_signal(signal.SIGCONT)
            return proc.poll() is not None

        proc.send_signal(signal.SIGCONT)
        wait_for(finished, "the rollout to end", limit=300)  # a safety net: a stalled rollout never ends
    finally:
        proc.send_signal(signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    out, err = (s.decode() for s in proc.communicate())
    rows = {line.split()[0].rstrip(":"): line for line in out.splitlines() if line.split()}
    assert proc.returncode != 0, out
    assert ("gave up" if fault == "frozen" else "connection to target ct129 was lost") in rows["ct129"], out
    assert rows["ct129"].startswith("ct129  FAILED: ") and "recover -t ct129" in rows["ct129"], out
    if max_fail:
        assert "changed" in rows["ct200"] and "changed" in rows["local"], out
        assert fleet.state("ct200") != before["ct200"]
    else:
        assert "not attempted" in rows["ct200"] and "not attempted" in rows["local"], out
        assert fleet.state("ct200") == before["ct200"]
    assert json.loads((state_dir / "journal.json").read_text())["status"] == "prepared"  # left for `recover`

    if fault == "frozen":  # the host comes back: its agent finds its input closed and exits
        os.kill(agent, signal.SIGCONT)
        wait_for(lambda: proc_state(agent) == "gone", "the thawed agent to exit")
    assert "undid transaction" in fleet.pk("recover", "-t", "ct129").stdout
    assert fleet.state("ct129") == before["ct129"]
    assert not (state_dir / "journal.json").exists() and not (state_dir / "lock").exists()


def test_dry_runs_and_check_write_nothing_on_the_host(fleet):
    """A pristine host (no state dir) and a recorded one: every path of its venv (state dir and bytecode
    caches included) and of its unit's directory byte-identical afterwards, and none created."""
    fleet.pk("apply", "ddtree", "-t", "ct200")

    def host(name: str) -> dict:
        return every_path(fleet.venvs[name], fleet.units[name].parent)

    for name, verbs in (
        ("ct129", [("apply", "ddtree", "--dry-run"), ("check", "ddtree")]),
        (
            "ct200",
            [
                ("apply", "nextn", "--dry-run"),
                ("check", "nextn"),
                ("rollback", "--to", "baseline", "--dry-run"),
            ],
        ),
    ):
        for verb in verbs:
            before = host(name)
            fleet.pk(*verb, "-t", name)
            after = host(name)
            assert not [p for p in before.keys() | after.keys() if before.get(p) != after.get(p)], verb
    assert not (fleet.venvs["ct129"] / ".patchkeeper").exists()


def test_log_all_merges_every_target_newest_first_with_its_origin(fleet):
    fleet.pk("apply", "ddtree", "-t", "ct200")
    fleet.pk("apply", "ddtree", "-t", "ct129")
    fleet.pk("rollback", "-t", "ct200", "--to", "baseline")
    one = fleet.pk("log", "-t", "ct129").stdout.splitlines()
    assert all(" via cli " in line for line in one) and len(one) == 2, one  # the apply and its baseline

    lines = fleet.pk("log", "--all", check=2).stdout.splitlines()  # `local` has no venv: its error line
    rows = [line.split() for line in lines if " via " in line]
    assert [(r[3], r[7]) for r in rows] == [
        ("ct200", "rollback"),
        ("ct129", "apply"),
        ("ct129", "baseline"),
        ("ct200", "apply"),
        ("ct200", "baseline"),
    ], lines
    assert all(r[5:7] == ["via", "cli"] for r in rows), lines
    assert any(line.startswith("local: error: ") for line in lines) and lines[-1].endswith(
        "0 unreachable, 1 in error"
    )

    doc = json.loads(fleet.pk("log", "-t", "ct129", "-t", "ct200", "--json").stdout)
    assert [(e["target"], e["kind"]) for e in doc["entries"]] == [(r[3], r[7]) for r in rows]
    assert all(e["origin"] == {"via": "cli"} for e in doc["entries"]) and doc["errors"] == {}
    times = [e["time"] for e in doc["entries"]]
    assert times == sorted(times, reverse=True)
    failed = json.loads(fleet.pk("status", "--all", "--json", check=2).stdout)["local"]
    assert set(failed) == {"ok", "exit_code", "error"} and failed["exit_code"] == 2, failed
    assert set(failed["error"]) == {"message", "hint"} and failed["error"]["hint"], failed
