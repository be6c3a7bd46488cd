"""With --json, every exit writes exactly one JSON document to stdout: each verb that takes --json on
success, on bad input (a usage error, an unknown target or patch set) and on failure; an error is
{"ok": false, "exit_code", "error": {"message", "hint"}}; the whole CLI is walked (click's list of
verbs); a change on several targets is one document with a result per target."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import click
import pytest
from conftest import REPO, copy_venv, edit_file, make_workspace

from patchkeeper.cli import main

PORT_WHEELS = Path(os.environ.get("PK_WHEELS", REPO / ".cache" / "wheels")) / "port"
SPEC = "sglang/srt/speculative/spec_info.py"


def one_document(proc, code: int | None = None):
    """stdout parsed as one JSON document (json.loads refuses anything after it); an error document
    has the one shape of docs/json.md, "An error", and the exit code the command ended with."""
    assert code is None or proc.returncode == code, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    try:
        doc = json.loads(proc.stdout)
    except ValueError as exc:
        raise AssertionError(
            f"stdout is not one JSON document ({exc}):\n{proc.stdout!r}\nstderr: {proc.stderr}"
        ) from None
    if isinstance(doc, dict) and doc.get("error") is not None:
        assert doc["exit_code"] == proc.returncode != 0 and doc["ok"] is False, doc
        assert set(doc["error"]) == {"message", "hint"} and doc["error"]["message"], doc
    return doc


def verbs() -> dict[str, click.Command]:
    """Every verb of the CLI, as click lists them (a verb added later is walked too)."""
    ctx = click.Context(main)
    return {name: main.get_command(ctx, name) for name in main.list_commands(ctx)}


def record_edit(env, tmp_path) -> None:
    edit_file(env.site / SPEC, (env.site / SPEC).read_bytes() + b"# by hand\n")


def a_backup(env, tmp_path) -> None:
    env.pk("apply", "ddtree", "--no-verify")
    record_edit(env, tmp_path)
    env.pk("rollback", "--to", "first", "--no-verify")
    (tmp_path / "digest").write_text(json.loads(env.pk("log", "--json").stdout)[0]["extra"]["backups"][SPEC])


def a_patch(env, tmp_path) -> None:
    (tmp_path / "new.patch").write_text(
        "diff --git a/sglang/mine.py b/sglang/mine.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/sglang/mine.py\n@@ -0,0 +1 @@\n+MINE = 1\n"
    )


# Each verb: a run that succeeds (exit 0, or 1 for port's conflicts), after a snapshot named "first"
# and what the setup leaves; {old}/{new} are the port's wheels, {tmp} the test's tmp dir.
VERBS = {
    "list": (["list"], None),
    "status": (["status"], None),
    "log": (["log"], None),
    "audit": (["audit"], None),
    "check": (["check", "ddtree"], None),
    "show": (["show", "ddtree"], None),
    "diff": (["diff"], None),
    "env": (["env"], None),
    "repair": (["repair", "pip", "--no-verify"], None),
    "apply": (["apply", "ddtree", "--dry-run"], None),
    "rollback": (["rollback", "--to", "baseline", "--dry-run"], None),
    "port": (["port", "ddtree", "--to", "0.5.22", "--dry-run", "--wheel", "{old}", "--wheel", "{new}"], None),
    "snapshot": (["snapshot", "--name", "second"], None),
    "recover": (["recover"], None),
    "record": (["record", "mine", "--from", "first"], record_edit),
    "import": (["import", "mine", "{tmp}/new.patch"], a_patch),
    "init": (["-w", "{tmp}/new-ws", "init"], None),
    "clear-caches": (["clear-caches"], None),
    "disconnect": (["disconnect", "--all"], None),
    "export": (["export", "ddtree"], None),
    "show-backup": (["show-backup", "{digest}"], a_backup),
    "verify": None,  # success needs a served model: tests/test_verify.py
}


def wheels() -> dict[str, str]:
    return {
        "old": str(sorted(PORT_WHEELS.glob("sglang-0.5.23-*.whl"))[-1]),
        "new": str(sorted(PORT_WHEELS.glob("sglang-0.5.22-*.whl"))[-1]),
    }


# Verbs whose stdout is not theirs to print a document on, each with the reason.
NO_JSON = {
    "mcp": "its stdout is the MCP protocol; each tool returns a verb's --json document (tests/test_mcp.py)"
}


def test_every_verb_takes_json_and_is_walked():
    walked = {name: cmd for name, cmd in verbs().items() if name not in NO_JSON}
    assert len(walked) >= 21 and set(walked) == set(VERBS), set(walked) ^ set(VERBS)
    assert [n for n, cmd in walked.items() if not any("--json" in p.opts for p in cmd.params)] == []


@pytest.mark.parametrize("verb", sorted(v for v, run in VERBS.items() if run))
def test_success_is_one_document(baselined, tmp_path, verb):
    env = baselined
    env.pk("snapshot", "--name", "first")  # a baseline: rollback, log and diff have a state
    args, setup = VERBS[verb]
    if setup:
        setup(env, tmp_path)
    digest = (tmp_path / "digest").read_text() if (tmp_path / "digest").exists() else ""
    args = [a.format(**wheels(), tmp=tmp_path, digest=digest) for a in args]
    proc = env.pk(*args, "--json", check=None)
    assert proc.returncode in ((0, 1) if verb == "port" else (0,)), proc.stderr
    doc = one_document(proc)
    assert doc and (not isinstance(doc, dict) or doc.get("error") is None), doc


REFUSED = {  # a verb refused by other bad input than the walk's default (below)
    "init": ["init"],  # the workspace is there already
    "list": ["-w", "/nonexistent/nosuch", "list"],  # a workspace that is not there
    "rollback": ["rollback", "--to", "nosuch"],
    "record": ["record", "mine", "--from", "nosuch"],
    "snapshot": ["snapshot", "--name", "x", "-t", "nosuch"],
    "port": ["port", "ddtree", "--to", "0.5.22", "-t", "nosuch"],
    "show-backup": ["show-backup", "0123456789", "-t", "nosuch"],
}


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_refused_input_is_one_error_document(env, verb):
    """Each verb refused (exit 2): by default "nosuch" for each argument it needs and, when it takes
    -t, a target that names nothing."""
    cmd = verbs()[verb]
    args = REFUSED.get(verb) or [
        verb,
        *("nosuch" for p in cmd.params if isinstance(p, click.Argument) and p.required),
        *(["-t", "nosuch"] if any("-t" in p.opts for p in cmd.params) else []),
    ]
    doc = one_document(env.pk(*args, "--json", check=2))
    assert "error: " + doc["error"]["message"].splitlines()[0] in proc_err(env, args), doc


def proc_err(env, args) -> str:
    """The same command's stderr without --json: the document carries its error line."""
    return env.pk(*args, check=2).stderr


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_a_usage_error_is_one_error_document(env, verb):
    proc = env.pk(verb, "--no-such-option", "--json", check=2)
    doc = one_document(proc)
    assert doc["error"]["message"].startswith("No such option '--no-such-option'.") and doc["exit_code"] == 2
    assert "--help" in doc["error"]["hint"]
    error = doc["error"]  # stderr says the same error, in the house form (tests/test_usage_errors.py)
    assert proc.stderr == f"patchkeeper: error: {error['message']}\n  hint: {error['hint']}\n"


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
def test_a_failure_is_one_document(baselined, args, code):
    env = baselined
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
