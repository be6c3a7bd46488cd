"""A recorded state, exit code or message never claims what the files do not show (issue 13, 1-8)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import copy_venv, edit_file, make_workspace, tree

from patchkeeper.host.disk import hash_bytes
from patchkeeper.host.store import Store

SPEC = "sglang/srt/speculative/spec_info.py"
ADDED = "sglang/srt/speculative/ddtree_utils.py"


def _patchset(env, name: str, toml: str, files: dict[str, str]) -> None:
    d = env.root / "patchsets" / name
    d.mkdir()
    (d / "patchset.toml").write_text(f'name = "{name}"\nversion = "1.0.0"\npackage = "sglang"\n{toml}')
    for rel, text in files.items():
        (d / rel).write_text(text)


def _add_patch(rel: str, text: str) -> str:
    lines = text.splitlines(keepends=True)
    return (
        f"diff --git a/{rel} b/{rel}\nnew file mode 100644\n--- /dev/null\n+++ b/{rel}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n" + "".join("+" + line for line in lines)
    )


def _state(env) -> dict:
    return json.loads(env.pk("status", "--json").stdout)


# ---- 1: apply --force over a hand edit that already equals the result ----------------------
def test_forced_apply_records_what_the_files_show_where_a_hand_edit_equals_the_result(baselined):
    env = baselined
    unit = "[Service]\nExecStart=/bin/true # myfix\n"
    _patchset(env, "myfix", 'requires = ["ddtree"]\n[files]\nunit = "unit.service"\n', {"unit.service": unit})
    env.pk("apply", "ddtree")
    edit_file(env.unit, unit.encode())  # the same edit, by hand
    assert env.pk("apply", "myfix", check=2).stderr.count("@unit") == 1
    out = env.pk("apply", "myfix", "--force").stdout
    assert "0 file(s) changed" in out
    status = _state(env)
    assert [p["name"] for p in status["state"]["stack"]] == ["ddtree", "myfix"]
    assert status["differences"] == {}  # the recorded manifest holds the unit as it is
    myfix_state = status["state"]["id"]
    env.pk("rollback", "--to", "baseline")
    assert "# myfix" not in env.unit.read_text()
    env.pk("rollback", "--to", myfix_state)  # the state gives myfix's unit back
    assert env.unit.read_text() == unit
    assert _state(env)["differences"] == {}


# ---- 2: reserved state names -------------------------------------------------------------------
def test_snapshot_names_that_rollback_gives_a_meaning_of_their_own_are_refused(baselined):
    env = baselined
    env.pk("apply", "nextn")
    for name in ("baseline", "previous"):
        proc = env.pk("snapshot", "--name", name, check=2)
        assert f"{name!r} cannot name a state" in proc.stderr and "hint:" in proc.stderr
    assert [e["kind"] for e in json.loads(env.pk("log", "--json").stdout)] == ["apply", "baseline"]
    env.pk("rollback", "--to", "baseline")
    assert "NEXTN" not in env.running()


# ---- 5: paths a patch set writes outside what patchkeeper manages ------------------------------
PIP_PATCH = (
    "diff --git a/pip/__init__.py b/pip/__init__.py\n--- a/pip/__init__.py\n+++ b/pip/__init__.py\n"
    '@@ -1,3 +1,3 @@\n from typing import List, Optional\n \n-__version__ = "23.2.1"\n+__version__ = "23.2.1+pk"\n'
)


def test_paths_outside_the_managed_package_are_refused_by_name_even_forced(baselined):
    env = baselined
    env.pk("apply", "nextn")  # the baseline exists: the refusals below must not add to the ledger
    before, log = env.snapshot(), env.pk("log", "--json").stdout
    cases = {
        "pth": ("zz_pk_adv.pth", "not a file of package sglang"),
        "pyc": ("sglang/x.pyc", "bytecode"),
        "pycache": ("sglang/__pycache__/x.py", "bytecode"),
        "stage": ("sglang/.pk-stage-x.py", "a stage file name"),
        "pip": ("pip/__init__.py", "not a file of package sglang"),
    }
    for name, (rel, why) in cases.items():
        patch = PIP_PATCH if name == "pip" else _add_patch(rel, "import os; os.system('true')\n")
        _patchset(env, f"adv-{name}", "", {"0001.patch": patch})
        for force in ((), ("--force",)):
            proc = env.pk("apply", f"adv-{name}", *force, check=2)
            assert f"{rel} ({why}" in proc.stderr and "hint:" in proc.stderr, proc.stderr
    assert env.snapshot() == before and env.pk("log", "--json").stdout == log


# ---- 3 and 4: whatever would make a rename fail is refused before the commit point -------------
@contextlib.contextmanager
def _immutable(path: Path):
    """chattr +i on a file of our own inode (never on one hardlinked to the pristine venv)."""
    edit_file(path, path.read_bytes())
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("this file system (or user) cannot set the immutable flag")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def _files(env) -> tuple:
    """The venv's files, and the unit's and the drop-in's paths as they are (whatever their type)."""
    out: list = [tree(env.venv)]
    for path in (env.unit, env.dropin):
        st = path.lstat() if os.path.lexists(path) else None
        out += (
            [None]
            if st is None
            else [st.st_mode, st.st_ino, path.read_bytes() if stat.S_ISREG(st.st_mode) else None]
        )
    return tuple(out)


