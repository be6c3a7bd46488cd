"""A recorded state, exit code or message never claims what the files do not show (issue 13, 1-8)."""

from __future__ import annotations

import json

from conftest import edit_file

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
    return (f"diff --git a/{rel} b/{rel}\nnew file mode 100644\n--- /dev/null\n+++ b/{rel}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n" + "".join("+" + line for line in lines))


def _state(env) -> dict:
    return json.loads(env.pk("status", "--json").stdout)


# ---- 1: apply --force over a hand edit that already equals the result ----------------------
def test_forced_apply_records_what_the_files_show_where_a_hand_edit_equals_the_result(env):
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
def test_snapshot_names_that_rollback_gives_a_meaning_of_their_own_are_refused(env):
    env.pk("apply", "nextn")
    for name in ("baseline", "previous"):
        proc = env.pk("snapshot", "--name", name, check=2)
        assert f"{name!r} cannot name a state" in proc.stderr and "hint:" in proc.stderr
    assert [e["kind"] for e in json.loads(env.pk("log", "--json").stdout)] == ["apply", "baseline"]
    env.pk("rollback", "--to", "baseline")
    assert "NEXTN" not in env.unit.read_text()


# ---- 5: paths a patch set writes outside what patchkeeper manages ------------------------------
PIP_PATCH = ('diff --git a/pip/__init__.py b/pip/__init__.py\n--- a/pip/__init__.py\n+++ b/pip/__init__.py\n'
             '@@ -1,3 +1,3 @@\n from typing import List, Optional\n \n-__version__ = "23.2.1"\n+__version__ = "23.2.1+pk"\n')


def test_paths_outside_the_managed_package_are_refused_by_name_even_forced(env):
    env.pk("apply", "nextn")  # the baseline exists: the refusals below must not add to the ledger
    before, log = env.snapshot(), env.pk("log", "--json").stdout
    cases = {"pth": ("zz_pk_adv.pth", "not a file of package sglang"),
             "pyc": ("sglang/x.pyc", "bytecode"),
             "pycache": ("sglang/__pycache__/x.py", "bytecode"),
             "stage": ("sglang/.pk-stage-x.py", "a stage file name"),
             "pip": ("pip/__init__.py", "not a file of package sglang")}
    for name, (rel, why) in cases.items():
        patch = PIP_PATCH if name == "pip" else _add_patch(rel, "import os; os.system('true')\n")
        _patchset(env, f"adv-{name}", "", {"0001.patch": patch})
        for force in ((), ("--force",)):
            proc = env.pk("apply", f"adv-{name}", *force, check=2)
            assert f"{rel} ({why}" in proc.stderr and "hint:" in proc.stderr, proc.stderr
    assert env.snapshot() == before and env.pk("log", "--json").stdout == log
