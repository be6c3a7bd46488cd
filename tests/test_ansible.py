"""Ansible with ansible-core against the suite's real sshd on 127.0.0.1, two hosts (ct129, ct200),
each a real sglang venv with a service started by its restart command: an inventory's hosts as
patchkeeper's targets, and the collection's patchkeeper.core.patchset module in playbooks (check mode,
diff mode, a real run, idempotence, state: absent, a failing verification that fails the task).

The hosts, the inventory and the workspace are set up once for the module (Ansible runs are slow);
each test starts from fresh copies of the two venvs."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import DRAFT, REPO, Env, copy_venv, every_path, tree
from helpers import FAKE, Service, free_port
from sshd import accepted, sshd  # noqa: F401 (sshd is a fixture)

from patchkeeper.change.rollout import PREVIOUS_FAILS
from patchkeeper.workspace import default_dropin

HOSTS = ("ct129", "ct200")
BIN = Path(sys.executable).parent


@dataclass
class Lab:
    root: Path  # the module's tmp dir
    env: Env  # the workspace (its `local` venv is unused)
    inventory: Path
    venvs: dict[str, Path]
    units: dict[str, Path]
    sshd: object
    ansible_env: dict[str, str]

    def playbook(self, tasks: str, *args: str, check: int = 0) -> tuple[dict[str, list[dict]], str]:
        """Run a play of `tasks` on both hosts; each host's task results, and the output."""
        play = self.root / "play.yml"
        play.write_text(f"- hosts: gpus\n  gather_facts: false\n  tasks:\n{tasks}")
        proc = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", str(self.inventory), str(play), *args],
            capture_output=True,
            text=True,
            env=self.ansible_env,
            cwd=self.env.root,
        )
        assert proc.returncode == check, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return _results(proc.stdout), proc.stdout

    def fresh(self, pristine: Path) -> None:
        for host in HOSTS:
            shutil.rmtree(self.venvs[host], ignore_errors=True)
            copy_venv(pristine, self.venvs[host])
            shutil.copy(REPO / "demo" / "sglang-qwen.service", self.units[host])
            shutil.rmtree(
                default_dropin(str(self.units[host])).rpartition("/")[0], ignore_errors=True
            )  # a test's drop-in


def _results(out: str) -> dict[str, list[dict]]:
    """The minimal callback's `host | STATUS => {json}` blocks: each host's task results in order."""
    found: dict[str, list[dict]] = {}
    for m in re.finditer(r"^(\S+) \| (\w+)(?:!)? => (\{.*?^\})", out, re.M | re.S):
        found.setdefault(m.group(1), []).append(dict(json.loads(m.group(3)), _status=m.group(2)))
    return found


@pytest.fixture(scope="module")
def lab(tmp_path_factory, pristine_venv, sshd):  # noqa: F811
    root = tmp_path_factory.mktemp("ansible")
    known = root / "known_hosts"
    known.write_text(sshd.host_key_line())
    services, venvs, units, hostvars = [], {}, {}, {}
    for host in HOSTS:
        venvs[host] = root / f"venv-{host}"
        units[host] = root / f"unit-{host}" / "sglang-qwen.service"
        units[host].parent.mkdir()
        svc = Service(free_port(), root / f"{host}.pid", root / f"{host}.log")
        services.append(svc)
        restart = shlex.join(
            [
                sys.executable,
                str(FAKE),
                "start",
                "--state",
                str(units[host]),
                "--state",
                default_dropin(str(units[host])),
                "--port",
                str(svc.port),
                "--pidfile",
                str(svc.pidfile),
                "--log",
                str(svc.log),
                "--default",
                "healthy",
                "--when",
                "NEXTN=" + ("degenerate" if host == "ct200" else "healthy"),
            ]
        )
        hostvars[host] = {
            "patchkeeper": {
                "python": f"{venvs[host]}/bin/python",
                "files": {"unit": str(units[host])},
                "service": {"restart": restart, "base_url": svc.base_url},
            }
        }
    inventory = root / "hosts.yml"
    inventory.write_text(
        json.dumps(
            {
                "gpus": {
                    "vars": {
                        "ansible_host": "127.0.0.1",
                        "ansible_port": sshd.port,
                        "ansible_user": "root",
                        "ansible_ssh_private_key_file": str(sshd.client_key),
                        "ansible_python_interpreter": sys.executable,
                        "ansible_ssh_common_args": f"-o UserKnownHostsFile={known} -o StrictHostKeyChecking=yes",
                    },
                    "hosts": hostvars,
                },
                "others": {"hosts": {"db1": {"ansible_host": "127.0.0.1"}}},
            }
        )
    )  # db1: no target
    ws = root / "ws"
    shutil.copytree(REPO / "patchsets", ws / "patchsets")
    (ws / "patchkeeper.toml").write_text(
        f'inventory = "{inventory}"\n[defaults]\npackage = "sglang"\n[defaults.vars]\ndraft_model_path = "{DRAFT}"\n'
        "[defaults.service]\nready_timeout = 5\nrestart_timeout = 20\nmatch_unit = false\n"
        "[defaults.service.smoke]\nmax_tokens = 24\ntimeout = 3\nmin_tokens = 16\nmin_tokens_per_s = 20\n"
    )
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    ansible_env = {
        **os.environ,
        "HOME": str(home),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO),
        "ANSIBLE_STDOUT_CALLBACK": "minimal",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(root / "cp"),
        "ANSIBLE_LOCAL_TEMP": str(root / "tmp"),
        "ANSIBLE_HOME": str(root / "ansible"),
        "PATCHKEEPER_WORKSPACE": str(ws),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    yield Lab(
        root, Env(ws, root / "venv-local", root / "unit-local"), inventory, venvs, units, sshd, ansible_env
    )
    for svc in services:
        svc.stop()


