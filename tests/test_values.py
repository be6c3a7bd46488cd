"""Values written into a unit: each var checked against the type its patch set declares before anything
changes, written with systemd's quoting (proved with systemd's own parser), `python` the target's own
interpreter by default; one drop-in, one owner; `status` says when the drop-in is out of date."""

from __future__ import annotations

import itertools
import json

import pytest
import systemd_reference as systemd
from conftest import DRAFT

from patchkeeper.patchset import unitsyntax, varspec

REASON = systemd.why_not()


def set_vars(env, **values: str) -> None:
    """Lines added to [targets.local.vars] of the workspace's patchkeeper.toml (TOML values as written)."""
    config = env.root / "patchkeeper.toml"
    lines = "".join(f"{k} = {v}\n" for k, v in values.items())
    config.write_text(config.read_text().replace("[targets.local.vars]\n", "[targets.local.vars]\n" + lines))


def stack(env) -> list[str]:
    state = json.loads(env.pk("status", "--json").stdout)["state"]
    return [f"{p['name']}@{p['version']}" for p in state["stack"]] if state else []


def add_patchset(env, name: str, group: str, files: dict[str, str], roles: str) -> None:
    directory = env.root / "patchsets" / name
    directory.mkdir()
    (directory / "patchset.toml").write_text(
        f'name = "{name}"\nversion = "1.0.0"\npackage = "sglang"\npackage_version = "==0.5.23"\n'
        f'group = "{group}"\n\n[files]\n{roles}\n'
    )
    for fname, text in files.items():
        (directory / fname).write_text(text)


# ---- one drop-in, one owner ---------------------------------------------------------------------------
def test_a_second_patch_set_writing_the_same_dropin_is_refused_and_its_own_dropin_works(baselined):
    env = baselined
    add_patchset(
        env,
        "nccl-tuning",
        "tuning",
        {"dropin.conf": "[Service]\nEnvironment=NCCL_DEBUG=INFO\n"},
        'dropin = "dropin.conf"',
    )
    env.pk("apply", "dflash")
    before = env.snapshot()
    proc = env.pk("apply", "nccl-tuning", check=2)
    error = proc.stderr.splitlines()[0]
    assert "dflash@3.1.0" in error and "nccl-tuning@1.0.0" in error and str(env.dropin) in error
    assert (
        "hint: give nccl-tuning a drop-in of its own" in proc.stderr and "60-nccl-tuning.conf" in proc.stderr
    )
    assert env.snapshot() == before and stack(env) == ["dflash@3.1.0"]
    assert "--speculative-algorithm DFLASH" in env.dropin.read_text()

    # the hint, followed: its own role, mapped to its own drop-in beside the patch sets' one
    toml = env.root / "patchsets" / "nccl-tuning" / "patchset.toml"
    toml.write_text(toml.read_text().replace('dropin = "dropin.conf"', 'nccl-tuning_dropin = "dropin.conf"'))
    own = env.dropin.parent / "60-nccl-tuning.conf"
    config = env.root / "patchkeeper.toml"
    config.write_text(config.read_text() + f'nccl-tuning_dropin = "{own}"\n')
    env.pk("apply", "nccl-tuning")
    assert stack(env) == ["dflash@3.1.0", "nccl-tuning@1.0.0"]
    effective = json.loads(env.pk("status", "--json").stdout)["exec_start"]
    assert effective["environment"]["NCCL_DEBUG"] == "INFO" and "DFLASH" in effective["text"]
    assert effective["files"][-2:] == [str(env.dropin), str(own)]


# ---- values checked before anything changes --------------------------------------------------------
@pytest.mark.parametrize(
    "values, said",
    [
        (
            {"model_path": '"/m\\nExecStartPre=/bin/touch /tmp/pwned"'},
            "holds '\\n': a newline or control character",
        ),
        ({"model_path": '"/d\\u0007"'}, "holds '\\x07'"),
        ({"port": "12345678901234567890123456789012345678"}, "is outside int 1..65535"),
        ({"port": '"80 --enable-evil"'}, "is not a whole number"),
        ({"host": '"0.0.0.0 --x"'}, "is not one word"),
        ({"model_path": '"models/qwen"'}, "is not an absolute path"),
        ({"model_path": '"/srv/sglang\\\\"'}, "ends in a backslash"),
    ],
)
def test_a_value_that_does_not_fit_its_type_is_refused_before_anything_changes(env, values, said):
    set_vars(env, **values)
    before = env.snapshot()
    proc = env.pk("apply", "dflash", check=2)
    assert said in proc.stderr and proc.stderr.startswith("patchkeeper: error: dflash@3.1.0: ")
    assert len(proc.stderr.splitlines()) == 2 and "nothing was changed" in proc.stderr  # the error, its hint
    assert env.snapshot() == before and not env.dropin.exists()
    assert not (env.state_dir / "ledger").exists() or stack(env) == []


