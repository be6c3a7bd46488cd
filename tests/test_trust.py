"""What a target sends is not believed blindly: ids, digests and paths in its ledger and journal,
its agent's answers and what its Python prints first; its state files only when they are its
user's; and recorded text reaches the terminal with its control characters escaped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import SITE_REL, copy_venv
from sshd import sshd, write_client_config  # noqa: F401 (sshd is a fixture)


@dataclass
class Side:
    """A target with ddtree applied: the local one or the one over SSH."""

    name: str
    state_dir: Path
    site: Path
    pk: Callable[..., subprocess.CompletedProcess]
    workspace: Path


@pytest.fixture(params=["local", "ssh"])
def side(request) -> Side:
    if request.param == "ssh":
        remote = request.getfixturevalue("remote")
        remote.pk("apply", "ddtree")
        return Side("far", remote.state_dir, remote.site, remote.pk, remote.env.root)
    env = request.getfixturevalue("env")
    env.pk("apply", "ddtree")
    return Side("local", env.state_dir, env.site, env.pk, env.root)


def _newest(state_dir: Path) -> Path:
    return sorted((state_dir / "ledger").glob("*.json"))[-1]


def _rewrite(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=1))


def test_a_state_id_that_is_a_path_is_refused_and_nothing_is_written_outside(side):
    escaped = (
        side.workspace.parent / "escaped.txt"
    )  # where snapshots/<target>/manifests/<id>.txt leads with it
    _rewrite(_newest(side.state_dir), lambda d: d["after"].__setitem__("id", "../../../escaped"))
    for verb in ("recover", "status", "log"):
        proc = side.pk(verb, check=2)
        assert (
            proc.stderr.startswith("patchkeeper: error: ledger entry")
            and f"of target {side.name}" in proc.stderr
        )
        assert "after.id is '../../../escaped', not a state id" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 2  # the error and its hint
    assert not escaped.exists()


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("id", "../x", "id is '../x', not a transaction id"),
        ("seq", "1; rm", "seq is '1; rm', not a whole number"),
        ("env", "blake3:../../etc/passwd", "env is 'blake3:../../etc/passwd', not a digest"),
        ("hand_edits", ["/etc/passwd"], "hand_edits is '/etc/passwd', not a relative path"),
    ],
)
def test_ids_numbers_digests_and_keys_of_an_entry_are_checked(baselined, field, value, said):
    env = baselined
    env.pk("apply", "ddtree")
    _rewrite(_newest(env.state_dir), lambda d: d.__setitem__(field, value))
    proc = env.pk("status", check=2)
    assert "of target local is damaged" in proc.stderr and said in proc.stderr, proc.stderr


def test_a_journal_whose_op_leads_outside_the_package_is_refused(side, tmp_path):
    newest = json.loads(_newest(side.state_dir).read_text())
    outside = tmp_path / "outside.py"
    entry = dict(newest, id="20300101T000000-abcdef", seq=newest["seq"] + 1, kind="rollback")
    op = {
        "key": "sglang/version.py",
        "path": str(outside),
        "old": None,
        "new": [newest["after"]["manifest"], 1, 0o644],
    }
    (side.state_dir / "journal.json").write_text(
        json.dumps({"id": entry["id"], "status": "committed", "entry": entry, "ops": [op]})
    )
    proc = side.pk("recover", check=2)
    assert f"the journal of target {side.name}" in proc.stderr, proc.stderr
    assert "its op for 'sglang/version.py' names another path than that file's on the target" in proc.stderr
    assert not outside.exists() and not list(tmp_path.glob(".pk-stage-*"))


# ---- the agent's answers and its greeting ------------------------------------------------------
HOSTILE = """
import os, sys
real = {real!r}
args = sys.argv[1:]
if args[:2] == ["-I", "-c"] and "sys.stdin.buffer.read(" in args[2]:
    size = int(args[2].split("read(")[1].split(")")[0])
    program = sys.stdin.buffer.read(size)
    program = program.replace(b"pkg.wire.serve(pkg.agent.Agent())", b'''
import os
Agent = pkg.agent.Agent
flag = {flag!r}
def broken(method, honest):
    def answer(self, *args, **kwargs):
        wanted = open(flag).read().strip() if os.path.exists(flag) else ""
        return BAD[method] if wanted == method else honest(self, *args, **kwargs)
    return answer
BAD = {{"dist_info": {{"site": 3}}, "read_changed": {{"files": [], "identities": 7}},
       "state_dir_owner": {{"state_dir": None, "site": "/", "owner": None}},
       "audit_tree": {{"files": "many"}}, "manifest_rows": {{"../../etc/passwd": ["blake3:00", 1, 2]}}}}
for name in BAD:
    setattr(Agent, name, broken(name, getattr(Agent, name)))
pkg.wire.serve(Agent())
''')
    exec(compile(program, "agent", "exec"))
