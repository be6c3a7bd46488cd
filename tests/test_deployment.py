"""The real deployment: units rendered from templates per target, a server started from the rendered
unit's ExecStart (tests/standin/sglang, by tests/fake_systemd.py as systemd would), and verification
that knows the process on the port, the last pass of the same code state and the first error."""

from __future__ import annotations

import json

from conftest import copy_venv, make_workspace
from helpers import ledger, stack

from patchkeeper.checks import units


def test_good_apply_runs_the_rendered_unit_and_passes(env, deployment):
    deployment.configure(smoke="warmup = 2\n")
    host_unit = env.unit.read_bytes()
    proc = env.pk("apply", "ddtree")
    unit = env.dropin.read_text()  # the drop-in beside the host's unit, which stays as the host wrote it
    assert (
        f"--port {deployment.port}" in unit
        and "--speculative-draft-model-path /root/models/Qwen3.6-27B-DFlash" in unit
    )
    assert (
        "{{" not in unit
        and "verification passed: 24 tokens" in proc.stdout
        and env.unit.read_bytes() == host_unit
    )
    assert "runs the unit's effective ExecStart" in proc.stdout and proc.stdout.count("warm-up") == 2
    report = ledger(env)[-1]["extra"]["verify"]
    assert [c["name"] for c in report["checks"]] == [
        "restart",
        "ready",
        "server",
        "generate",
        "algorithm",
        "accept",
        "output",
    ]
    assert len(report["extra"]["warmups"]) == 2
    # the ledger entry records the values the unit was rendered with
    applied = [e for e in ledger(env) if e["kind"] == "apply"][0]
    assert applied["patchsets"][0]["vars"]["port"] == str(deployment.port)
    assert applied["patchsets"][0]["vars"]["tp_size"] == "1"
    assert env.pk("audit").stdout.strip().endswith("environment clean")  # no drift after a rendered apply


def test_broken_ddtree_quotes_the_first_error_and_rolls_back(env, deployment):
    deployment.configure()
    deployment.rules.write_text(json.dumps({"DDTREE": "broken"}))
    before = env.snapshot()
    proc = env.pk("apply", "ddtree", check=3)
    assert "verification FAILED (degenerate)" in proc.stdout and "'!'" in proc.stdout
    quoted = proc.stdout.split("first errors in the logs:")[1].split("logs (the end):")
    assert "OSError: libddtree_kernels.so: cannot open shared object file" in quoted[0]
    assert "Traceback (most recent call last)" in quoted[0]
    assert "OSError" not in quoted[1]  # 150 lines above the end: not in the tail, quoted all the same
    journal = deployment.journal.read_text().splitlines()
    at = next(i for i, line in enumerate(journal) if line.startswith("OSError"))
    end = next(
        i for i in range(at, len(journal)) if journal[i].startswith("-- restart at")
    )  # the rollback's restart
    assert sum(1 for line in journal[at:end] if "capture cuda graph" in line) == 150
    assert "is back in place and verifies" in proc.stdout and env.snapshot() == before and stack(env) == []


def test_a_restart_that_does_nothing_leaves_a_stale_server(env, deployment):
    import subprocess

    subprocess.run(deployment.systemd, check=True)  # the server of the baseline unit is on the port
    deployment.configure(restart="true")  # daemon-reload and restart never happen
    before = env.snapshot()
    proc = env.pk("apply", "nextn", check=3)
    assert "verification FAILED (stale-server)" in proc.stdout
    running = next(line for line in proc.stdout.splitlines() if "running:" in line)
    wanted = next(line for line in proc.stdout.splitlines() if "the unit:" in line)
    assert "--speculative-algo" not in running and "--speculative-algo NEXTN" in wanted
    assert "FAILED and rolled back" in proc.stdout and "is back in place and verifies" in proc.stdout
    assert env.snapshot() == before and stack(env) == []
    reasons = [e["extra"]["verify"]["reason"] for e in ledger(env) if e["kind"] == "verify"]
    assert reasons == ["stale-server", None]


def test_the_same_state_ten_times_slower_is_a_regression(env, deployment):
    deployment.configure()
    deployment.delay.write_text("0.25")
    env.pk("apply", "nextn")
    deployment.delay.write_text("2.5")
    proc = env.pk("verify", "--restart", check=1)
    assert "verification FAILED (regression)" in proc.stdout
    assert " s then, " in proc.stdout and " s now (" in proc.stdout and "max_slowdown = 3" in proc.stdout
    verifications = [e["extra"]["verify"] for e in ledger(env) if e["kind"] == "verify"]
    assert [(v["ok"], v["reason"]) for v in verifications] == [(True, None), (False, "regression")]
    assert stack(env) == ["nextn"]  # `verify` changes nothing