@pytest.fixture
def hosts(lab, pristine_venv):
    lab.fresh(pristine_venv)
    (Path(os.environ["HOME"]) / ".ssh").mkdir(mode=0o700, exist_ok=True)  # for patchkeeper's own SSH
    (Path(os.environ["HOME"]) / ".ssh" / "known_hosts").write_text(lab.sshd.host_key_line())
    return lab


def _stacks(lab: Lab) -> dict[str, tuple[str | None, list[str]]]:
    """Each host's state id and stack, as `patchkeeper status --all` reads them over its own SSH."""
    doc = json.loads(lab.env.pk("status", "--all", "--json").stdout)
    return {
        h: (d["state"]["id"], [p["name"] for p in d["state"]["stack"]]) if d["state"] else (None, [])
        for h, d in doc.items()
    }


def _stack(lab: Lab, host: str) -> list[str]:
    """A host's applied patch sets, from its ledger's newest entry (read from its state dir)."""
    entries = sorted((lab.venvs[host] / ".patchkeeper" / "ledger").glob("*.json"))
    return [p["name"] for p in json.loads(entries[-1].read_text())["after"]["stack"]] if entries else []


TASK = "    - patchkeeper.core.patchset:\n        name: {name}\n        state: {state}\n"


def test_the_module_in_playbooks(hosts):
    lab = hosts
    pristine = {h: tree(lab.venvs[h]) for h in HOSTS}
    untouched = {h: every_path(lab.venvs[h], lab.units[h].parent) for h in HOSTS}  # state dirs, pycs, mtimes

    # check mode with diffs: the plan, nothing changed, nothing written at all (no state dir either)
    got, out = lab.playbook(TASK.format(name="ddtree", state="present"), "--check", "--diff")
    for host in HOSTS:
        (result,) = got[host]
        assert result["_status"] == "CHANGED" and result["state_after"], out
        assert result["msg"].startswith("dry run: would change 18 file(s)")
        assert tree(lab.venvs[host]) == pristine[host]
        assert every_path(lab.venvs[host], lab.units[host].parent) == untouched[host]
        assert not (lab.venvs[host] / ".patchkeeper").exists()
    assert (
        f"--- before: {default_dropin(str(lab.units['ct129']))}" in out
    )  # each file's diff, rendered by Ansible
    assert re.search(r"^\+.*--speculative-algorithm DDTREE", out, re.M)

    # a real run over Ansible's connection: no SSH login of patchkeeper's own
    logins = accepted(lab.sshd)
    got, out = lab.playbook(TASK.format(name="ddtree", state="present"))
    assert accepted(lab.sshd) - logins <= 1  # Ansible's one master connection (ControlPersist), shared
    assert all(
        got[h][0]["_status"] == "CHANGED" and got[h][0]["msg"].startswith("changed and verified")
        for h in HOSTS
    ), out
    after = {h: got[h][0]["state_after"] for h in HOSTS}
    assert _stacks(lab) == {h: (after[h], ["ddtree"]) for h in HOSTS}  # the CLI reads the same ledger
    assert (lab.env.root / "snapshots" / "ct129" / "manifest.txt").is_file()  # mirrored in the workspace

    # idempotent (a second run changes nothing); then a switch whose verification fails on ct200:
    # rolled back there by itself, and the task fails
    got, out = lab.playbook(
        TASK.format(name="ddtree", state="present") + TASK.format(name="nextn", state="present"), check=2
    )
    assert [r["_status"] for r in got["ct129"]] == ["SUCCESS", "CHANGED"], out
    assert [r["_status"] for r in got["ct200"]] == ["SUCCESS", "FAILED"], out
    assert got["ct129"][0]["state_before"] == got["ct129"][0]["state_after"] == after["ct129"]
    failed = got["ct200"][1]
    assert failed["msg"].startswith("patchkeeper: FAILED and rolled back (verification: degenerate)")
    assert failed["rc"] == 3 and _stack(lab, "ct200") == ["ddtree"]

    # absent: nextn goes from ct129 (back to its baseline, byte for byte); ct200 has none of it
    got, out = lab.playbook(TASK.format(name="nextn", state="absent"))
    assert got["ct129"][0]["_status"] == "CHANGED" and got["ct200"][0]["_status"] == "SUCCESS"
    assert tree(lab.venvs["ct129"]) == pristine["ct129"] and _stack(lab, "ct129") == []
    assert _stack(lab, "ct200") == ["ddtree"]


