"""`patchkeeper mcp`: the SDK's own client over stdio against the server in a subprocess, on real
targets (a real sglang venv, the test sshd): tools, plans, stale plans, read-only, bad arguments."""

from __future__ import annotations

import json
import subprocess

from conftest import SITE_REL, copy_venv, edit_file, make_workspace
from helpers import NO_INDEX, WHEELS, ledger, stack
from mcpclient import Agent, serve

READING = ["list", "show", "status", "audit", "diff", "log", "check", "verify"]
PATCHED = "sglang/srt/speculative/ddtree_utils.py"  # a file ddtree adds


def test_the_tools_and_a_read_only_server(env, tmp_path):
    before = env.snapshot()
    log = tmp_path / "server.log"

    async def full(agent: Agent) -> None:
        tools = (await agent.session.list_tools()).tools
        assert [t.name for t in tools] == READING + ["plan", "apply_plan"]
        plan = next(t for t in tools if t.name == "plan")
        assert plan.input_schema["additionalProperties"] is False
        assert set(plan.input_schema["properties"]) >= {
            "action",
            "name",
            "to",
            "dist",
            "targets",
            "group",
            "all",
        }
        # each reading tool's document is the verb's --json
        assert await agent.ok("list") == json.loads(env.pk("list", "--json").stdout)
        assert await agent.ok("show", name="ddtree") == json.loads(env.pk("show", "ddtree", "--json").stdout)
        status = await agent.ok("status")
        assert status["target"] == "local" and status["state"] is None
        checked = await agent.ok("check", name="ddtree")
        assert checked["applies"] is True

    async def read_only(agent: Agent) -> None:
        names = [t.name for t in (await agent.session.list_tools()).tools]
        assert names == READING
        doc = await agent.refused("plan", action="apply", name="ddtree")
        assert "read-only" in doc["message"]
        doc = await agent.refused("apply_plan", plan_id="0123456789abcdef")
        assert "read-only" in doc["message"]
        doc = await agent.refused("verify", restart=True)
        assert "read-only" in doc["message"]
        assert (await agent.ok("status"))["state"] is None

    serve(env.root, full, errlog=log)
    serve(env.root, read_only, "--read-only", errlog=log)
    assert env.snapshot() == before and not env.state_dir.exists()


def test_plan_then_apply_ddtree_then_roll_back_to_baseline_byte_for_byte(env, tmp_path):
    before = env.snapshot()

    async def body(agent: Agent) -> None:
        plan = await agent.ok("plan", action="apply", name="ddtree")
        assert plan["dry_run"] is True and plan["command"] == "apply ddtree" and plan["target"] == "local"
        (change,) = plan["changes"]
        keys = {f["key"]: f for f in change["files"]}
        assert keys[PATCHED]["change"] == "added" and keys[PATCHED]["new"]["digest"].startswith("blake3:")
        assert "@dropin" in keys  # the role file, with its digest
        assert plan["plan"]["starts_from"]["local"].startswith("sha256:")
        assert env.snapshot() == before and not (env.site / PATCHED).exists()  # a plan changes nothing
        assert any("planning apply" in m for m in agent.progress)  # progress notifications came

        done = await agent.ok("apply_plan", plan_id=plan["plan"]["id"])
        assert done["ok"] is True and done["dry_run"] is False
        assert [p["name"] for p in done["after"]["stack"]] == ["ddtree"]
        assert {f["key"] for f in done["changes"][0]["files"]} == set(keys)  # what was previewed, no more
        assert (env.site / PATCHED).exists() and stack(env) == ["ddtree"]
        again = await agent.refused("apply_plan", plan_id=plan["plan"]["id"])
        assert "carried out already" in again["message"]

        back = await agent.ok("plan", action="rollback", to="baseline")
        assert back["changes"][0]["kind"] == "rollback"
        done = await agent.ok("apply_plan", plan_id=back["plan"]["id"])
        assert done["ok"] is True and done["after"]["stack"] == []

        # the ledger, as a resource: every change says it came from this server and its client
        uris = [str(r.uri) for r in (await agent.session.list_resources()).resources]
        assert "patchkeeper://ledger/local" in uris
        assert "patchkeeper://patchsets/ddtree/patchset.toml" in uris
        read = await agent.session.read_resource("patchkeeper://ledger/local")
        entries = json.loads(read.contents[0].text)
        assert [e["kind"] for e in entries] == ["rollback", "apply", "baseline"]
        toml = await agent.session.read_resource("patchkeeper://patchsets/ddtree/patchset.toml")
        assert toml.contents[0].text == (env.root / "patchsets/ddtree/patchset.toml").read_text()

    serve(env.root, body, errlog=tmp_path / "server.log")
    assert env.snapshot() == before  # byte for byte, modes too
    changes = [e for e in ledger(env) if e["kind"] != "baseline"]
    assert [e["origin"] for e in changes] == [{"via": "mcp", "client": "test-agent"}] * 2
    assert "via mcp client 'test-agent'" in env.pk("log").stdout