else:
    os.execv(real, [real, *args])
"""


@pytest.mark.parametrize(
    "method, verb",
    [
        ("dist_info", "status"),
        ("read_changed", "log"),
        ("state_dir_owner", "status"),
        ("audit_tree", "audit"),
        ("manifest_rows", "record mine --from baseline"),
    ],
)
def test_a_malformed_answer_is_one_line_naming_the_call_and_the_target(remote, tmp_path, method, verb):
    remote.pk("apply", "ddtree")
    flag = tmp_path / "break"
    hostile = tmp_path / "hostile.py"
    hostile.write_text(HOSTILE.format(real=str(remote.venv / "bin/python"), flag=str(flag)))
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nexec {remote.venv}/bin/python {hostile} "$@"\n')
    wrapper.chmod(0o755)
    toml = remote.env.root / "patchkeeper.toml"
    toml.write_text(toml.read_text().replace(f'python = "{remote.venv}/bin/python"', f'python = "{wrapper}"'))
    remote.pk("status")  # the wrapper's agent, answering honestly
    flag.write_text(method)
    proc = remote.pk(*verb.split(), check=2)
    assert proc.stderr.startswith(
        f"patchkeeper: error: target far: the answer to {method} from its agent is malformed: "
    ), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 2


def test_what_the_targets_python_prints_before_the_agent_is_skipped(side):
    (side.site / "sitecustomize.py").write_text("print('Welcome! This host is managed by Ansible.')\n")
    assert "files match the recorded state" in side.pk("status").stdout
    side.pk("env")  # the facts of the target's interpreter, asked of it with the same noise
    if (
        side.name == "far"
    ):  # over SSH every command's agent is started there: a flood is refused, not waited on
        side.pk("disconnect")
        (side.site / "sitecustomize.py").write_text("import sys\nsys.stdout.write('#' * 200000)\n")
        proc = side.pk("status", check=2)
        assert proc.stderr.startswith("patchkeeper: error: target far: the target's Python")
        assert "before the agent started: a sitecustomize or .pth?" in proc.stderr, proc.stderr


def test_a_local_agent_in_another_interpreter_skips_noise_and_refuses_a_flood(tmp_path, pristine_venv):
    from patchkeeper.errors import TargetError
    from patchkeeper.targets.remote_agent import AgentProxy

    venv = copy_venv(pristine_venv, tmp_path / "venv")
    custom = venv / SITE_REL / "sitecustomize.py"
    custom.write_text("print('hello from sitecustomize')\n")
    agent = AgentProxy.in_subprocess("noisy", str(venv / "bin/python"))
    try:
        assert agent.noise == b"hello from sitecustomize\n" and agent.pid() != os.getpid()
        assert agent.read(str(custom)) == custom.read_bytes()
    finally:
        agent.close()
    custom.write_text("import sys\nwhile True:\n    sys.stdout.write('x' * 4096)\n")
    with pytest.raises(
        TargetError,
        match=r"target noisy: the target's Python .* printed 'xxx.*' before the agent "
        r"started: a sitecustomize or \.pth\?",
    ):
        AgentProxy.in_subprocess("noisy", str(venv / "bin/python"))


def test_a_frame_longer_than_the_bound_is_refused_unread():
    import struct

    from patchkeeper.host import wire

    sent = struct.pack(">I", wire.MAX_HEADER + 1) + b"x" * 10
    pos = 0

    def read(n: int) -> bytes:
        nonlocal pos
        pos += n
        if pos > 4 + 10:
            raise AssertionError("read past the length prefix of a frame out of bounds")
        return sent[pos - n : pos]

    with pytest.raises(wire.FrameError, match="a frame header of"):
        wire.decode(read)


def test_an_agent_that_never_speaks_times_out(tmp_path, monkeypatch):
    from patchkeeper.errors import TargetError
    from patchkeeper.targets import remote_agent

    silent = tmp_path / "silent"  # reads nothing: the agent's program (over 64 KiB) fills the pipe to it
    silent.write_text(f"#!/bin/sh\necho $$ > {tmp_path}/pid\nexec sleep 3600\n")
    silent.chmod(0o755)
    monkeypatch.setattr(remote_agent.Patience, "hello", property(lambda self: 0.5))  # the floor is a minute
    with pytest.raises(TargetError, match=r"target mute: its agent sent nothing for 0.5 s; gave up waiting"):
        remote_agent.AgentProxy.in_subprocess("mute", str(silent))
    pid = int(
        (tmp_path / "pid").read_text()
    )  # given up on, it is killed (the writer of its program with it),
    with pytest.raises(ProcessLookupError):  # not waited for: closing its stdin under that writer hung until
        os.kill(pid, 0)  # the process ended of itself (here an hour; sleep 600 held CI for ten minutes)


# ---- state files of another user ---------------------------------------------------------------
def test_state_files_of_another_user_or_writable_by_others_are_ignored_with_a_warning(baselined):
    env = baselined
    env.pk("apply", "ddtree")
    env.pk("rollback", "--to", "baseline")
    entries = sorted((env.state_dir / "ledger").glob("*.json"))
    assert len(json.loads(env.pk("log", "--json").stdout)) == 3
    os.chown(entries[-1], 12345, 12345)
    entries[-2].chmod(0o666)
    proc = env.pk("log", "--json")
    assert [e["kind"] for e in json.loads(proc.stdout)] == ["baseline"]
    assert proc.stderr.count("patchkeeper: warning:") == 1
    assert "target local: 2 ledger entries ignored" in proc.stderr
    assert "it belongs to uid 12345" in proc.stderr and "others may write it (mode 0666)" in proc.stderr
    os.chown(entries[-1], 0, 0)
    entries[-2].chmod(0o644)
    assert len(json.loads(env.pk("log", "--json").stdout)) == 3  # once theirs again, read again

    journal = env.state_dir / "journal.json"
    journal.write_text('{"id": "forged"}')
    os.chown(journal, 12345, 12345)
    proc = env.pk("status")
    assert "target local: 1 journal ignored" in proc.stderr and "it belongs to uid 12345" in proc.stderr


# ---- recorded text on the terminal -------------------------------------------------------------
def test_log_escapes_control_characters_of_recorded_text(baselined):
    env = baselined
    env.pk("apply", "ddtree")
    _rewrite(
        _newest(env.state_dir),
        lambda d: d.update(
            command="apply ddtree\n20990101T000000-000000  2099-01-01 00:00:00  root@x  apply  forged",
            who="\x1b]0;owned\x07\x1b[31mroot@host",
        ),
    )
    out = env.pk("log").stdout
    assert "\x1b" not in out and "\x07" not in out
    assert len(out.splitlines()) == 2  # two entries, two lines: the newline in `command` forged none
    assert "\\n20990101T000000-000000" in out and "\\x1b[31mroot@host" in out


def test_the_suite_fails_a_command_that_shows_a_traceback(env):
    """conftest._no_traceback scans the stderr of every patchkeeper command the suite runs."""
    (env.root / "boom").mkdir()
    (env.root / "boom" / "click.py").write_text("raise RuntimeError('boom')\n")  # the CLI's import fails
    with pytest.raises(pytest.fail.Exception, match="a traceback reached the user"):
        subprocess.run(
            [sys.executable, "-m", "patchkeeper", "--workspace", str(env.root), "status"],
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(env.root / "boom")},
        )
    assert (
        "Traceback"
        in subprocess.run(
            [sys.executable, "-c", "import sys; sys.stderr.write('Traceback (most recent call last)')"],
            capture_output=True,
            text=True,
        ).stderr
    )