def test_an_error_fails_the_task_with_its_one_line(hosts):
    got, _ = hosts.playbook(TASK.format(name="nosuchset", state="present"), "-l", "ct129", check=2)
    (result,) = got["ct129"]
    assert result["msg"].startswith("patchkeeper: error: ") and "nosuchset" in result["msg"]
    assert "\n" not in result["msg"] and result["rc"] == 2


def test_a_failed_apply_gives_its_verdict_and_the_ledger_keeps_the_play_and_task(hosts):
    lab = hosts
    with lab.units["ct200"].open(
        "a"
    ) as f:  # the fake service degenerates on ct200 whenever NEXTN is in its unit
        f.write("# NEXTN in this comment: every code state of ct200 fails verification\n")
    task = "    - name: roll out ddtree\n      patchkeeper.core.patchset:\n        name: ddtree\n        state: present\n"
    got, out = lab.playbook(task, check=2)
    ok, failed = got["ct129"][0], got["ct200"][0]
    assert ok["_status"] == "CHANGED" and "verdict" not in ok, out
    assert failed["_status"] == "FAILED" and failed["msg"].startswith(
        "patchkeeper: FAILED and rolled back"
    ), out
    assert PREVIOUS_FAILS in failed["msg"] and "\n" not in failed["msg"], failed["msg"]
    assert (failed["verdict"], failed["previous_state_fails"], failed["rolled_back"]) == (
        PREVIOUS_FAILS,
        True,
        "degenerate",
    )

    log = lab.env.pk("log", "-t", "ct129").stdout.splitlines()
    assert all(
        f"via ansible {lab.root / 'play.yml'}:" in line and "task 'roll out ddtree'" in line for line in log
    )
    entries = json.loads(lab.env.pk("log", "--all", "--json").stdout)["entries"]
    assert {e["target"] for e in entries} == {"ct129", "ct200"}
    assert all(
        e["origin"]["via"] == "ansible"
        and e["origin"]["play"] == "gpus"
        and e["origin"]["task"] == "roll out ddtree"
        for e in entries
    ), entries


def test_inventory_hosts_are_targets_and_its_groups_are_groups(hosts):
    lab = hosts
    proc = lab.env.pk("status", "--all")
    assert "ct129" in proc.stdout and "ct200" in proc.stdout and "db1" not in proc.stdout
    proc = lab.env.pk("apply", "ddtree", "-g", "gpus", "--no-verify")
    assert "changed: 18 file(s)" in proc.stdout and "2 at a time" in proc.stdout
    assert _stack(lab, "ct200") == ["ddtree"]
    # --inventory on the command line wins over the file's; a broken one is one line
    bad = lab.root / "broken.yml"
    bad.write_text("gpus: [unclosed\n")
    proc = lab.env.pk("--inventory", str(bad), "status", "--all", check=2)
    assert (
        proc.stderr.startswith("patchkeeper: error: ansible-inventory cannot read")
        and proc.stderr.count("\n") == 2
    )


def test_the_collection_builds(tmp_path):
    collection = REPO / "ansible_collections" / "patchkeeper" / "core"
    subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path), str(collection)],
        check=True,
        capture_output=True,
        env={**os.environ, "ANSIBLE_HOME": str(tmp_path / "ansible")},
    )
    (built,) = tmp_path.glob("patchkeeper-core-*.tar.gz")
    import tarfile

    names = tarfile.open(built).getnames()
    assert "plugins/action/patchset.py" in names and "plugins/modules/patchset.py" in names