def test_an_inventory_hosts_vars_take_the_same_check(env, tmp_path):
    inventory = tmp_path / "hosts.json"
    inventory.write_text(
        json.dumps(
            {
                "gpus": {
                    "hosts": {
                        "gpu1": {
                            "ansible_connection": "local",
                            "patchkeeper": {
                                "python": f"{env.venv}/bin/python",
                                "package": "sglang",
                                "files": {"unit": str(env.unit)},
                                "vars": {
                                    "draft_model_path": DRAFT,
                                    "model_path": "/m\n[Service]\nExecStartPre=/bin/sh -c id",
                                },
                            },
                        }
                    }
                }
            }
        )
    )
    before = env.snapshot()
    proc = env.pk("--inventory", str(inventory), "apply", "-t", "gpu1", "dflash", check=2)
    assert "model_path = '/m\\n[Service]" in proc.stderr and "holds '\\n'" in proc.stderr
    assert "(from [targets.gpu1.vars])" in proc.stderr and env.snapshot() == before


def test_a_patchset_toml_whose_package_version_is_a_number_is_one_line(env):
    toml = env.root / "patchsets" / "nextn" / "patchset.toml"
    toml.write_text(toml.read_text().replace('package_version = "==0.5.23"', "package_version = 5"))
    proc = env.pk("show", "nextn", check=2)
    assert "package_version must be a string" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
@pytest.mark.parametrize("kind", ["path", "text"])
def test_no_value_a_type_accepts_makes_a_continuation_line(kind):
    """Any value the type check lets through, written raw at the end of a line (a key systemd takes
    literally, such as WorkingDirectory=), leaves the next line to itself: its ExecStart= stays."""
    pieces = ["/srv", "/sglang", "\\", "\\\\", " ", "x", "%", "$", '"', "'"]
    tried = accepted = 0
    for n in range(1, 5):
        for combo in itertools.product(pieces, repeat=n):
            value = "/" + "".join(combo)
            tried += 1
            if varspec.VarType(kind).problem(value) is not None:
                continue
            accepted += 1
            parsed = unitsyntax.parse(f"[Service]\nWorkingDirectory={value}\nExecStart=/bin/true\n")
            keys = [(st.key, st.value) for st in parsed.settings]
            assert keys[-1] == ("ExecStart", "/bin/true") and keys[0][0] == "WorkingDirectory", (value, keys)
    assert 0 < accepted < tried  # some values are refused (a trailing backslash), most pass
    assert varspec.VarType(kind).problem("/srv/sglang\\") is not None
    assert varspec.VarType(kind).problem("/srv/sglang\\\\") is None  # an even run escapes itself


def test_values_are_written_with_systemds_quoting_as_systemd_reads_them(baselined, tmp_path):
    env = baselined
    model = '/models/Qwen 27B "q" back\\slash 100%'
    set_vars(env, model_path=json.dumps(model), tp_size="4")
    env.pk("apply", "dflash")
    text = env.dropin.read_text()
    assert '--model-path "/models/Qwen 27B \\"q\\" back\\\\slash 100%%"' in text
    root = tmp_path / "root"
    systemd.write_tree(
        root,
        {
            "etc/systemd/system/sglang-qwen.service": env.unit.read_bytes(),
            "etc/systemd/system/sglang-qwen.service.d/50-patchkeeper.conf": env.dropin.read_bytes(),
        },
    )
    theirs = systemd.loaded(root, "sglang-qwen.service")
    assert theirs.failed is None, theirs.log
    argv = theirs.commands[-1]
    assert argv[argv.index("--model-path") + 1] == model  # one argument, exactly the value
    ours = json.loads(env.pk("status", "--json").stdout)["exec_start"]["argv"]
    assert ours[ours.index("--model-path") + 1] == model and ours[ours.index("--tp-size") + 1] == "4"


# ---- the interpreter ------------------------------------------------------------------------------
def test_python_defaults_to_the_targets_own_interpreter_and_another_is_warned_about(baselined):
    env = baselined
    env.pk("apply", "nextn")
    assert f"\nExecStart={env.venv}/bin/python -m sglang.launch_server " in env.dropin.read_text()
    other = "/opt/other-env/bin/python3"
    set_vars(env, python=json.dumps(other))
    proc = env.pk("apply", "dflash")
    assert (
        f"warning: dflash@3.1.0 makes the service run {other} ({{{{ python }}}}), not the target's interpreter "
        f"{env.venv}/bin/python"
    ) in proc.stdout
    assert f"ExecStart={other} -m sglang.launch_server" in env.dropin.read_text()


# ---- status after a var changed ---------------------------------------------------------------------
def test_status_says_the_dropin_is_out_of_date_and_what_apply_would_write(baselined):
    env = baselined
    env.pk("apply", "dflash")
    assert "out of date" not in env.pk("status").stdout
    set_vars(env, port="30001")
    out = env.pk("status").stdout
    assert (
        f"out of date: {env.dropin} (role dropin of dflash@3.1.0) is not what the workspace renders now: "
        "port (30000 -> 30001) changed since it was applied; `patchkeeper apply dflash` would write:"
    ) in out
    assert "  +ExecStart=" in out and "--port 30001" in out and "  -ExecStart=" in out
    doc = json.loads(env.pk("status", "--json").stdout)["out_of_date"]
    assert doc[0]["vars"] == {"port": ["30000", "30001"]} and "--port 30001" in doc[0]["would_write"]
    env.pk("apply", "dflash")
    assert "out of date" not in env.pk("status").stdout and "--port 30001" in env.dropin.read_text()
