"""Saving a patch set (import, record, port): SIGKILL at every step of a save, then list, show, apply
and recover each see the old version or the new one, never neither; the replaced version is kept."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import copy_venv, make_workspace, tree


@pytest.fixture(scope="module")
def venv(tmp_path_factory, pristine_venv):
    """One target venv for the module: nothing here changes it (apply runs as a dry run)."""
    return copy_venv(pristine_venv, tmp_path_factory.mktemp("save") / "venv")


def _new_patch(env, tmp_path):
    """ddtree's patches as one plain patch, one added line changed: the content of ddtree@3.2.0."""
    text = env.pk("export", "ddtree").stdout
    body = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
    changed = body.replace("+    DDTREE = auto()\n", "+    DDTREE = auto()  # saved by the crash test\n", 1)
    assert changed != body
    path = tmp_path / "ddtree-3.2.0.patch"
    path.write_text(changed)
    return path


def _digest(directory) -> str | None:
    from patchkeeper.patchset.patchset import digest_dir

    return digest_dir(directory) if directory.is_dir() else None


IMPORT = ("import", "ddtree")
FIRST = {  # each command that must finish an interrupted save before it does its own work
    "list": ("list", "--json"),
    "show": ("show", "ddtree", "--json"),
    "apply": ("apply", "ddtree", "--dry-run"),
    "recover": ("recover",),
}


STEPS = ["save-written", "save-journal", "save-aside", "save-in", "save-done"]


@pytest.fixture(scope="module")
def versions(tmp_path_factory, venv):
    """The plain patch of ddtree@3.2.0, and the digests of ddtree before and after a save that ends."""
    tmp = tmp_path_factory.mktemp("versions")
    template = make_workspace(tmp / "tmpl", venv)
    patch = _new_patch(template, tmp)
    old = _digest(template.root / "patchsets" / "ddtree")
    template.pk(*IMPORT, str(patch), "--version", "3.2.0")
    new = _digest(template.root / "patchsets" / "ddtree")
    assert old and new and old != new
    assert _digest(template.root / "patchsets" / ".history" / "ddtree" / "3.1.0") == old  # kept, not lost
    return patch, old, new


def test_a_save_passes_these_steps_in_this_order(tmp_path, venv, versions):
    trace = tmp_path / "trace"
    make_workspace(tmp_path / "ws", venv).pk(
        *IMPORT,
        str(versions[0]),
        "--version",
        "3.2.0",
        env={"PATCHKEEPER_CRASH_AT": "no such step", "PATCHKEEPER_CRASH_TRACE": str(trace)},
    )
    assert [line.split(" ", 1)[1] for line in trace.read_text().splitlines()] == STEPS


@pytest.mark.parametrize("step", STEPS)
def test_kill_at_a_step_of_a_save_leaves_the_old_or_the_new_version(step, tmp_path, venv, versions):
    patch, old, new = versions
    crashed = make_workspace(tmp_path / "crashed", venv)
    proc = crashed.pk(
        *IMPORT, str(patch), "--version", "3.2.0", check=None, env={"PATCHKEEPER_CRASH_AT": step}
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    hidden = [p.name for p in (crashed.root / "patchsets").iterdir() if ".pk-" in p.name]
    assert bool(hidden) == (step != "save-done"), hidden  # before: no patchsets/ddtree, or the old one
    committed = step != "save-written"  # past the journal the save is finished, before it undone
    version = "3.2.0" if committed else "3.1.0"
    for first, args in FIRST.items():  # each command, run first on a copy of the crashed workspace
        ws = tmp_path / first
        shutil.copytree(crashed.root, ws, symlinks=True)
        run = _pk(ws, *args)
        assert run.returncode == 0, f"{first}: exit {run.returncode}\n{run.stderr}"
        patchsets = ws / "patchsets"
        assert _digest(patchsets / "ddtree") == (new if committed else old), first
        assert _digest(patchsets / ".history" / "ddtree" / "3.1.0") == (old if committed else None), first
        assert not [p.name for p in patchsets.iterdir() if ".pk-" in p.name], first
        if first == "list":
            sets = {s["name"]: s for s in json.loads(run.stdout)}
            assert (sets["ddtree"]["version"], sets["ddtree"]["kept"]) == (
                version,
                ["3.1.0"] if committed else [],
            )
            before = tree(ws)  # and a second command finds nothing left to do
            again = _pk(ws, "recover")
            assert "patchsets:" not in again.stdout and tree(ws) == before
        if first == "show":
            assert json.loads(run.stdout)["version"] == version
        if first == "recover" and step != "save-done":
            said = "finished the save of patchsets/ddtree" if committed else "removed .ddtree.pk-new-"
            assert f"patchsets: {said}" in run.stdout, run.stdout


def test_a_set_left_between_two_renames_by_a_save_without_journal_is_put_back(tmp_path, venv):
    """What a kill between the two renames left before saves kept a journal: .NAME.pk-old-* and no NAME."""
    env = make_workspace(tmp_path / "ws", venv)
    patchsets = env.root / "patchsets"
    old = _digest(patchsets / "ddtree")
    (patchsets / "ddtree").rename(patchsets / ".ddtree.pk-old-1a2b3c4d")
    run = env.pk("apply", "ddtree", "--dry-run")
    assert "put patchsets/ddtree back from .ddtree.pk-old-1a2b3c4d" in run.stderr
    assert _digest(patchsets / "ddtree") == old and not (patchsets / ".ddtree.pk-old-1a2b3c4d").exists()


def _pk(root, *args):
    return subprocess.run(
        [sys.executable, "-m", "patchkeeper", "--workspace", str(root), *args],
        capture_output=True,
        text=True,
        env={**os.environ},
    )