def test_a_stale_plan_is_refused(baselined, tmp_path):
    env = baselined
    env.pk("snapshot", "--name", "start")  # the baseline, and a named state

    async def body(agent: Agent) -> None:
        plan = await agent.ok("plan", action="apply", name="ddtree")
        edit_file(env.site / "sglang/version.py", (env.site / "sglang/version.py").read_bytes() + b"# hand\n")
        edited = env.snapshot()
        doc = await agent.refused("apply_plan", plan_id=plan["plan"]["id"])
        assert "is stale: target local changed since it was made: its files changed" in doc["message"]
        assert "plan again" in doc["hint"]
        assert env.snapshot() == edited and stack(env) == []  # nothing changed

        # another change through the CLI after the plan: stale too
        fresh = await agent.ok("plan", action="apply", name="nextn", force=True)
        env.pk("apply", "ddtree", "--force")
        after_cli = env.snapshot()
        doc = await agent.refused("apply_plan", plan_id=fresh["plan"]["id"])
        assert "its recorded state is now" in doc["message"]
        assert env.snapshot() == after_cli and stack(env) == ["ddtree"]

        # a changed patch set in the workspace makes the plan stale as well
        last = await agent.ok("plan", action="rollback", to="baseline")
        toml = env.root / "patchsets/ddtree/patchset.toml"
        toml.write_text(toml.read_text() + "\n")
        doc = await agent.refused("apply_plan", plan_id=last["plan"]["id"])
        assert "workspace changed" in doc["message"]
        assert stack(env) == ["ddtree"]
        remember.append(last["plan"]["id"])

    remember: list[str] = []
    serve(env.root, body, errlog=tmp_path / "server.log")

    async def other_session(agent: Agent) -> None:  # a plan id lives only as long as its session
        doc = await agent.refused("apply_plan", plan_id=remember[0])
        assert "no plan" in doc["message"]

    serve(env.root, other_session, errlog=tmp_path / "server.log")
    assert stack(env) == ["ddtree"]


