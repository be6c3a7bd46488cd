"""A rollback after a repair gives the state it names (real torchcodec from its wheel): where that
state recorded the distribution as its RECORD says, the release bytes stay; `rollback --to previous`
right after the repair still undoes it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import REPO, copy_venv, edit_file, make_workspace
from made_wheels import pip_install

WHEELS = Path(os.environ.get("PK_WHEELS", REPO / ".cache" / "wheels"))
CORE = "torchcodec/libtorchcodec_core5.so"


def torchcodec_wheel() -> Path:
    found = sorted((WHEELS / "env").glob("torchcodec-0.17.0-*.whl"))
    if not found:
        pytest.fail(f"no torchcodec 0.17.0 wheel in {WHEELS / 'env'}: run `make test`, which downloads it")
    return found[0]


@pytest.fixture
def tenv(tmp_path, pristine_venv):
    venv = copy_venv(pristine_venv, tmp_path / "venv")
    pip_install(venv, torchcodec_wheel())
    return make_workspace(tmp_path / "ws", venv)


def test_rollback_to_the_baseline_after_a_repair_keeps_the_release_bytes(tenv):
    site = tenv.site
    release = (site / CORE).read_bytes()
    tenv.pk("snapshot", "--name", "healthy")  # the baseline, torchcodec as its RECORD says
    damaged = b"\x7fELF" + b"\0" * 4096  # the incident: the loader cannot map it (OSError on import)
    edit_file(site / CORE, damaged)
    out = tenv.pk("repair", "torchcodec", "--wheel", str(torchcodec_wheel())).stdout
    assert f"  M {CORE}" in out and (site / CORE).read_bytes() == release
    assert "(healthy, repaired): " in tenv.pk("status").stdout  # the same code: its name kept

    proc = tenv.pk("rollback", "--to", "baseline")
    assert (site / CORE).read_bytes() == release, proc.stdout  # not the damage the repair replaced
    assert json.loads(tenv.pk("audit", "--json").stdout)["exit"] == 0
    tenv.pk("rollback", "--to", "healthy")  # a state by its name: the same
    assert (site / CORE).read_bytes() == release


def test_rollback_to_previous_right_after_a_repair_still_undoes_it(tenv):
    site = tenv.site
    tenv.pk("snapshot", "--name", "healthy")
    damaged = b"\x7fELF" + b"\0" * 4096
    edit_file(site / CORE, damaged)
    tenv.pk("repair", "torchcodec", "--wheel", str(torchcodec_wheel()))
    tenv.pk("rollback", "--to", "previous")
    assert (site / CORE).read_bytes() == damaged


def test_rollback_to_a_change_after_a_repair_keeps_the_release_bytes(tenv):
    """A state a change recorded tells other distributions by their RECORD's identity (its files not
    read): a rollback to it after a repair keeps the release bytes too, not the damage."""
    site = tenv.site
    release = (site / CORE).read_bytes()
    tenv.pk("apply", "ddtree")
    applied = [e for e in json.loads(tenv.pk("log", "--json").stdout) if e["kind"] == "apply"][-1]["after"][
        "id"
    ]
    edit_file(site / CORE, b"\x7fELF" + b"\0" * 4096)
    tenv.pk("repair", "torchcodec", "--wheel", str(torchcodec_wheel()))
    tenv.pk("apply", "nextn")
    tenv.pk("rollback", "--to", applied)
    assert (site / CORE).read_bytes() == release
    assert "DDTREE" in tenv.running() and json.loads(tenv.pk("audit", "--json").stdout)["exit"] == 0
