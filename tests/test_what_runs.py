"""Verification that knows what runs: the speculative algorithm and accept length /server_info reports,
more than one completion, greedy output against the last pass, the evidence on screen (both command
lines of a stale server, the restart's own stderr), on the stand-in sglang started by tests/fake_systemd.py
from the host's unit and the patch sets' drop-in."""

from __future__ import annotations

import json
import shlex

from helpers import ledger, stack


def verifications(env) -> list[dict]:
    return [e["extra"]["verify"] for e in ledger(env) if e["kind"] == "verify"]


def checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def test_a_good_apply_checks_the_algorithm_the_accept_length_and_every_request(env, deployment):
    deployment.configure()
    proc = env.pk("apply", "nextn")
    assert (
        "algorithm ok" in proc.stdout
        and "the server runs EAGLE, as the unit asks (--speculative-algorithm NEXTN)" in proc.stdout
    )  # sglang resolves NEXTN to EAGLE
    assert "accept    ok" in proc.stdout and "average accept length 2.60" in proc.stdout
    assert "3 in turn and 2 at once all passed" in proc.stdout
    report = verifications(env)[-1]
    assert [r["request"] for r in report["extra"]["requests"]] == [
        "request 1 of 3",
        "request 2 of 3",
        "request 3 of 3",
        "concurrent request 1 of 2",
        "concurrent request 2 of 2",
    ]
    assert report["output"].startswith("def fibonacci") and report["smoke"]["max_tokens"] == 24
    assert report["extra"]["server_info"]["speculative_algorithm"] == "EAGLE"
    assert checks(report)["output"]["skipped"]  # the first pass: nothing to compare with, said so
    log = env.pk("log").stdout
    line = next(ln for ln in log.splitlines() if " verify " in ln)
    assert " passed  24 tokens, " in line and " smoke 0." in line  # each verification's smoke seconds


def test_the_algorithm_the_server_reports_must_be_the_units(env, deployment):
    deployment.configure()
    deployment.rule(DDTREE={"reports": "DFLASH"})  # DDTREE accepted, then run through the linear DFlash path
    before = env.snapshot()
    proc = env.pk("apply", "ddtree", check=3)
    assert "verification FAILED (algorithm)" in proc.stdout
    failing = next(ln for ln in proc.stdout.splitlines() if ln.startswith("  algorithm FAIL"))
    assert "--speculative-algorithm DDTREE" in failing and "the server runs DFLASH" in failing
    assert "is back in place and verifies" in proc.stdout and env.snapshot() == before
    assert [v["reason"] for v in verifications(env)] == ["algorithm", None]


def test_an_accept_length_of_one_means_no_draft_token_was_accepted(env, deployment):
    deployment.configure()
    deployment.rule(DFLASH={"accept_length": 1.0})
    proc = env.pk("apply", "dflash", check=3)
    assert "verification FAILED (accept-length)" in proc.stdout
    assert (
        "average accept length 1.00 is below min_accept_length = 1.2: no draft token was ever accepted"
        in proc.stdout
    )
    assert stack(env) == []


def test_a_server_that_does_not_say_is_a_skip_never_a_pass(env, deployment):
    deployment.configure()
    deployment.rule(NEXTN={"server_info": "absent"})
    proc = env.pk("apply", "nextn")
    assert "algorithm skip" in proc.stdout and "not checked:" in proc.stdout and "HTTP 404" in proc.stdout
    assert "accept    skip" in proc.stdout and "not checked: algorithm, accept, output" in proc.stdout
    report = checks(verifications(env)[-1])
    assert report["algorithm"]["skipped"] and report["accept"]["skipped"]


def test_a_failure_only_the_second_request_shows_is_caught(env, deployment):
    deployment.configure()
    deployment.rule(DDTREE="flaky")  # a good first completion, then "!!!!"
    proc = env.pk("apply", "ddtree", check=3)
    assert "verification FAILED (degenerate): request 2 of 3: degenerate output" in proc.stdout
    assert "(1 of 5 judged completion(s) passed)" in proc.stdout and stack(env) == []


def test_greedy_output_other_than_the_last_pass_warns_by_default(env, deployment):
    deployment.configure()
    deployment.rule(DDTREE={"text": "other"})
    env.pk("apply", "nextn")
    proc = env.pk("apply", "ddtree")  # compare_output = "warn": a warning, and the switch stays
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("  output    warn"))
    passed = [e for e in ledger(env) if e["kind"] == "verify"][0]
    assert (
        f"greedy output differs from the last pass (state {passed['after']['id']}, ledger entry {passed['id']})"
        in line
        and "at character 38 (line 2, column 8)" in line
    )
    then = next(ln for ln in proc.stdout.splitlines() if ln.startswith("    | then: "))
    now = next(ln for ln in proc.stdout.splitlines() if ln.startswith("    | now:  "))
    assert '"""Return the n-th Fibonacci' in then and '"""The n-th Fibonacci' in now  # both texts, around it
    assert stack(env) == ["ddtree"]