def test_bad_arguments_are_tool_errors_and_change_nothing(env, tmp_path):
    before = env.snapshot()

    async def body(agent: Agent) -> None:
        for tool, args, says in [
            ("plan", {"action": "apply", "name": "nosuchset"}, "unknown patch set 'nosuchset'"),
            ("plan", {"action": "apply", "name": "../../etc/passwd"}, "is not a name"),
            ("plan", {"action": "apply", "name": "/etc/passwd"}, "is not a name"),
            ("plan", {"action": "apply", "name": "--all"}, "is not a name"),
            ("plan", {"action": "apply", "name": "x" * 1_000_000}, "over 200"),
            ("plan", {"action": "rollback", "to": "../../baseline"}, "is not a name"),
            ("plan", {"action": "rollback", "to": "baseline\nExecStart=/bin/sh"}, "is not a name"),
            ("plan", {"action": "repair", "dist": "six; rm -rf /"}, "is not a name"),
            ("plan", {"action": "apply", "name": "ddtree", "targets": ["../local"]}, "is not a name"),
            ("plan", {"action": "apply", "name": "ddtree", "targets": ["nosuch"]}, "unknown target 'nosuch'"),
            ("plan", {"action": "apply", "name": "ddtree", "group": "nosuch"}, "unknown group 'nosuch'"),
            ("plan", {"action": "apply", "name": "ddtree", "serial": 0}, "between 1"),
            ("plan", {"action": "apply", "name": "ddtree", "path": "/tmp"}, "unknown argument"),
            ("plan", {"action": "apply", "name": 7}, "must be of type string"),
            ("plan", {"action": "apply"}, "needs name"),
            ("plan", {"action": "rollback", "to": "baseline", "name": "ddtree"}, "name does not go with it"),
            ("apply_plan", {"plan_id": "../../x"}, "is not a plan id (16 lowercase hex digits)"),
            ("apply_plan", {"plan_id": "0123456789ABCDEF"}, "is not a plan id"),
            ("plan", {"action": "delete", "name": "ddtree"}, "action 'delete' is not one of apply, rollback"),
            ("show", {"name": "nosuchset"}, "unknown patch set"),
            ("diff", {"sides": ["local", "/etc"]}, "is not a name"),
            ("nosuchtool", {}, "unknown tool"),
        ]:
            doc = await agent.refused(tool, **args)
            assert says in doc["message"], (tool, args, doc)
            assert len(json.dumps(doc)) < 2000  # the huge string is not echoed back

    serve(env.root, body, errlog=tmp_path / "server.log")
    assert env.snapshot() == before and not env.state_dir.exists()


def test_a_change_that_fails_verification_reports_it_and_is_rolled_back(env, service, tmp_path):
    service("DDTREE=degenerate", ready_timeout=1)
    before = env.snapshot()

    async def body(agent: Agent) -> None:
        plan = await agent.ok("plan", action="apply", name="ddtree")
        failed, doc = await agent.call("apply_plan", plan_id=plan["plan"]["id"])
        assert failed and doc["exit_code"] == 3 and doc["rolled_back"] is True
        verdicts = [(v["phase"], v["ok"], v["reason"]) for v in doc["verifications"]]
        assert verdicts == [("apply", False, "degenerate"), ("automatic rollback", True, None)]
        assert any("verif" in m.lower() for m in agent.progress)  # the restart and checks, as progress
        checked = await agent.ok("verify")  # the baseline, back in place, verifies (a reading tool)
        assert checked["ok"] is True and checked["verifications"][0]["phase"] == "verify"

    serve(env.root, body, errlog=tmp_path / "server.log")
    assert env.snapshot() == before and stack(env) == []
    assert [e["kind"] for e in ledger(env)] == ["baseline", "apply", "verify", "rollback", "verify", "verify"]


def test_a_change_over_ssh(fleet, tmp_path):
    async def body(agent: Agent) -> None:
        plan = await agent.ok("plan", action="apply", name="ddtree", targets=["ct129", "ct200"], serial=1)
        assert set(plan["targets"]) == {"ct129", "ct200"} and plan["schema"] == "patchkeeper/plan"
        assert set(plan["plan"]["starts_from"]) == {"ct129", "ct200"}
        assert not (fleet.site("ct129") / PATCHED).exists()
        agent.progress.clear()
        done = await agent.ok("apply_plan", plan_id=plan["plan"]["id"])
        assert any(m.startswith("ct200") for m in agent.progress), agent.progress  # each host's line
        assert done["schema"] == "patchkeeper/rollout" and done["ok"] is True and done["serial"] == 1
        assert {n: t["changed"] for n, t in done["targets"].items()} == {"ct129": True, "ct200": True}
        status = await agent.ok("status", targets=["ct129"])
        assert [p["name"] for p in status["state"]["stack"]] == ["ddtree"]
        failed, files = await agent.call("diff", sides=["ct129", "ct200"])
        assert failed is False and files == json.loads(
            fleet.pk("diff", "ct129", "ct200", "--json", check=None).stdout
        )
        failed, envs = await agent.call("diff", sides=["ct129", "ct200"], env=True)
        assert failed is False and {"a", "b", "alike", "changes"} <= set(envs)

    serve(fleet.env.root, body, errlog=tmp_path / "server.log")
    for host in ("ct129", "ct200"):
        assert (fleet.site(host) / PATCHED).exists()
        entries = sorted((fleet.venvs[host] / ".patchkeeper" / "ledger").glob("*.json"))
        applied = json.loads(entries[-1].read_text())
        assert applied["kind"] == "apply" and applied["origin"] == {"via": "mcp", "client": "test-agent"}


