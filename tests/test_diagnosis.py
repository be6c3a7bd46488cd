"""A failed `verify` says what changed since the code state last passed (its files, the environment) and
the command to run next; `diff --env --since-pass` compares with that pass; `repair` restarts and
verifies the service; `--json` documents of rollback --dry-run, repair and verify, and of an error."""

from __future__ import annotations

import json

import pytest
from conftest import copy_venv, edit_file, make_workspace
from helpers import NO_INDEX, ledger, wheel

VERSION = "sglang/version.py"


@pytest.fixture
def env(tmp_path, repair_pristine):  # noqa: F811
    """The suite's workspace over a venv with six (from its real wheel) beside sglang."""
    return make_workspace(tmp_path / "ws", copy_venv(repair_pristine, tmp_path / "venv"))


def test_a_failed_verify_says_what_changed_since_the_last_pass_and_what_to_run(env, deployment):
    deployment.configure()
    env.pk("apply", "nextn")
    state = ledger(env)[-1]["after"]["id"]
    deployment.rule(
        NEXTN="broken"
    )  # the service breaks; on the host, six and one file of sglang were touched
    six = env.site / "six.py"
    edit_file(six, six.read_bytes() + b"# patched on the host\n")
    edit_file(env.site / VERSION, (env.site / VERSION).read_bytes() + b"# by hand\n")

    proc = env.pk("verify", "--restart", check=1)
    out = proc.stdout
    assert "verification FAILED (degenerate)" in out
    assert f"local: since state {state} last passed verification (" in out
    assert f"  code         1 file(s) differ from state {state}: {VERSION} (changed)" in out
    assert "  distribution files      six  1 file(s) differ from RECORD (was 0): six.py" in out
    assert "  next: patchkeeper diff -t local   # the files that differ from state" in out
    assert f"        patchkeeper rollback --to {state} -t local   # gives them the state's bytes back" in out
    assert "        patchkeeper repair six -t local   # its files differ from its RECORD" in out

    since = env.pk("diff", "--env", "-t", "local", "--since-pass", check=1).stdout
    assert f"against local:{state} as of its last passing verification " in since and "six" in since
    doc = json.loads(env.pk("verify", "--json", check=1).stdout)
    assert doc["diagnosis"]["code"] == {VERSION: "changed"} and doc["diagnosis"]["last_pass"] is not None
    assert any(n.startswith("patchkeeper repair six") for n in doc["diagnosis"]["next"])

    # the next commands, as said: the files back, six repaired, and the service verified after each
    deployment.rule()
    env.pk("rollback", "--to", state)
    repaired = env.pk("repair", "six", "--wheel", str(wheel("six-1.17.0-*.whl")), env=NO_INDEX)
    assert "local: restarting and verifying the service (--no-verify skips this)" in repaired.stdout
    assert "verification passed" in repaired.stdout
    assert [(e["kind"], e["extra"].get("phase")) for e in ledger(env)][-2:] == [
        ("repair", None),
        ("verify", "repair"),
    ]
    edit_file(six, six.read_bytes() + b"# again\n")
    quiet = env.pk("repair", "six", "--wheel", str(wheel("six-1.17.0-*.whl")), "--no-verify", env=NO_INDEX)
    assert "restarting" not in quiet.stdout and ledger(env)[-1]["kind"] == "repair"


def test_json_documents_of_a_dry_rollback_a_repair_a_verify_and_an_error(env, deployment):
    deployment.configure()
    env.pk("apply", "ddtree")
    dry = json.loads(env.pk("rollback", "--to", "baseline", "--dry-run", "--json").stdout)
    assert (
        dry["schema_version"] == 1 and dry["dry_run"] and dry["exit_code"] == 0 and dry["verifications"] == []
    )
    (change,) = dry["changes"]
    assert change["transaction"] is None and change["kind"] == "rollback"
    files = {f["key"]: f for f in change["files"]}
    assert files["@dropin"]["change"] == "removed" and files["@dropin"]["new"] is None
    assert files["sglang/srt/speculative/ddtree_utils.py"]["change"] == "removed"
    assert (
        files["sglang/srt/speculative/spec_info.py"]["old"]["digest"]
        != files["sglang/srt/speculative/spec_info.py"]["new"]["digest"]
    )
    assert change["exec_start"]["source"] == str(env.unit)  # without the drop-in, the host's own ExecStart
    assert dry["after"]["id"] == ledger(env)[0]["after"]["id"] and ledger(env)[-1]["kind"] == "verify"

    six = env.site / "six.py"
    edit_file(six, six.read_bytes() + b"# patched on the host\n")
    doc = json.loads(
        env.pk("repair", "six", "--wheel", str(wheel("six-1.17.0-*.whl")), "--json", env=NO_INDEX).stdout
    )
    assert doc["command"].startswith("repair six") and doc["exit_code"] == 0
    assert [f["path"] for f in doc["changes"][0]["files"]] == [str(six)]
    assert [(v["phase"], v["ok"]) for v in doc["verifications"]] == [("repair", True)]

    verified = json.loads(env.pk("verify", "--json").stdout)
    assert verified["schema"] == "patchkeeper/change" and verified["ok"] and verified["diagnosis"] is None
    assert [c["name"] for c in verified["verifications"][0]["checks"]] == [
        "ready",
        "server",
        "generate",
        "algorithm",
        "accept",
        "output",
        "history",
    ]

    proc = env.pk("apply", "no-such-set", "--json", check=2)
    error = json.loads(proc.stdout)
    assert error["exit_code"] == 2 and "unknown patch set 'no-such-set'" in error["error"]["message"]
    assert "patchkeeper: error: unknown patch set" in proc.stderr  # and still its line on stderr
