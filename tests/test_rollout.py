"""Many targets in one command: [defaults] and [groups] in patchkeeper.toml, -t repeated, -g, and a
rollout (apply/rollback over several targets, --serial, --max-fail) that stops at the first target
whose service fails verification: real venvs, real HTTP services started by each restart command."""

from __future__ import annotations

import json
import shlex
import shutil
import sys

import pytest
from conftest import DRAFT, REPO, Env, copy_venv, tree
from helpers import FAKE, Service, free_port

from patchkeeper.workspace import default_dropin

NAMES = ("a", "b", "c")


@pytest.fixture
def three(tmp_path, pristine_venv):
    """A workspace of three local targets whose [service] comes from [defaults.service] (restart
    and base_url per target); each service degenerates under ddtree when its target is told so."""
    started: list[Service] = []
    root = tmp_path / "ws"
    shutil.copytree(REPO / "patchsets", root / "patchsets")

    def make(bad: tuple[str, ...] = ()) -> dict[str, Env]:
        envs, toml = {}, ""
        for name in NAMES:
            venv = copy_venv(pristine_venv, tmp_path / f"venv-{name}")
            unit = tmp_path / f"unit-{name}" / "sglang-qwen.service"
            unit.parent.mkdir()
            shutil.copy(REPO / "demo" / "sglang-qwen.service", unit)
            svc = Service(free_port(), tmp_path / f"{name}.pid", tmp_path / f"{name}.log")
            started.append(svc)
            restart = shlex.join(
                [
                    sys.executable,
                    str(FAKE),
                    "start",
                    "--state",
                    str(unit),
                    "--state",
                    default_dropin(str(unit)),
                    "--port",
                    str(svc.port),
                    "--pidfile",
                    str(svc.pidfile),
                    "--log",
                    str(svc.log),
                    "--default",
                    "healthy",
                    "--when",
                    f"DDTREE={'degenerate' if name in bad else 'healthy'}",
                ]
            )
            toml += (
                f'\n[targets.{name}]\npython = "{venv}/bin/python"\n[targets.{name}.files]\nunit = "{unit}"\n'
                f'[targets.{name}.service]\nrestart = {json.dumps(restart)}\nbase_url = "{svc.base_url}"\n'
            )
            envs[name] = Env(root, venv, unit)
        (root / "patchkeeper.toml").write_text(
            f'[defaults]\npackage = "sglang"\n[defaults.vars]\ndraft_model_path = "{DRAFT}"\n'
            '[defaults.service]\nrestart = "false"\nbase_url = "http://127.0.0.1:9"\nready_timeout = 5\n'
            "restart_timeout = 20\nmatch_unit = false\n"
            "[defaults.service.smoke]\nmax_tokens = 24\ntimeout = 3\nmin_tokens = 16\nmin_tokens_per_s = 20\n"
            '\n[groups]\nfirst = ["a", "b"]\n' + toml
        )
        return envs

    yield make
    for svc in started:
        svc.stop()


def _lines(out: str) -> dict[str, str]:
    """The report's one line per target."""
    return {
        line.split("  ")[0]: line.split("  ", 1)[1]
        for line in out.splitlines()
        if line.split("  ")[0] in NAMES
    }


def _stack(env: Env) -> list[str]:
    entries = sorted((env.state_dir / "ledger").glob("*.json")) if env.state_dir.exists() else []
    return [p["name"] for p in json.loads(entries[-1].read_text())["after"]["stack"]] if entries else []