def _repair_workspace(tmp_path, repair_pristine, monkeypatch):
    """A workspace over a venv with six (repair's test venv), its wheels local: pip never leaves this machine."""
    for key, value in NO_INDEX.items():
        monkeypatch.setenv(key, value)
    renv = make_workspace(tmp_path / "ws", copy_venv(repair_pristine, tmp_path / "venv"))
    toml = renv.root / "patchkeeper.toml"
    toml.write_text(f'wheels = "{WHEELS}"\n' + toml.read_text())
    return renv


def test_plan_and_apply_a_repair(tmp_path, repair_pristine, monkeypatch):
    renv = _repair_workspace(tmp_path, repair_pristine, monkeypatch)
    pristine = (repair_pristine / SITE_REL / "six.py").read_bytes()
    edit_file(renv.site / "six.py", pristine.replace(b"def ", b"def  ", 3))

    async def body(agent: Agent) -> None:
        plan = await agent.ok("plan", action="repair", dist="six")
        assert (renv.site / "six.py").read_bytes() != pristine  # a plan changes nothing
        assert "six.py" in json.dumps(plan["changes"])
        done = await agent.ok("apply_plan", plan_id=plan["plan"]["id"])
        assert done["ok"] is True and done["changes"][-1]["kind"] == "repair"

    serve(renv.root, body, errlog=tmp_path / "server.log")
    assert (renv.site / "six.py").read_bytes() == pristine
    assert ledger(renv)[-1]["kind"] == "repair" and ledger(renv)[-1]["origin"]["via"] == "mcp"


SPEC = "sglang/srt/speculative/spec_info.py"  # a file ddtree patches
BY_HAND = "sglang/srt/speculative/ddtree_by_hand.py"  # a file the release does not have


def _hand_patched(env) -> bytes:
    """A fresh target patched by hand before patchkeeper ran there (scp'd files); the release's bytes of SPEC."""
    toml = env.root / "patchkeeper.toml"
    toml.write_text(f'wheels = "{WHEELS}"\n' + toml.read_text())  # the release's bytes come from its wheel
    pristine = (env.site / SPEC).read_bytes()
    edit_file(env.site / SPEC, pristine + b"# copied in by scp\n")
    edit_file(env.site / BY_HAND, b"TREE = 1\n")
    return pristine


