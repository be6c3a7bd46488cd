"""The unit as systemd reads it: patchkeeper's effective unit (the drop-in directories of the whole search path
in systemd's order, the type's own `service.d`, masking by file name) compared with a live systemd manager
(tests/livesystemd.py) on the same files in a tmp root. A manager of its own per test: the type-level
`service.d` directory applies to every unit, which the shared corpus of tests/test_units_live.py cannot
hold; systemd's syntax is compared there."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from livesystemd import write_tree

from patchkeeper.checks import unitfiles, units
from patchkeeper.checks.manager import parse_show
from patchkeeper.targets.local import LocalTarget
from patchkeeper.workspace import SYSTEMD_UNIT_PATH, TargetConfig

NAME = "sglang-qwen.service"
LIB = f"usr/lib/systemd/system/{NAME}"
PY = "/usr/bin/python3 -m sglang.launch_server --model-path /m"


def target_in(root: Path, unit_rel: str = LIB) -> LocalTarget:
    """A local target whose systemd search path is systemd's default below `root`."""
    unit = str(root / unit_rel)
    return LocalTarget(
        TargetConfig(
            name="t",
            python=sys.executable,
            package="sglang",
            files={"unit": unit, "dropin": f"{unit}.d/50-patchkeeper.conf"},
            unit_path=tuple(f"{root}{d}" for d in SYSTEMD_UNIT_PATH),
        )
    )


def ours(root: Path, unit_rel: str = LIB) -> units.Command:
    command = units.on_target(target_in(root, unit_rel))
    assert isinstance(command, units.Command), command
    return command


SEARCH_PATH_TREE: dict[str, bytes | str] = {
    LIB: f"[Unit]\nDescription=sglang\n[Service]\nEnvironment=BASE=1\nExecStart={PY} --speculative-algorithm EAGLE\n",
    f"etc/systemd/system/{NAME}.d/50-patchkeeper.conf": f"[Service]\nExecStart=\nExecStart={PY} --speculative-algorithm DDTREE\n",
    f"run/systemd/system/{NAME}.d/60-runtime.conf": f"[Service]\nExecStart=\nExecStart={PY} --speculative-algorithm NEXTN\n",
    f"usr/local/lib/systemd/system/{NAME}.d/60-runtime.conf": "[Service]\nEnvironment=MASKED=1\n",
    "etc/systemd/system/sglang-.service.d/10-dash.conf": "[Service]\nEnvironment=DASH=1\n",
    "usr/lib/systemd/system/service.d/05-every-service.conf": "[Service]\nEnvironment=EVERY=1\n",
    f"etc/systemd/system.control/{NAME}.d/50-cpu.conf": "[Service]\nEnvironment=CONTROL=1\n",
    f"lib/systemd/system/{NAME}.d/70-null.conf": b"->/dev/null",
    f"usr/lib/systemd/system/{NAME}.d/70-null.conf": "[Service]\nEnvironment=UNDER_NULL=1\n",
    f"etc/systemd/system/{NAME}.d/80-notes.txt": "[Service]\nExecStart=\n",
    f"etc/systemd/system/{NAME}.d/.90-hidden.conf": "[Service]\nExecStart=\n",
}


def _argv(exec_start: str) -> tuple[str, ...] | None:
    """The last command's argv of `systemctl show`'s ExecStart (joined with spaces there), as
    checks/manager.py parses it."""
    command = parse_show(f"ExecStart={exec_start}").command
    return tuple(command.argv_text.split()) if command is not None else None


def loaded(manager, unit: str) -> tuple[str, tuple[str, ...], dict[str, str], tuple[str, ...] | None]:
    """What the live manager loaded for `unit`: the fragment, the drop-ins in the order applied, the
    environment and the argv of ExecStart (systemd joins it with spaces: these tests' words have none)."""
    manager.daemon_reload()
    shown = manager.show(unit, "LoadState", "FragmentPath", "DropInPaths", "Environment", "ExecStart")
    assert shown["LoadState"] == "loaded", (shown, manager.log())
    env = dict(word.partition("=")[::2] for word in shown["Environment"].split())
    return (
        shown["FragmentPath"],
        tuple(shown["DropInPaths"].split()),
        env,
        _argv(shown["ExecStart"]),
    )


