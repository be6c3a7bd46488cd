"""The unit as systemd reads it: patchkeeper's effective unit (the drop-in directories of the whole search path
in systemd's order, masking by file name, and systemd's syntax) compared with systemd's own parser
(`systemd-analyze verify --root`, tests/systemd_reference.py) on the same files in a tmp root."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import systemd_reference as systemd

from patchkeeper.checks import unitfiles, units
from patchkeeper.targets.local import LocalTarget
from patchkeeper.workspace import SYSTEMD_UNIT_PATH, TargetConfig

REASON = systemd.why_not()
needs_systemd = pytest.mark.skipif(REASON is not None, reason=REASON or "")
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


@needs_systemd
def test_every_dropin_directory_in_systemds_order_with_masking_by_name(tmp_path):
    systemd.write_tree(tmp_path, SEARCH_PATH_TREE)
    theirs = systemd.loaded(tmp_path, NAME)
    assert theirs.failed is None, theirs.log
    command = ours(tmp_path)
    assert command.files[0] == theirs.fragment
    assert command.files[1:] == theirs.dropins  # the same files, in the order systemd applies them
    assert command.stored == theirs.commands[-1] and "NEXTN" in command.argv
    assert dict(command.env) == theirs.env
    assert command.source.endswith(f"run/systemd/system/{NAME}.d/60-runtime.conf")
    assert (
        str(tmp_path / f"usr/local/lib/systemd/system/{NAME}.d/60-runtime.conf"),
        command.source,
    ) in command.masked


@needs_systemd
def test_status_names_the_runtime_dropin_that_makes_the_command_line(tmp_path, env):
    """The issue's case: a 60-runtime.conf in /run/.../<unit>.d/ runs NEXTN while status said DDTREE."""
    root = tmp_path / "root"
    systemd.write_tree(root, SEARCH_PATH_TREE)
    unit_path = ", ".join(f'"{root}{d}"' for d in SYSTEMD_UNIT_PATH)
    config = env.root / "patchkeeper.toml"
    config.write_text(
        config.read_text()
        .replace(f'unit = "{env.unit}"', f'unit = "{root / LIB}"')
        .replace('package = "sglang"\n', f'package = "sglang"\nunit_path = [{unit_path}]\n', 1)
    )
    doc = json.loads(env.pk("status", "--json").stdout)["exec_start"]
    theirs = systemd.loaded(root, NAME)
    assert doc["files"] == [theirs.fragment, *theirs.dropins]
    assert doc["source"] == str(root / f"run/systemd/system/{NAME}.d/60-runtime.conf")
    assert "--speculative-algorithm NEXTN" in doc["text"] and doc["environment"] == theirs.env
    assert {
        "path": str(root / f"usr/local/lib/systemd/system/{NAME}.d/60-runtime.conf"),
        "by": doc["source"],
    } in doc["masked"]


@needs_systemd
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
def test_dash_prefix_and_template_directories_are_systemds(tmp_path, name, expected_dirs):
    assert unitfiles.dropin_dir_names(name) == expected_dirs
    tree: dict[str, bytes | str] = {f"usr/lib/systemd/system/{name}": "[Service]\nExecStart=/bin/true\n"}
    for i, d in enumerate(reversed(expected_dirs)):  # every directory, each with a file of its own
        tree[f"etc/systemd/system/{d}/{i:02d}.conf"] = f"[Service]\nEnvironment=D{i}=1\n"
    tree[f"run/systemd/system/{expected_dirs[-1]}/00.conf"] = (
        "[Service]\nEnvironment=RUN=1\n"  # masked by /etc's
    )
    systemd.write_tree(tmp_path, tree)
    theirs = systemd.loaded(tmp_path, name)
    assert theirs.failed is None, theirs.log
    command = ours(tmp_path, f"usr/lib/systemd/system/{name}")
    assert command.files[1:] == theirs.dropins and dict(command.env) == theirs.env