def test_two_targets_get_their_own_units_from_one_patch_set(env, tmp_path, pristine_venv):
    second = copy_venv(pristine_venv, tmp_path / "venv2")
    unit2 = tmp_path / "ct200.service"
    unit2.write_text(env.unit.read_text())
    dropin2 = tmp_path / "ct200.service.d" / "50-patchkeeper.conf"
    with open(env.root / "patchkeeper.toml", "a") as f:
        f.write(
            f'\n[targets.ct200]\npython = "{second}/bin/python"\npackage = "sglang"\n'
            f'[targets.ct200.files]\nunit = "{unit2}"\n[targets.ct200.vars]\nport = 30001\ntp_size = 4\n'
            'model_path = "/data/models/Qwen3.6-27B"\ndraft_model_path = "/data/models/Qwen3.6-27B-DFlash"\n'
        )
    dry = env.pk("apply", "dflash", "-t", "ct200", "--dry-run").stdout
    assert (
        f"      | ExecStart={second}/bin/python -m sglang.launch_server --model-path /data/models/Qwen3.6-27B "
        "--port 30001 \\" in dry
    )  # the rendered file, run by the target's own interpreter
    env.pk("apply", "dflash")
    env.pk("apply", "dflash", "-t", "ct200")
    ours = units.effective([("unit", env.unit.read_text()), ("dropin", env.dropin.read_text())]).argv
    theirs = units.effective([("unit", unit2.read_text()), ("dropin", dropin2.read_text())]).argv
    assert ours[ours.index("--tp-size") + 1] == "2" and theirs[theirs.index("--tp-size") + 1] == "4"
    assert theirs[theirs.index("--port") + 1] == "30001" and "/data/models/Qwen3.6-27B-DFlash" in theirs
    for target in ("local", "ct200"):
        assert "files match the recorded state" in env.pk("status", "-t", target).stdout
        assert env.pk("audit", "-t", target).returncode == 0
    between = env.pk("diff", "local", "ct200", check=1).stdout
    assert between.count("@dropin") == 1 and "@unit" not in between  # only the drop-in differs
    assert "the unit's ExecStart (effective, from " in between and "--port 30001" in between
    shown = env.pk("show", "dflash").stdout
    assert (
        "variable  port (int 1..65535) = '30000'" in shown
        and "variable  draft_model_path (path): no default" in shown
    )
    assert "variable  python (path): the target's own interpreter" in shown
    exported = env.pk("export", "dflash").stdout
    assert (
        "# variables: the role files are templates using" in exported
        and "draft_model_path (no default)" in exported
    )


def test_an_undefined_variable_is_refused_by_name(tmp_path, pristine_venv):
    ws = make_workspace(tmp_path / "ws", copy_venv(pristine_venv, tmp_path / "venv"))
    toml = ws.root / "patchkeeper.toml"
    toml.write_text(toml.read_text().replace("[targets.local.vars]\n", "[targets.local.vars]\nunused = 1\n#"))
    before = ws.snapshot()
    proc = ws.pk("apply", "ddtree", check=2)
    assert "patchsets/ddtree/dropin.conf" in proc.stderr and "{{ draft_model_path }}" in proc.stderr
    assert "[targets.local.vars]" in proc.stderr  # the hint says where to set it
    assert ws.snapshot() == before and not list(ws.state_dir.glob("ledger/*"))  # not even a baseline
    assert "no value is set for draft_model_path" in ws.pk("check", "ddtree", check=1).stdout
    ws.pk("apply", "nextn")  # a patch set with defaults for everything it uses applies


def test_exec_start_is_read_as_systemd_reads_it():
    unit = (
        '[Unit]\nDescription=x\nExecStart=/not/this\n[Service]\nEnvironment="MODEL=/m 1" PORT=8\n'
        "ExecStart=/bin/old\nExecStart=\nExecStart=-/usr/bin/python3 -m s \\\n# a comment\n"
        "    --model \"${MODEL}\" --port $PORT \\\n    --name 'a b' --pct 90%% --cost $$5\n"
    )
    cmd = units.exec_start(unit)
    assert (
        cmd.argv
        == (
            "/usr/bin/python3",
            "-m",
            "s",
            "--model",
            "/m 1",
            "--port",
            "8",
            "--name",
            "a b",
            "--pct",
            "90%",
            "--cost",
            "$5",
        )
        and cmd.problem is None
    )
    assert units.exec_start("[Service]\nExecStart=@/bin/sh mysh -c x\n").argv == ("mysh", "-c", "x")
    assert "%i" in units.exec_start("[Service]\nExecStart=/bin/x %i\n").problem
    assert units.exec_start("[Service]\nType=oneshot\n") is None


def test_a_regression_needs_the_ratio_and_a_floor_and_errors_are_found_anywhere():
    from patchkeeper.change import verify
    from patchkeeper.change.service import ServiceConfig
    from patchkeeper.change.verify_history import regression

    svc = ServiceConfig(restart="true", base_url="http://x")
    then = {"entry": "e1", "seconds": 2.15, "tokens_per_s": 29.8, "ready": 60.0}
    found = regression(then, {"seconds": 141.0, "tokens_per_s": 0.45}, None, svc)
    assert len(found) == 1 and found[0].startswith("the smoke request: 2.15 s then, 141 s now (65.6x")
    assert regression({**then, "seconds": 0.01}, {"seconds": 0.05}, None, svc) == []  # 5x of jitter
    assert regression(then, {"seconds": 2.2}, 400.0, svc)[0].startswith("ready after restart: 60 s then")
    assert regression({**then, "ready": 5.0}, {"seconds": 2.2}, 30.0, svc) == []  # 6x, but 25 s more
    log = [
        "INFO start",
        "ERROR: CUDA out of memory",
        *["INFO ok"] * 200,
        "Traceback (most recent call last):",
    ]
    assert verify.first_errors("\n".join(log)) == (
        "line 2 of 203: ERROR: CUDA out of memory",
        "line 203 of 203: Traceback (most recent call last):",
    )