def test_greedy_output_other_than_the_last_pass_fails_when_asked(env, deployment):
    deployment.configure(smoke='compare_output = "fail"\n')
    deployment.rule(DDTREE={"text": "other"})
    env.pk("apply", "nextn")
    proc = env.pk("apply", "ddtree", check=3)
    assert "verification FAILED (output-changed): greedy output differs from the last pass" in proc.stdout
    assert "then: " in proc.stdout and "now:  " in proc.stdout
    assert stack(env) == ["nextn"] and [v["reason"] for v in verifications(env)] == [
        None,
        "output-changed",
        None,
    ]
    again = checks(verifications(env)[-1])["output"]  # nextn again: the same text as its own pass
    assert again["ok"] and again["detail"].startswith("the same greedy output as the last pass")


def test_a_restart_without_daemon_reload_shows_both_command_lines_and_systemds_warning(env, deployment):
    import subprocess

    deployment.configure(restart=shlex.join(deployment.restart_only))  # systemctl restart, no daemon-reload
    subprocess.run(deployment.reload, check=True)  # systemd has the host's unit loaded, and runs it
    proc = env.pk("apply", "nextn", check=3, env=deployment.path)
    assert "verification FAILED (stale-server)" in proc.stdout
    running = next(ln for ln in proc.stdout.splitlines() if "running:" in ln)
    wanted = next(ln for ln in proc.stdout.splitlines() if "the unit:" in ln)
    assert "--speculative-algo" not in running and "--speculative-algo NEXTN" in wanted
    # the workspace asks no manager (make_workspace's `systemd = "off"`): what the unit runs is the files'
    # reading (tests/test_manager_restart.py asks a live manager; test_manager_show.py what is said when
    # no systemd runs the host)
    assert f"(the unit's effective ExecStart is from {env.dropin}" in proc.stdout
    # the restart command's own stderr, on screen although it exited 0
    restart = proc.stdout.split("  restart   warn", 1)[1].splitlines()
    assert "exit 0, with this on stderr:" in restart[0]
    assert "changed on disk. Run 'systemctl daemon-reload' to reload units." in restart[1]
    assert "FAILED and rolled back" in proc.stdout and stack(env) == []


def test_json_of_a_failed_apply_is_one_document_with_every_step(env, deployment):
    deployment.configure()
    deployment.rule(DDTREE="broken")
    proc = env.pk("apply", "ddtree", "--json", check=3)
    doc = json.loads(proc.stdout)  # stdout is the document alone; the rest went to stderr
    assert doc["schema"] == "patchkeeper/change" and doc["schema_version"] == 1 and doc["exit_code"] == 3
    assert doc["rolled_back"] and not doc["ok"] and doc["before"]["id"] == doc["after"]["id"]
    applied, back = doc["changes"]
    assert applied["kind"] == "apply" and not applied["automatic"] and back["automatic"]
    dropin = next(f for f in applied["files"] if f["key"] == "@dropin")
    assert dropin["change"] == "added" and dropin["path"] == str(env.dropin) and dropin["old"] is None
    assert dropin["new"]["digest"].startswith("blake3:") and dropin["new"]["mode"] == "644"
    assert applied["exec_start"]["source"] == str(env.dropin) and "DDTREE" in applied["exec_start"]["argv"]
    assert [(v["phase"], v["ok"], v["reason"]) for v in doc["verifications"]] == [
        ("apply", False, "degenerate"),
        ("automatic rollback", True, None),
    ]
    assert "OSError: libddtree_kernels.so" in " ".join(doc["verifications"][0]["errors"])
    assert "restarting and verifying" in proc.stderr or "verification" not in proc.stderr


def test_a_patch_set_declares_the_accept_length_that_tells_its_algorithm_from_the_linear_one(env, deployment):
    """The server's name for its algorithm is all the algorithm check compares; ddtree declares in
    its patchset.toml an accept-length floor above DFLASH's, and verify holds a DDTREE server to it."""
    deployment.configure()
    deployment.rule(
        DDTREE={"accept_length": 1.8}, DFLASH={"accept_length": 1.8}
    )  # DDTREE as the linear path gives
    proc = env.pk("apply", "ddtree", check=3)
    assert "verification FAILED (accept-length)" in proc.stdout
    assert (
        "average accept length 1.80 is below the floor ddtree@3.1.0 declares ([verify] min_accept_length = 2): "
        "what the linear path gives, not its algorithm's"
    ) in proc.stdout
    assert "names compared: the server's report, not the code path it runs" in proc.stdout  # the name matched
    proc = env.pk("apply", "dflash")  # the same figure is a pass for DFLASH, which declares no floor
    assert "average accept length 1.80, at least min_accept_length = 1.2" in proc.stdout


def test_the_verify_report_says_which_floor_it_held_the_server_to(env, deployment):
    deployment.configure()
    proc = env.pk("apply", "ddtree")
    assert (
        "average accept length 2.60, at least the floor ddtree@3.1.0 declares ([verify] min_accept_length = 2)"
        in proc.stdout
    )
    report = checks(verifications(env)[-1])
    assert "ddtree@3.1.0" in report["accept"]["detail"] and "names compared" in report["algorithm"]["detail"]
