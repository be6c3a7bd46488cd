"""With --json, every exit writes exactly one JSON document to stdout: each verb that takes --json on
success, on bad input (a usage error, an unknown target or patch set) and on failure; an error is
{"error", "hint", "exit"}; a change on several targets is one document with a result per target."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import REPO, copy_venv, edit_file, make_workspace

PORT_WHEELS = Path(os.environ.get("PK_WHEELS", REPO / ".cache" / "wheels")) / "port"
SPEC = "sglang/srt/speculative/spec_info.py"


def one_document(proc, code: int | None = None):
    """stdout parsed as one JSON document (json.loads refuses anything after it), and the exit code
    the document gives when it is an error."""
    assert code is None or proc.returncode == code, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    try:
        doc = json.loads(proc.stdout)
    except ValueError as exc:
        raise AssertionError(
            f"stdout is not one JSON document ({exc}):\n{proc.stdout!r}\nstderr: {proc.stderr}"
        ) from None
    if isinstance(doc, dict) and "error" in doc and "exit" in doc:
        assert doc["exit"] == proc.returncode and doc["error"] and "hint" in doc
    return doc


VERBS = {  # each verb that takes --json: a run that succeeds (exit 0, or 1 for port's conflicts)
    "list": ["list"],
    "status": ["status"],
    "log": ["log"],
    "audit": ["audit"],
    "check": ["check", "ddtree"],
    "show": ["show", "ddtree"],
    "diff": ["diff"],
    "env": ["env"],
    "repair": ["repair", "pip", "--no-verify"],
    "apply": ["apply", "ddtree", "--dry-run"],
    "rollback": ["rollback", "--to", "baseline", "--dry-run"],
    "port": ["port", "ddtree", "--to", "0.5.22", "--dry-run", "--wheel", "{old}", "--wheel", "{new}"],
    "verify": None,  # success needs a served model: tests/test_verify.py
}


def wheels() -> dict[str, str]:
    return {
        "old": str(sorted(PORT_WHEELS.glob("sglang-0.5.23-*.whl"))[-1]),
        "new": str(sorted(PORT_WHEELS.glob("sglang-0.5.22-*.whl"))[-1]),
    }


def test_every_json_verb_is_covered():
    from patchkeeper.cli import commands

    takes = {name for name, cmd in commands().items() if any("--json" in p.opts for p in cmd.params)}
    assert takes == set(VERBS)


@pytest.mark.parametrize("verb", sorted(v for v, args in VERBS.items() if args))
def test_success_is_one_document(env, verb):
    env.pk("snapshot", "--name", "first")  # a baseline: rollback, log and diff have a state
    args = [a.format(**wheels()) for a in VERBS[verb]]
    proc = env.pk(*args, "--json", check=None)
    assert proc.returncode in ((0, 1) if verb == "port" else (0,)), proc.stderr
    assert "error" not in one_document(proc) or one_document(proc)["error"] is None


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_an_unknown_target_is_one_error_document(env, verb):
    args = [a.format(**wheels()) for a in VERBS[verb] or ["verify"]]
    if verb == "port":  # without wheels: the target's interpreter is asked for its tags
        args = ["port", "ddtree", "--to", "0.5.22"]
    if verb in ("list", "show"):  # no -t: an unknown patch set instead
        args = [verb, "nosuch"] if verb == "show" else ["show", "nosuch"]
    elif verb == "check":
        args = ["check", "nosuch"]
    proc = (
        env.pk(*args, "-t", "nosuch", "--json", check=2)
        if verb not in ("list", "show", "check")
        else env.pk(*args, "--json", check=2)
    )
    doc = one_document(proc)
    assert "nosuch" in json.dumps(doc)


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_a_usage_error_is_one_error_document(env, verb):
    proc = env.pk(verb, "--no-such-option", "--json", check=2)
    doc = one_document(proc)
    assert (
        doc["error"] == "No such option '--no-such-option'." and doc["exit"] == 2 and "--help" in doc["hint"]
    )
    assert "Usage:" in proc.stderr  # click's own lines still on stderr


@pytest.mark.parametrize(
    "args, code",
    [
        (["status"], 0),
        (["diff"], 1),
        (["audit"], 1),  # a hand edit after the baseline (status names it, exit 0)
        (["apply", "ddtree"], 2),  # the hand edit refuses the apply
        (["port", "ddtree", "--to", "9.9.9", "--wheel", "/nonexistent.whl"], 2),
        (["port", "ddtree", "--to", "not-a-version"], 2),
        (["port", "ddtree"], 2),
        (["rollback", "--to", "nosuch"], 2),
        (["repair", "nosuchdist"], 2),
        (["verify"], 2),
    ],
)
def test_a_failure_is_one_document(env, args, code):
    env.pk("snapshot", "--name", "first")
    edit_file(env.site / SPEC, (env.site / SPEC).read_bytes() + b"# by hand\n")
    one_document(env.pk(*args, "--json", check=code))


def test_a_change_on_several_targets_is_one_document_with_a_result_per_target(tmp_path, pristine_venv):
    other = copy_venv(pristine_venv, tmp_path / "other")
    shutil.copy(REPO / "demo" / "sglang-qwen.service", tmp_path / "other.service")
    env = make_workspace(
        tmp_path / "ws",
        copy_venv(pristine_venv, tmp_path / "venv"),
        f'\n[targets.other]\npython = "{other}/bin/python"\npackage = "sglang"\n\n'
        f'[targets.other.vars]\ndraft_model_path = "/m"\n\n'
        f'[targets.other.files]\nunit = "{tmp_path}/other.service"\n',
    )
    doc = one_document(env.pk("apply", "ddtree", "-t", "local", "-t", "other", "--no-verify", "--json"), 0)
    assert doc["schema"] == "patchkeeper/rollout" and set(doc["targets"]) == {"local", "other"}
    assert all(t["exit_code"] == 0 and t["changed"] and t["after"] for t in doc["targets"].values())
    assert doc["counts"] == {"ok": 2, "failed": 0, "not_attempted": 0}

    edit_file(other / env.site.relative_to(env.venv) / SPEC, b"# mine\n")
    proc = env.pk("apply", "nextn", "--all", "--no-verify", "--json", check=2)  # other's hand edit: refused
    doc = one_document(proc)
    assert doc["targets"]["local"]["exit_code"] == 0 and doc["targets"]["other"]["exit_code"] == 2
    assert doc["exit_code"] == 2 and "refused" in doc["targets"]["other"]["result"]
    assert "local  " in proc.stderr  # the lines went to stderr
