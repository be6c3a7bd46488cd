"""Verification by real generation against a real HTTP server on 127.0.0.1, and the automatic rollback.

The server (tests/fake_openai.py) is started by the target's restart command and reads the target's
unit file when it starts, so the code state patchkeeper puts in place decides how it behaves.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
from helpers import free_port, ledger, stack

from patchkeeper.change import verify
from patchkeeper.change.service import ServiceConfig, SmokeConfig
from patchkeeper.commands.verify import PREVIOUS_FAILS


# ---- through the CLI ---------------------------------------------------------------------------
def test_good_apply_commits_and_records_the_verification(baselined, service):
    env = baselined
    service("DDTREE=healthy", default="degenerate")
    proc = env.pk("apply", "ddtree")
    assert "verification passed: 24 tokens" in proc.stdout
    assert "def fibonacci" in proc.stdout  # the first characters of the output are in the report
    assert stack(env) == ["ddtree"] and "DDTREE" in env.running()
    entries = ledger(env)
    assert [e["kind"] for e in entries] == ["baseline", "apply", "verify"]
    check = entries[-1]["extra"]
    assert check["phase"] == "apply" and check["of"] == entries[1]["id"]
    assert check["verify"]["ok"] and check["verify"]["tokens"] == 24 and check["verify"]["tokens_per_s"] >= 20
    assert [c["name"] for c in check["verify"]["checks"]] == [
        "restart",
        "ready",
        "generate",
        "algorithm",
        "accept",
        "output",
    ]
    assert all(
        c["skipped"] for c in check["verify"]["checks"][3:]
    )  # this server does not say what runs: never a pass
    # the ledger mirror in the workspace holds the verification too
    assert len(list((env.root / "snapshots" / "local" / "ledger").glob("*.json"))) == 3


@pytest.mark.parametrize(
    "mode, reason, server_args, says",
    [
        ("degenerate", "degenerate", "", "one character, '!', is 100% of the output"),
        ("hang", "timeout", "", "no completion from"),
        ("slow", "slow", "--slow-seconds 1.5", "below min_tokens_per_s = 20"),
        (
            "slow-load",
            "not-ready",
            "--load-seconds 30",
            "did not answer within ready_timeout = 1s (last: HTTP 503",
        ),
        ("fail-start", "restart", "", "failed with exit code 1"),
    ],
)
def test_each_bad_mode_is_detected_and_rolled_back_to_exact_bytes(
    baselined, service, mode, reason, server_args, says
):
    env = baselined
    service(f"DDTREE={mode}", server_args=server_args, ready_timeout=1)
    before = env.snapshot()
    proc = env.pk("apply", "ddtree", check=3)
    assert f"verification FAILED ({reason})" in proc.stdout and says in proc.stdout
    assert "FAILED and rolled back" in proc.stdout and "is back in place and verifies" in proc.stdout
    assert env.snapshot() == before
    assert stack(env) == []
    if mode == "fail-start":
        assert "cannot start: the unit is broken" in proc.stdout  # the restart's output is in the report
    else:
        assert f"mode={mode}" in proc.stdout  # the service's logs are in the report

    entries = ledger(env)
    assert [e["kind"] for e in entries] == ["baseline", "apply", "verify", "rollback", "verify"]
    _, applied, failed, back, passed = entries
    assert failed["extra"]["verify"]["reason"] == reason and not failed["extra"]["verify"]["ok"]
    assert failed["extra"]["verify"]["logs"]
    assert back["extra"] == {"automatic": True, "undoes": applied["id"], "reason": reason}
    assert back["command"] == "apply ddtree (automatic rollback)"
    assert back["after"]["id"] == applied["before"]["id"]
    assert passed["extra"]["verify"]["ok"] and passed["extra"]["phase"] == "automatic rollback"


def test_slow_load_within_ready_timeout_passes_with_progress(baselined, service):
    env = baselined
    service("DDTREE=slow-load", server_args="--load-seconds 1.5", ready_timeout=20)
    proc = env.pk("apply", "ddtree")
    assert "waiting for http://127.0.0.1:" in proc.stderr and "HTTP 503" in proc.stderr
    assert "verification passed" in proc.stdout and stack(env) == ["ddtree"]


def test_failed_switch_goes_back_to_the_previous_patch_set(baselined, service):
    env = baselined
    service("NEXTN=degenerate")
    env.pk("apply", "ddtree")
    with_ddtree = env.snapshot()
    proc = env.pk("apply", "nextn", check=3)
    assert "verification failed after switch (degenerate)" in proc.stdout
    assert env.snapshot() == with_ddtree and stack(env) == ["ddtree"]
    kinds = [e["kind"] for e in ledger(env)]
    assert kinds == ["baseline", "apply", "verify", "switch", "verify", "rollback", "verify"]


def test_a_bad_previous_state_is_reported_as_such(baselined, service):
    env = baselined
    service("Qwen3.6-27B=degenerate")  # the model path is in every unit: every code state fails
    before = env.snapshot()
    proc = env.pk("apply", "ddtree", check=3)
    assert PREVIOUS_FAILS in proc.stdout and "patchkeeper audit -t local" in proc.stdout
    assert "is back in place and verifies" not in proc.stdout
    assert env.snapshot() == before
    verifications = [e["extra"]["verify"] for e in ledger(env) if e["kind"] == "verify"]
    assert [(v["ok"], v["reason"]) for v in verifications] == [(False, "degenerate"), (False, "degenerate")]


def test_no_verify_skips_restart_and_checks(baselined, service):
    env = baselined
    svc = service("DDTREE=degenerate")
    env.pk("apply", "ddtree", "--no-verify")
    assert stack(env) == ["ddtree"] and not svc.pidfile.exists()
    assert "verify" not in [e["kind"] for e in ledger(env)]


def test_a_rollback_that_fails_verification_is_reported_not_undone(baselined, service):
    env = baselined
    service("DDTREE=healthy", default="degenerate")
    env.pk("apply", "ddtree")
    proc = env.pk("rollback", "--to", "baseline", check=1)
    assert "is in place, but the service fails verification (degenerate)" in proc.stdout
    assert stack(env) == [] and "DDTREE" not in env.running()
    assert [e["kind"] for e in ledger(env)][-2:] == ["rollback", "verify"]


def test_verify_alone_reports_and_changes_nothing(baselined, service):
    env = baselined
    svc = service("DDTREE=degenerate", ready_timeout=1)
    env.pk("apply", "ddtree", "--no-verify")
    before = env.snapshot()
    doc = json.loads(env.pk("verify", "--restart", "--json", check=1).stdout)
    assert doc["schema_version"] == 1 and doc["exit_code"] == 1 and doc["changes"] == []
    (report,) = doc["verifications"]
    assert report["reason"] == "degenerate" and report["tokens"] == 24 and report["sample"] == "!" * 24
    assert doc["after"]["stack"][0]["name"] == "ddtree" and "mode=degenerate" in report["logs"]
    assert doc["diagnosis"]["code"] == {} and doc["diagnosis"]["last_pass"] is None
    assert env.snapshot() == before and stack(env) == ["ddtree"]
    # without --restart it checks the server as it runs now
    svc.stop()
    proc = env.pk("verify", check=1)
    assert "verification FAILED (not-ready)" in proc.stdout and "Connection refused" in proc.stdout
    doc = ledger(env)[-1]["extra"]["verify"]
    assert [c["name"] for c in doc["checks"]] == ["ready"] and doc["reason"] == "not-ready"
    assert [e["kind"] for e in ledger(env)][-2:] == ["verify", "verify"]


def test_verify_all_records_and_mirrors_each_verification(baselined, service):
    env = baselined
    service()
    env.pk("snapshot", "--name", "s0")
    doc = json.loads(env.pk("verify", "--all", "--restart", "--json").stdout)
    assert doc["targets"]["local"]["ok"] and ledger(env)[-1]["kind"] == "verify"
    # the workspace's mirror of the ledger holds the verification too (was a NameError: `mirror`)
    assert len(list((env.root / "snapshots" / "local" / "ledger").glob("*.json"))) == len(ledger(env))


def test_chat_endpoint(env, service):
    service(smoke='endpoint = "chat"\nmodel = "qwen3-8b"\n')
    doc = json.loads(env.pk("verify", "--restart", "--json").stdout)
    assert doc["ok"] and doc["verifications"][0]["checks"][2]["detail"].split(";")[0].endswith(
        "/v1/chat/completions"
    )


@pytest.mark.parametrize(
    "table, says",
    [
        ('[targets.local.service]\nbase_url = "http://127.0.0.1:1"\n', "lacks restart"),
        (
            '[targets.local.service]\nrestart = "true"\nbase_url = "127.0.0.1:1"\nready_timeout = -1\n',
            "is not an http:// or https:// URL; [targets.local.service] ready_timeout must be above 0",
        ),
        (
            '[targets.local.service]\nrestart = "true"\nbase_url = "http://x"\n[targets.local.service.smoke]\n'
            'max_tokens = "lots"\nmin_tokens_per_s = "fast"\ntemperature = 1\n',
            "max_tokens must be a whole number, not 'lots'",
        ),
        (
            '[targets.local.service]\nrestart = "true"\nbase_url = "http://x"\n[targets.local.service.smoke]\n'
            "max_tokens = 8\nmin_tokens = 16\n",
            "min_tokens (16) is above max_tokens (8)",
        ),
    ],
)
def test_bad_service_config_is_refused_before_anything_changes(env, table, says):
    with open(env.root / "patchkeeper.toml", "a") as f:
        f.write("\n" + table)
    before = env.snapshot()
    proc = env.pk("apply", "ddtree", check=2)
    assert says in proc.stderr and "hint:" in proc.stderr
    assert env.snapshot() == before and not env.state_dir.exists()


def test_verify_without_a_service_table_is_bad_input(env):
    proc = env.pk("verify", check=2)
    assert "has no [targets.local.service] table" in proc.stderr


# ---- the judgement and the probe, directly ------------------------------------------------------
@pytest.mark.parametrize(
    "text, says",
    [
        ("!" * 8, "one character, '!'"),
        ("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!! ok", "one character, '!'"),
        ("the " * 20 + "end", "one token, 'the'"),
        ("to be or not " * 12, "distinct tokens"),
        ("\n\n  \n", "empty or only whitespace"),
    ],
)
def test_degenerate_outputs_are_flagged(text, says):
    assert says in verify.degenerate(text)


def test_real_looking_outputs_are_not_flagged():
    from fake_openai import healthy_text

    assert verify.degenerate(healthy_text(64)[0]) is None
    assert (
        verify.degenerate(
            "The n-th Fibonacci number is the sum of the two before it: F(n) = F(n-1) + F(n-2)."
        )
        is None
    )


def test_judge_names_every_problem_and_reports_figures():
    svc = ServiceConfig(
        restart="true", base_url="http://x", smoke=SmokeConfig(min_tokens=16, min_tokens_per_s=5.0)
    )
    check, figures = verify.judge(
        {"text": "!" * 8, "completion_tokens": 8, "seconds": 141.0, "url": "u"}, svc
    )
    assert not check.ok and figures["reason"] == "few-tokens"
    assert [p.split(" ")[0] for p in figures["problems"]] == ["only", "0.1", "degenerate"]
    assert figures["tokens"] == 8 and figures["seconds"] == 141.0 and figures["sample"] == "!" * 8
    check, figures = verify.judge(
        {"text": "a b c d e f g h i j k l m n o p q", "seconds": 0.5, "url": "u"}, svc
    )
    assert check.ok and figures["tokens"] == 17  # counted from the text when the server reports no usage


def test_probe_is_stdlib_only():
    tree = ast.parse(Path(verify.probe_http.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names and names <= set(sys.stdlib_module_names), names - set(sys.stdlib_module_names)


def test_probe_reads_chunked_answers_and_bracketed_hosts():
    import socket
    import threading

    from patchkeeper.host import probe_http

    server = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:  # one chunked HTTP/1.1 answer, chunk extensions included
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                b'4\r\n{"a"\r\n3;x=1\r\n: 1\r\n1\r\n}\r\n0\r\n\r\n'
            )

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        assert probe_http._call(f"http://127.0.0.1:{server.getsockname()[1]}/v1/models") == (
            200,
            {"a": 1},
            None,
        )
    finally:
        thread.join(10)
        server.close()
    assert probe_http.split_url("http://[::1]:8000/v1") == ("http", "::1", 8000, "/v1")
    assert probe_http.split_url("https://h.example") == ("https", "h.example", 443, "/")
    assert probe_http._call(f"http://127.0.0.1:{free_port()}/v1/models", timeout=1)[2] == "Connection refused"