def _refused_unchanged(env, *args: str) -> str:
    before, log = _files(env), sorted(os.listdir(env.state_dir / "ledger"))
    proc = env.pk(
        *args, check=2
    )  # refused by the planner (a path that is no regular file) or the transaction
    assert "hint:" in proc.stderr
    assert _files(env) == before and sorted(os.listdir(env.state_dir / "ledger")) == log
    assert not list(env.site.rglob(".pk-stage-*")) and not (env.state_dir / "journal.json").exists()
    return proc.stderr


def test_obstacles_at_destinations_are_refused_by_name_before_anything_changes(baselined):
    env = baselined
    env.pk("snapshot", "--name", "start")
    (env.site / ADDED).mkdir()  # an empty directory where ddtree adds a file
    err = _refused_unchanged(env, "apply", "ddtree")
    assert f"{env.site / ADDED} is a directory" in err or f"{ADDED} (a directory)" in err
    (env.site / ADDED).rmdir()

    with _immutable(env.site / SPEC):
        err = _refused_unchanged(env, "apply", "ddtree")
        assert f"{env.site / SPEC} is immutable" in err and "nothing was changed" in err
    pyc = next((env.site / SPEC).parent.glob("__pycache__/spec_info.*.pyc"))
    with _immutable(pyc):
        err = _refused_unchanged(env, "apply", "ddtree")
        assert f"{pyc} is immutable" in err and f"bytecode of {env.site / SPEC}" in err

    env.dropin.mkdir(
        parents=True
    )  # the role path is a directory (a hand change: --force goes past the pre-image check)
    err = _refused_unchanged(env, "apply", "ddtree", "--force")
    assert f"{env.dropin} is a directory" in err or "@dropin (a directory)" in err
    env.dropin.rmdir()
    env.pk("apply", "ddtree")  # with the obstacles gone it goes through