def test_every_dropin_directory_in_systemds_order_with_masking_by_name(live_systemd):
    root = live_systemd.root
    write_tree(root, SEARCH_PATH_TREE)
    fragment, dropins, env, argv = loaded(live_systemd, NAME)
    command = ours(root)
    assert command.files[0] == fragment
    assert command.files[1:] == dropins  # the same files, in the order systemd applies them
    assert command.argv == argv and "NEXTN" in command.argv
    assert dict(command.env) == env
    assert command.source.endswith(f"run/systemd/system/{NAME}.d/60-runtime.conf")
    assert (
        str(root / f"usr/local/lib/systemd/system/{NAME}.d/60-runtime.conf"),
        command.source,
    ) in command.masked


def test_status_names_the_runtime_dropin_that_makes_the_command_line(live_systemd, env):
    """The issue's case: a 60-runtime.conf in /run/.../<unit>.d/ runs NEXTN while status said DDTREE."""
    root = live_systemd.root
    write_tree(root, SEARCH_PATH_TREE)
    unit_path = ", ".join(f'"{root}{d}"' for d in SYSTEMD_UNIT_PATH)
    config = env.root / "patchkeeper.toml"
    config.write_text(
        config.read_text()
        .replace(f'unit = "{env.unit}"', f'unit = "{root / LIB}"')
        .replace('package = "sglang"\n', f'package = "sglang"\nunit_path = [{unit_path}]\n', 1)
    )
    doc = json.loads(env.pk("status", "--json").stdout)["exec_start"]
    fragment, dropins, theirs_env, argv = loaded(live_systemd, NAME)
    assert doc["files"] == [fragment, *dropins]
    assert doc["source"] == str(root / f"run/systemd/system/{NAME}.d/60-runtime.conf")
    assert "--speculative-algorithm NEXTN" in doc["text"] and doc["environment"] == theirs_env
    assert tuple(doc["argv"]) == argv
    assert {
        "path": str(root / f"usr/local/lib/systemd/system/{NAME}.d/60-runtime.conf"),
        "by": doc["source"],
    } in doc["masked"]


@pytest.mark.parametrize(
    "name, expected_dirs",
    [
        ("a-b-c.service", ["a-b-c.service.d", "a-b-.service.d", "a-.service.d"]),
        (
            "a-b-c@x-y.service",
            [
                "a-b-c@x-y.service.d",
                "a-b-c@.service.d",
                "a-b-@x-y.service.d",
                "a-b-@.service.d",
                "a-@x-y.service.d",
                "a-@.service.d",
            ],
        ),
        ("a--b.service", ["a--b.service.d", "a--.service.d", "a-.service.d"]),
        ("-a.service", ["-a.service.d"]),
    ],
)
def test_dash_prefix_and_template_directories_are_systemds(live_systemd, name, expected_dirs):
    assert unitfiles.dropin_dir_names(name) == expected_dirs
    root = live_systemd.root
    tree: dict[str, bytes | str] = {f"usr/lib/systemd/system/{name}": "[Service]\nExecStart=/bin/true\n"}
    for i, d in enumerate(reversed(expected_dirs)):  # every directory, each with a file of its own
        tree[f"etc/systemd/system/{d}/{i:02d}.conf"] = f"[Service]\nEnvironment=D{i}=1\n"
    tree[f"run/systemd/system/{expected_dirs[-1]}/00.conf"] = (
        "[Service]\nEnvironment=RUN=1\n"  # masked by /etc's
    )
    write_tree(root, tree)
    _, dropins, env, _ = loaded(live_systemd, name)
    command = ours(root, f"usr/lib/systemd/system/{name}")
    assert command.files[1:] == dropins and dict(command.env) == env


def test_the_effective_argv_expands_variables_as_systemd_does_at_start():
    command = units.effective(
        [
            (
                "u",
                '[Service]\nEnvironment=ARGS="-a -b" ONE=x\n'
                "ExecStart=/bin/true $ARGS ${ONE}y $$HOME ${ARGS}\n",
            )
        ]
    )
    assert command is not None and command.argv == ("/bin/true", "-a", "-b", "xy", "$HOME", "-a -b")
    kept = units.effective([("u", "[Service]\nEnvironment=X=1\nExecStart=:/bin/true $X\n")])
    assert kept is not None and kept.argv == ("/bin/true", "$X")  # ':' turns expansion off
