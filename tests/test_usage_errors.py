"""A usage error (an unknown option or verb, a missing argument or option value, a bad value) is said as
every error is: `patchkeeper: error: ...` and `  hint: ...` naming a command that runs, exit 2, on every
verb. The cases are generated from the verbs' own parameters and run through the group's main in this
process (what the console script calls: 159 processes cost 24 s of CPU, a fifth of a minute of the suite);
the installed `patchkeeper` itself, a process of its own, shows the --json and unknown-verb cases."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import click
import pytest

from patchkeeper.cli import commands, main

PATCHKEEPER = Path(sys.executable).with_name("patchkeeper")  # the console script pip installed
VERBS = commands()


def _placeholders(cmd: click.Command) -> list[str]:
    return ["x" for p in cmd.params if isinstance(p, click.Argument) and p.required]


def _valued(cmd: click.Command) -> list[click.Option]:
    """The verb's options that take one value (not flags, not --help)."""
    return [
        p
        for p in cmd.params
        if isinstance(p, click.Option) and not p.is_flag and not p.count and p.nargs == 1 and not p.hidden
    ]


def _cases() -> list[tuple[list[str], str, str]]:
    """(argv, the verb the hint must name or "" for the group's, what the message says)."""
    cases: list[tuple[list[str], str, str]] = []
    for verb, cmd in VERBS.items():
        args = _placeholders(cmd)
        cases.append(([verb, *args, "--no-such-option"], verb, "No such option '--no-such-option'"))
        if args:
            cases.append(([verb], verb, "Missing argument"))
            cases.append(([verb, *args, "extra-word", "another"], verb, "unexpected extra argument"))
            cases.append(([verb, *args, "two\nlines"], verb, "unexpected extra argument (two\\nlines)"))
        for option in _valued(cmd):
            name = max(option.opts, key=len)
            cases.append(([verb, *args, name], verb, f"Option '{name}' requires an argument"))
            if isinstance(option.type, (click.Choice, click.IntRange, click.FloatRange)):
                cases.append(([verb, *args, name, "not-a-value"], verb, "Invalid value for"))
    cases += [
        (["--bogus", "status"], "", "No such option '--bogus'"),
        (["-w"], "", "Option '-w' requires an argument"),
    ]
    return cases


def _pk(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed `patchkeeper`, a process of its own (for the cases that must show the whole program)."""
    return subprocess.run([str(PATCHKEEPER), *args], capture_output=True, text=True, cwd=cwd)


def _main(*args: str) -> subprocess.CompletedProcess[str]:
    """The group's main in this process, as the console script calls it (`patchkeeper.__main__.run`), its
    exit code, stdout and stderr caught: the generated cases, a few hundred, cost no interpreter each."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as ended:
        main.main(list(args), prog_name="patchkeeper")
    code = ended.value.code
    return subprocess.CompletedProcess(
        list(args), code if isinstance(code, int) else 1, out.getvalue(), err.getvalue()
    )


@cache
def _help_runs(command: str) -> str:
    """The stdout of a `patchkeeper ... --help` a hint names (it must exit 0)."""
    words = command.split()
    assert words[0] == "patchkeeper" and words[-1] == "--help", command
    proc = _main(*words[1:])
    assert proc.returncode == 0, (command, proc.stderr)
    return proc.stdout


def _house(proc: subprocess.CompletedProcess[str]) -> tuple[str, str, list[str]]:
    """The error's message, its hint and the commands the hint names, once the form is checked."""
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr and "Usage:" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 2, proc.stderr
    assert lines[0].startswith("patchkeeper: error: ") and lines[1].startswith("  hint: "), proc.stderr
    hint = lines[1].removeprefix("  hint: ")
    return lines[0].removeprefix("patchkeeper: error: "), hint, re.findall(r"`([^`]+)`", hint)


@pytest.mark.parametrize(
    "argv, verb, says", _cases(), ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_a_usage_error_is_an_error_and_a_hint(tmp_path, monkeypatch, argv, verb, says):
    monkeypatch.chdir(tmp_path)
    message, hint, named = _house(_main(*argv))
    assert says in message
    usage = [c for c in named if not c.endswith("--help")]
    helps = [c for c in named if c.endswith("--help")]
    assert helps == [" ".join(["patchkeeper", verb, "--help"] if verb else ["patchkeeper", "--help"])], hint
    assert _help_runs(helps[0]).startswith(f"Usage: {usage[0]}"), hint  # the usage line is the verb's own


def _typos(verb: str) -> list[str]:
    """A letter dropped, two swapped: names that are no verb but close to this one."""
    swapped = verb[0] + verb[2] + verb[1] + verb[3:]
    return [t for t in (verb[:-1], swapped) if t not in VERBS and t != verb]


@pytest.mark.parametrize("typo, verb", [(t, v) for v in VERBS for t in _typos(v)])
def test_an_unknown_verb_names_the_close_ones(tmp_path, monkeypatch, typo, verb):
    monkeypatch.chdir(tmp_path)
    message, hint, named = _house(_main(typo, "x"))
    assert message == f"No such command '{typo}'."
    meant = [c.split()[1] for c in named if not c.endswith("--help")]
    assert verb in meant and set(meant) <= set(VERBS), hint
    assert "patchkeeper --help" in named and "Commands:" in _help_runs("patchkeeper --help")


def test_an_unknown_verb_with_none_close(tmp_path):
    message, hint, named = _house(_pk("zzzzqqq", cwd=tmp_path))
    assert message == "No such command 'zzzzqqq'." and named == ["patchkeeper --help"], hint


def test_json_carries_the_same_error(tmp_path):
    """With --json the document on stdout is the error stderr says, word for word."""
    proc = _pk("apply", "--json", cwd=tmp_path)
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert proc.stderr == f"patchkeeper: error: {doc['error']['message']}\n  hint: {doc['error']['hint']}\n"
    assert doc["error"]["message"] == "Missing argument 'NAME'." and doc["exit_code"] == 2
