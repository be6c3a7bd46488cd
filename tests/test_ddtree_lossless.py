"""DDTree's tree verification is lossless: scripts/ddtree_lossless.py, on the ddtree_utils.py that applying the
shipped ddtree patch set writes into a copy of the real sglang venv, decodes token for token what the target
decodes greedily; a broken mask or broken positions are caught. Runs in .cache/ddtree-venv (torch CPU and
transformers, installed by `make test`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, copy_venv, make_workspace

VENV = Path(os.environ.get("PK_DDTREE_VENV", REPO / ".cache" / "ddtree-venv"))
SCRIPT = REPO / "scripts" / "ddtree_lossless.py"
UTILS_REL = "sglang/srt/speculative/ddtree_utils.py"
# A small target (2 layers, width 64, vocabulary 256) in float64 on one CPU thread: seconds, not minutes.
SMALL = [
    "--vocab",
    "256",
    "--hidden",
    "64",
    "--layers",
    "2",
    "--heads",
    "4",
    "--init",
    "0.5",
    "--noise",
    "0.02",
    "--prompt-len",
    "8",
    "--depth",
    "6",
    "--topk",
    "4",
]


@pytest.fixture(scope="module")
def ddtree_utils(pristine_venv, tmp_path_factory) -> Path:
    """ddtree_utils.py as `patchkeeper apply ddtree` writes it into a copy of the real sglang venv."""
    if not (VENV / ".done").exists():
        if "PK_DDTREE_VENV" in os.environ:  # set by the Makefile: under `make test` the venv must be there
            pytest.fail(f"{VENV} is missing: `make test` builds it")
        pytest.skip(f"{VENV} (torch CPU + transformers) is absent: run `make test`, which builds it")
    root = tmp_path_factory.mktemp("ddtree")
    env = make_workspace(root / "ws", copy_venv(pristine_venv, root / "venv"))
    assert not (env.site / UTILS_REL).exists()
    env.pk("apply", "ddtree")
    return env.site / UTILS_REL


def decode(utils: Path, tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "ddtree.json"
    proc = subprocess.run(
        [
            str(VENV / "bin/python"),
            "-W",
            "ignore",
            str(SCRIPT),
            "--utils",
            str(utils),
            "--json",
            str(out),
            *SMALL,
            *args,
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_tree_verification_decodes_exactly_the_targets_greedy_tokens_and_catches_a_broken_one(
    ddtree_utils, tmp_path
):
    doc = decode(
        ddtree_utils, tmp_path, "--prompts", "4", "--new-tokens", "20", "--budgets", "1,4,16", "--broken", "2"
    )
    assert (
        doc["prompts"] == 4 and doc["distinct_reference_tokens"] > 30
    )  # varied text, not one token repeated
    rows = {r["budget"]: r for r in doc["rows"]}
    assert doc["lossless"] and all(r["mismatched"] == 0 for r in rows.values()), rows
    # Drafts are accepted (the tree's deeper nodes are exercised), more of them with a larger tree.
    assert (
        1.2
        < rows[1]["mean_accepted_length"]
        < rows[4]["mean_accepted_length"]
        < rows[16]["mean_accepted_length"]
    )
    assert rows[16]["mean_accepted_length"] > 2.2
    # The check is not vacuous: siblings visible to each other, or nodes placed by index instead of depth,
    # change the target's tokens on a branching tree.
    assert (
        doc["broken_mismatched"]["causal_mask"] >= 1 and doc["broken_mismatched"]["linear_positions"] >= 1
    ), doc