# ---- syntax: each case's files, read by systemd and by patchkeeper -----------------------------------
SYNTAX = {
    "bom": {LIB: b"\xef\xbb\xbf[Service]\nExecStart=/bin/true bom\n"},
    "bom-in-a-dropin": {
        LIB: "[Service]\nExecStart=/bin/true a\n",
        f"etc/systemd/system/{NAME}.d/x.conf": b"\xef\xbb\xbf[Service]\nExecStart=\nExecStart=/bin/true b\n",
    },
    "backslash-then-spaces-is-no-continuation": {
        LIB: "[Service]\nExecStart=/bin/true --model-path /m \\   \n  --speculative-algorithm NEXTN\n"
    },
    "comments-inside-a-continuation": {
        LIB: "[Service]\nExecStart=/bin/true a \\\n# --speculative-algorithm X \\\n  b \\\n; c\n  d\n"
    },
    "a-comment-line-ending-in-a-backslash": {LIB: "[Service]\n# note \\\nExecStart=/bin/true d\n"},
    "an-empty-line-ends-a-continuation": {LIB: "[Service]\nExecStart=/bin/true a\\\n\n b\n"},
    "a-continuation-at-the-end-of-the-file": {LIB: "[Service]\nExecStart=/bin/true a \\"},
    "an-even-run-of-backslashes": {LIB: "[Service]\nExecStart=/bin/true a\\\\\\\\\nEnvironment=N=1\n"},
    "quotes": {LIB: '[Service]\nExecStart=/bin/true "a b" \'c d\' x"y z"w "" \'\' "a"b\'c\' "q\\"r"\n'},
    "escapes": {
        LIB: "[Service]\nExecStart=/bin/true \\s \\x41 \\101 \\u00e9 \\t \\\\ \\x41\\x42 \\xc3\\xa9\n"
    },
    "unknown-escapes-kept": {LIB: '[Service]\nExecStart=/bin/true e\\ f \\? "\\;" \\x00 tail\\\n'},
    "semicolons": {LIB: "[Service]\nType=oneshot\nExecStart=/bin/true f1 ; /bin/echo f2 \\; f3 x;y ;\n"},
    "prefix-at": {LIB: "[Service]\nExecStart=-@/bin/true argv0 x\n"},
    "prefix-colon-keeps-variables": {LIB: "[Service]\nEnvironment=X=1\nExecStart=:+/bin/true $X ${X}\n"},
    "prefix-bang-bang": {LIB: "[Service]\nExecStart=!!/bin/true y\n"},
    "plus-then-bang-refused": {LIB: "[Service]\nExecStart=+!/bin/true y\n"},
    "an-empty-execstart-resets": {
        LIB: "[Service]\nExecStart=/bin/true one\n",
        f"etc/systemd/system/{NAME}.d/a.conf": "[Service]\nExecStart=\n",
        f"run/systemd/system/{NAME}.d/b.conf": "[Service]\nExecStart=/bin/true two\n",
    },
    "two-execstarts-refused": {LIB: "[Service]\nExecStart=/bin/true a\nExecStart=/bin/true b\n"},
    "unbalanced-quote-refused": {
        LIB: '[Service]\nExecStart=/bin/true ok\nExecStart=\nExecStart=/bin/true "un\n'
    },
    "bad-section-header-refused": {LIB: "[Service\nExecStart=/bin/true bad\n"},
    "carriage-returns": {LIB: "[Service]\r\nExecStart=/bin/true crlf\r\nEnvironment=A=1\rEnvironment=B=2\r"},
    "spaces-around-keys-and-sections": {LIB: "  [Service]  \n ExecStart = /bin/true  j  \n"},
    "other-sections-are-not-service": {
        LIB: "[Unit]\nExecStart=/bin/true no\n[Service]\nExecStart=/bin/true yes\n"
    },
    "environment": {
        LIB: "[Service]\nExecStart=/bin/true\nEnvironment=\"A=1 2\" C='q r' D=\\x41 E 1B=2 F=\\s\n"
        "Environment=A=3\nEnvironment=G=$A H=%n I=%%\nEnvironment=B=x\\ y J=1\n"
    },
    "an-empty-environment-resets": {
        LIB: "[Service]\nExecStart=/bin/true\nEnvironment=K=1\nEnvironment=\nEnvironment=L=1\n"
    },
    "specifiers": {LIB: "[Service]\nExecStart=/bin/true %n %N %p %i %% 100%%\n"},
}


@needs_systemd
@pytest.mark.parametrize("case", sorted(SYNTAX))
def test_systemds_syntax(tmp_path, case):
    systemd.write_tree(tmp_path, SYNTAX[case])
    theirs = systemd.loaded(tmp_path, NAME)
    command = units.on_target(target_in(tmp_path))
    if theirs.failed:
        assert isinstance(command, units.Command) and command.refused, (theirs.failed, command)
        return
    assert isinstance(command, units.Command), (command, theirs.log)
    assert command.refused is None, (command.refused, theirs.log)
    assert command.stored == theirs.commands[-1], theirs.log
    assert dict(command.env) == theirs.env
    assert command.files[1:] == theirs.dropins


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