def test_non_regular_files_at_managed_paths_are_refused_not_replaced(baselined, tmp_path):
    env = baselined
    real = tmp_path / "real.conf"
    real.write_bytes(b"[Service]\n")
    env.dropin.parent.mkdir()
    env.dropin.symlink_to(real)  # the drop-in is a symlink when the baseline is recorded
    env.pk("snapshot", "--name", "start")
    err = _refused_unchanged(env, "apply", "nextn")
    assert f"{env.dropin} is a symbolic link (to {real})" in err or "@dropin (a symlink)" in err
    env.dropin.unlink()
    os.mknod(env.dropin, stat.S_IFCHR | 0o644, os.makedev(1, 3))  # a device node, as /dev/null is
    err = _refused_unchanged(env, "apply", "nextn")
    assert f"{env.dropin} is a character device" in err or "@dropin (not a regular file)" in err
    assert stat.S_ISCHR(env.dropin.lstat().st_mode)
    env.dropin.unlink()
    env.dropin.symlink_to(real)
    (env.site / ADDED).symlink_to(real)  # a symlink where ddtree adds a file
    err = _refused_unchanged(env, "apply", "ddtree")
    assert f"{env.site / ADDED} is a symbolic link" in err or f"{ADDED} (a symlink)" in err
    assert (env.site / ADDED).is_symlink()


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def test_an_obstacle_after_the_commit_point_is_named_and_recover_finishes_once_it_is_gone(baselined):
    env = baselined
    env.pk("snapshot", "--name", "start")
    done = copy_venv(env.venv, env.root.parent / "done-venv")
    done_env = make_workspace(env.root.parent / "done-ws", done)
    done_env.pk("apply", "ddtree")
    # stop the apply right after its commit point, put a directory in the way, let it go on
    proc = subprocess.Popen(
        [sys.executable, "-m", "patchkeeper", "--workspace", str(env.root), "apply", "ddtree"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PATCHKEEPER_CRASH_AT": "journal-committed", "PATCHKEEPER_CRASH_SIGNAL": "STOP"},
    )
    while not _stopped(proc.pid):
        time.sleep(0.05)
    (env.site / ADDED).mkdir()
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate()
    assert proc.returncode == 4, err
    assert "nothing was changed" not in err and "passed its commit point" in err
    assert f"{env.site / ADDED} is a directory" in err and ".pk-stage-" not in err
    assert "patchkeeper recover" in err

    rec = env.pk("recover", check=4)  # names the obstacle, not the stage file, and what to do
    assert f"{env.site / ADDED} is a directory" in rec.stderr and ".pk-stage-" not in rec.stderr
    status = env.pk("status")  # a reading command still reads, and says the target is between states
    assert "UNFINISHED" in status.stdout and str(env.site / ADDED) in status.stdout
    assert env.pk("apply", "nextn", check=4).stderr.count("passed its commit point") == 1

    (env.site / ADDED).rmdir()
    assert "finished transaction" in env.pk("recover").stdout
    assert "files match the recorded state" in env.pk("status").stdout
    assert tree(env.site) == tree(done_env.site)


# ---- 6: recover over a hand edit ---------------------------------------------------------------
def test_recover_backs_up_and_names_a_hand_edit_made_after_the_crash(env):
    proc = env.pk("apply", "ddtree", check=None, env={"PATCHKEEPER_CRASH_AT": "journal-committed"})
    assert proc.returncode == -signal.SIGKILL
    edited = (env.site / SPEC).read_bytes() + b"\n# edited by hand while the transaction was interrupted\n"
    edit_file(env.site / SPEC, edited)
    out = env.pk("recover").stdout
    assert "finished transaction" in out and f"{SPEC} ({hash_bytes(edited)})" in out
    assert Store(str(env.state_dir / "store")).get(hash_bytes(edited)) == edited  # the bytes are kept
    entry = json.loads(env.pk("log", "--json").stdout)[0]
    assert SPEC in entry["hand_edits"] and entry["extra"]["backed_up_at_recovery"] == {
        SPEC: hash_bytes(edited)
    }
    assert b"DDTREE" in (env.site / SPEC).read_bytes()
    assert "files match the recorded state" in env.pk("status").stdout


# ---- 7 and 8: where the state dir is -------------------------------------------------------------
def _with_state_dir(env, root: Path, state_dir: Path):
    other = make_workspace(root, env.venv)
    toml = other.root / "patchkeeper.toml"
    toml.write_text(
        toml.read_text().replace('package = "sglang"\n', f'package = "sglang"\nstate_dir = "{state_dir}"\n')
    )
    return other


def test_a_second_state_dir_for_one_venv_is_refused_by_name(baselined, tmp_path):
    env = baselined
    env.pk("apply", "nextn")
    other = _with_state_dir(env, tmp_path / "ws2", tmp_path / "state2")
    before = _files(env)
    for args in (("status",), ("apply", "ddtree")):
        err = other.pk(*args, check=2).stderr
        assert f"managed from the state dir {env.state_dir}" in err and "state_dir =" in err, err
    assert _files(env) == before and not (tmp_path / "state2").exists()
    # a venv managed before the marker existed: its default state dir's ledger says who manages it
    (env.state_dir / "state_dir").unlink()
    assert f"state dir {env.state_dir}" in other.pk("apply", "ddtree", check=2).stderr
    assert "files match the recorded state" in env.pk("status").stdout


def test_a_state_dir_inside_site_packages_is_a_configuration_error(env, tmp_path):
    for i, inside in enumerate((env.site / "sglang" / ".pk-state", env.site / "sglang", env.site)):
        other = _with_state_dir(env, tmp_path / f"ws{i}", inside)
        for args in (("status",), ("apply", "nextn")):
            err = other.pk(*args, check=2).stderr
            assert f"state_dir {inside} is inside site-packages" in err and "hint:" in err
    assert not (env.site / "sglang" / ".pk-state").exists() and not (env.site / "ledger").exists()


def test_the_new_agent_methods_answer_over_the_wire(tmp_path):
    """obstacles and state_dir_owner as a host answers them: the agent program on pipes (as over SSH)."""
    from patchkeeper.targets.remote_agent import AgentProxy

    (tmp_path / "dir.py").mkdir()
    (tmp_path / "venv").mkdir()
    agent = AgentProxy.in_subprocess("wire", sys.executable)
    try:
        found = agent.obstacles([str(tmp_path / "dir.py"), str(tmp_path / "new.py")], [])
        assert list(found) == [str(tmp_path / "dir.py")] and found[str(tmp_path / "dir.py")].startswith(
            "is a directory"
        )
        prefix = str(tmp_path / "venv")
        state = os.path.join(prefix, ".patchkeeper")
        assert agent.state_dir_owner(prefix, state, str(tmp_path), False).owner is None
        assert agent.state_dir_owner(prefix, state, str(tmp_path), True).owner == state
        assert (Path(state) / "state_dir").read_text() == ".\n"  # relative: a copied venv keeps its own
        assert agent.state_dir_owner(prefix, str(tmp_path / "other"), str(tmp_path), True).owner == state
    finally:
        agent.close()