def test_a_rollout_stops_at_the_first_failed_verification(three):
    envs = three(bad=("b",))
    before = {n: tree(e.venv) for n, e in envs.items()}
    proc = envs["a"].pk("apply", "ddtree", "--all", check=3)  # [service]: one target at a time by default
    lines = _lines(proc.stdout)
    assert "1 at a time" in proc.stdout
    assert lines["a"].startswith("changed and verified: ")
    assert lines["b"].startswith("FAILED and rolled back (verification: degenerate)")
    assert lines["c"] == "not attempted"
    assert (
        "    | " in proc.stdout and "verification FAILED (degenerate)" in proc.stdout
    )  # b's own report, indented
    assert "3 target(s): 1 ok, 1 failed, 1 not attempted" in proc.stdout
    assert _stack(envs["a"]) == ["ddtree"] and _stack(envs["b"]) == []
    assert tree(envs["b"].venv) == before["b"]
    assert not envs["c"].state_dir.exists() and tree(envs["c"].venv) == before["c"]  # never touched

    # a failure tolerated: c is changed too; a is already there
    proc = envs["a"].pk("apply", "ddtree", "--all", "--max-fail", "1", check=3)
    lines = _lines(proc.stdout)
    assert lines["a"] == "unchanged: ddtree is already applied"
    assert lines["b"].startswith("FAILED and rolled back") and lines["c"].startswith("changed and verified")
    assert _stack(envs["c"]) == ["ddtree"]

    # back to the baseline on a group, two at a time: a changed and verified, b there already
    proc = envs["a"].pk("rollback", "--to", "baseline", "-g", "first", "--serial", "2")
    lines = _lines(proc.stdout)
    assert set(lines) == {"a", "b"} and "2 at a time" in proc.stdout
    assert (
        lines["a"].startswith("changed and verified") and lines["b"] == "unchanged: already in state baseline"
    )
    assert tree(envs["a"].venv) == before["a"]


def test_repeated_t_groups_and_defaults(three):
    envs = three()
    env = envs["a"]
    # -t twice on a verb of one target is refused, not the last one silently used
    assert (
        "snapshot works on one target: -t given 2 times"
        in env.pk("snapshot", "--name", "x", "-t", "a", "-t", "b", check=2).stderr
    )
    proc = env.pk("apply", "nextn", "-t", "a", "-t", "c", "--no-verify")
    assert set(_lines(proc.stdout)) == {"a", "c"}  # without verification: both at once
    assert "2 at a time" in proc.stdout
    assert _stack(envs["a"]) == ["nextn"] and _stack(envs["c"]) == ["nextn"] and _stack(envs["b"]) == []
    doc = json.loads(env.pk("status", "-g", "first", "--json").stdout)
    assert sorted(doc) == ["a", "b"] and doc["a"]["state"]["stack"][0]["name"] == "nextn"
    assert "unknown group 'nope' (known: first)" in env.pk("status", "-g", "nope", check=2).stderr
    assert "--all takes every target" in env.pk("status", "--all", "-t", "a", check=2).stderr
    # a dry run over all changes nothing and plans for each
    proc = env.pk("apply", "ddtree", "--all", "--dry-run")
    assert all(line.startswith(("dry run: ", "unchanged")) for line in _lines(proc.stdout).values())
    assert _stack(envs["b"]) == []
    # a target overrides one key of [defaults.service]: a wrong restart fails only where it is set
    toml = env.root / "patchkeeper.toml"
    toml.write_text(
        toml.read_text().replace(
            "[targets.b.service]\nrestart = ", '[targets.b.service]\nrestart = "exit 1"\n#'
        )
    )
    proc = env.pk("apply", "ddtree", "-t", "b", "-t", "c", check=3)
    assert _lines(proc.stdout)["b"].startswith("FAILED and rolled back (verification: restart)")
    assert _lines(proc.stdout)["c"] == "not attempted"


def test_bad_defaults_and_groups_are_refused_at_once(tmp_path):
    (tmp_path / "patchkeeper.toml").write_text(
        '[defaults]\npackage = "sglang"\nssh = "x"\n[groups]\ng = ["nope"]\nh = "a"\n'
        '[targets.a]\npython = "/usr/bin/python3"\n'
    )
    proc = Env(tmp_path, tmp_path, tmp_path / "u").pk("status", check=2)
    assert "[defaults] has unknown key 'ssh'" in proc.stderr and "[groups] h must be a list" in proc.stderr
    assert "group g names unknown target(s): nope" in proc.stderr
    assert proc.stderr.count("\n") == 2  # one line and its hint