def test_plan_with_restore_pristine_previews_it_and_apply_plan_does_only_that(env, tmp_path):
    pristine = _hand_patched(env)
    before = env.snapshot()

    async def body(agent: Agent) -> None:
        failed, doc = await agent.call("plan", action="apply", name="ddtree")  # hand edits: refused
        assert failed and f"{SPEC} (changed)" in doc["error"]["message"], doc
        hint = doc["error"]["hint"]  # the tool's own arguments, not the command's flags
        assert "`restore_pristine: true`" in hint and "`accept_edits: true`" in hint and "plan" not in doc
        assert "--restore-pristine" not in hint and "--accept-edits" not in hint
        doc = await agent.refused(
            "plan", action="apply", name="ddtree", restore_pristine=True, accept_edits=True
        )
        assert "exclude each other" in doc["message"]
        doc = await agent.refused("plan", action="rollback", to="baseline", accept_edits=True)
        assert "accept_edits does not go with it" in doc["message"]

        edits = {"local": {BY_HAND: "added", SPEC: "changed"}}
        kept = await agent.ok("plan", action="apply", name="ddtree", accept_edits=True)
        assert kept["plan"]["command"] == "apply --accept-edits ddtree"
        assert kept["plan"]["adopts"] == {"mode": "accept-edits", "hand_edits": edits}
        plan = await agent.ok("plan", action="apply", name="ddtree", restore_pristine=True)
        assert plan["plan"]["command"] == "apply --restore-pristine ddtree"
        assert plan["plan"]["adopts"] == {"mode": "restore-pristine", "hand_edits": edits}
        assert plan["before"]["name"] == "baseline"  # the baseline it records first: the release's bytes
        spec = next(f for f in plan["changes"][0]["files"] if f["key"] == SPEC)
        assert spec["old"]["size"] == len(pristine)  # the change is planned on the restored bytes
        assert env.snapshot() == before and not env.state_dir.exists()  # plans change nothing

        edit_file(env.site / BY_HAND, b"TREE = 2\n")  # the hand edits moved after the preview
        doc = await agent.refused("apply_plan", plan_id=plan["plan"]["id"])
        assert "is stale" in doc["message"] and not env.state_dir.exists()
        plan = await agent.ok("plan", action="apply", name="ddtree", restore_pristine=True)

        done = await agent.ok("apply_plan", plan_id=plan["plan"]["id"])
        assert done["ok"] is True and [p["name"] for p in done["after"]["stack"]] == ["ddtree"]
        doc = await agent.refused("apply_plan", plan_id=kept["plan"]["id"])  # the other preview: stale now
        assert "is stale" in doc["message"]

    serve(env.root, body, errlog=tmp_path / "server.log")
    base = ledger(env)[0]
    assert base["kind"] == "baseline" and base["extra"]["adopted"] == "restore-pristine"
    assert not (env.site / BY_HAND).exists()  # the release has no such file: removed, backed up
    assert b"# copied in by scp" not in (env.site / SPEC).read_bytes()
    assert stack(env) == ["ddtree"]
    env.pk("rollback", "--to", "baseline", "--no-verify")
    assert (env.site / SPEC).read_bytes() == pristine  # the baseline is the release's bytes


def test_plan_a_repair_on_a_hand_patched_target_with_accept_edits(tmp_path, repair_pristine, monkeypatch):
    renv = _repair_workspace(tmp_path, repair_pristine, monkeypatch)
    six = (repair_pristine / SITE_REL / "six.py").read_bytes()
    edit_file(renv.site / "six.py", six.replace(b"def ", b"def  ", 3))
    edited = (renv.site / SPEC).read_bytes() + b"# copied in by scp\n"
    edit_file(renv.site / SPEC, edited)  # sglang, the managed package, patched by hand before any baseline

    async def body(agent: Agent) -> None:
        failed, doc = await agent.call("plan", action="repair", dist="six")
        assert failed and f"{SPEC} (changed)" in doc["error"]["message"], doc
        plan = await agent.ok("plan", action="repair", dist="six", accept_edits=True)
        assert plan["plan"]["command"] == "repair --accept-edits six"
        assert plan["plan"]["adopts"] == {"mode": "accept-edits", "hand_edits": {"local": {SPEC: "changed"}}}
        assert (renv.site / "six.py").read_bytes() != six and not renv.state_dir.exists()
        done = await agent.ok("apply_plan", plan_id=plan["plan"]["id"])
        assert done["ok"] is True and done["changes"][-1]["kind"] == "repair"

    serve(renv.root, body, errlog=tmp_path / "server.log")
    assert (renv.site / "six.py").read_bytes() == six
    assert (renv.site / SPEC).read_bytes() == edited  # accepted as it is, recorded in the baseline
    base = ledger(renv)[0]
    assert base["kind"] == "baseline" and base["extra"]["adopted"] == "accept-edits"
    assert base["extra"]["edits"] == {SPEC: "changed"}


def test_the_core_install_runs_without_the_sdk_and_mcp_says_what_to_install(env, installed_bin):
    """patchkeeper installed without extras (as `uv tool install`) has no mcp: every other verb runs, and
    `patchkeeper mcp` is one line saying which extra to install."""
    run = [str(installed_bin / "patchkeeper"), "-w", str(env.root)]
    python = installed_bin / "python"
    assert subprocess.run([str(python), "-c", "import mcp"], capture_output=True).returncode != 0
    assert subprocess.run([*run, "list", "--json"], capture_output=True).returncode == 0
    proc = subprocess.run([*run, "mcp"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "patchkeeper mcp needs the MCP SDK" in proc.stderr and "patchkeeper[mcp]" in proc.stderr
