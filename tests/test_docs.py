"""The docs tell the truth: the README's quick start runs as written, its links and verbs exist, and every
`patchkeeper` command shown in README.md and docs/*.md names a real verb and real options."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from conftest import REPO, tree
from installed import clean_env
from sshd import sshd, write_client_config  # noqa: F401 (sshd is a fixture)

README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_WORDS = 2000
# Verbs and options the docs already show while the helpers adding them are still at work; each is
# checked like any other as soon as the CLI has it.
PENDING = {("port", None), ("audit", "--rehash")}


# ---- reading the docs ---------------------------------------------------------------------------
def section(text: str, heading: str) -> str:
    """The text of a `## heading` section, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"README.md has no '## {heading}' section"
    return match.group(1)


def fenced(text: str, lang: str | None = None) -> list[str]:
    """The bodies of the fenced code blocks in `text` (only ```lang ones, when given)."""
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)
    return [body for found, body in blocks if lang is None or found == lang]


@dataclass(frozen=True)
class Command:
    """One command of a shell block, as a shell reads it (with its here-document), and the exit code
    its comment promises (`# exit N`; 0 without one)."""

    text: str
    exit: int


def commands(block: str) -> list[Command]:
    out: list[Command] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        text = [line]
        heredoc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        if heredoc:
            while i < len(lines) and lines[i].strip() != heredoc.group(1):
                text.append(lines[i])
                i += 1
            text.append(lines[i] if i < len(lines) else heredoc.group(1))
            i += 1
        while text[-1].endswith("\\") and i < len(lines):
            text.append(lines[i])
            i += 1
        promised = re.search(r"\s#\s*exit (\d+)\b", line)
        out.append(Command("\n".join(text), int(promised.group(1)) if promised else 0))
    return out


@dataclass(frozen=True)
class Ran:
    command: Command
    exit: int | None  # None: the shell never reached its end
    output: str


def run_in_one_shell(cmds: list[Command], cwd: Path, env: dict[str, str]) -> list[Ran]:
    """Run the commands one after another in one bash (so `cd` and variables carry over, as for a
    reader pasting them), each one's exit code and output taken apart."""
    script = []
    for n, cmd in enumerate(cmds):
        script += [f"printf '\\n@@docs-start {n}\\n'", cmd.text, f"printf '\\n@@docs-end {n} %s\\n' $?"]
    proc = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    ran = []
    for n, cmd in enumerate(cmds):
        m = re.search(rf"\n@@docs-start {n}\n(.*?)\n@@docs-end {n} (\d+)\n", proc.stdout, re.S)
        ran.append(Ran(cmd, int(m.group(2)), m.group(1)) if m else Ran(cmd, None, proc.stdout[-2000:]))
    return ran


def wrong(ran: list[Ran]) -> str:
    """Each command that did not exit as its doc says, with its output; '' when all did."""
    return "\n\n".join(
        f"$ {r.command.text}\nexit {r.exit}, the doc says {r.command.exit}\n{r.output}"
        for r in ran
        if r.exit != r.command.exit
    )


def shell_env(bin_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment a reader has: patchkeeper on PATH (this venv's, or the one installed in
    `bin_dir`, then without PYTHONPATH), a git identity, and the doc's variables."""
    git = {
        f"GIT_{who}_{what}": value
        for who in ("AUTHOR", "COMMITTER")
        for what, value in (("NAME", "Docs Reader"), ("EMAIL", "reader@example.test"))
    }
    if bin_dir is not None:
        return {**clean_env(bin_dir), **git, **extra}
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        **git,
        **extra,
    }


# ---- the quick start runs as written --------------------------------------------------------------
def test_the_readme_quick_start_runs_as_written(tmp_path, pristine_venv, sshd, installed_bin):  # noqa: F811
    """Every command of the README's quick start, run by patchkeeper installed as `uv tool install`
    does (its wheel, a venv without pip), on a copy of the real sglang venv and on a second one
    behind the suite's real sshd, exits as the README says; afterwards both venvs are byte for byte
    the release again, as the quick start's rollbacks promise."""
    cmds = [c for block in fenced(section(README.read_text(), "Quick start"), "sh") for c in commands(block)]
    verbs = [c.text.split()[1] for c in cmds if c.text.startswith("patchkeeper ")]
    assert len(verbs) >= 15 and {"apply", "rollback", "diff", "status"} <= set(verbs), verbs
    assert any(c.exit == 1 for c in cmds), "the quick start shows no command that finds a difference"
    venv, host_venv = tmp_path / "venv", tmp_path / "host-venv"
    for copy in (venv, host_venv):  # real copies: the quick start edits a file in place, by hand
        subprocess.run(["cp", "-a", str(pristine_venv), str(copy)], check=True)
    host_unit = tmp_path / "host-etc" / "systemd" / "system" / "sglang-qwen.service"
    host_unit.parent.mkdir(parents=True)
    write_client_config(Path(os.environ["HOME"]), sshd, ["gpu1-host"])
    cwd = tmp_path / "reader"
    cwd.mkdir()
    ran = run_in_one_shell(
        cmds,
        cwd,
        shell_env(
            installed_bin,
            VENV=str(venv),
            PATCHKEEPER_SRC=str(REPO),
            HOST="gpu1-host",
            HOST_VENV=str(host_venv),
            HOST_UNIT=str(host_unit),
        ),
    )
    assert not wrong(ran), wrong(ran)
    pristine = tree(pristine_venv)
    assert tree(venv) == pristine and tree(host_venv) == pristine
    assert not host_unit.exists()  # the baseline had no unit there: rollback removes the one dflash wrote


def test_a_command_that_does_not_exit_as_documented_is_caught(tmp_path):
    block = (
        "cat > f.toml <<EOF\n# not a command\nx = 1\nEOF\n"
        "patchkeeper lsit\n"
        "patchkeeper --version                # exit 1: wrong on purpose\n"
        "patchkeeper --workspace . list       # exit 2: no patchkeeper.toml here\n"
    )
    cmds = commands(block)
    assert [c.exit for c in cmds] == [0, 0, 1, 2] and cmds[0].text.endswith("x = 1\nEOF")
    ran = run_in_one_shell(cmds, tmp_path, shell_env())
    assert [r.exit for r in ran] == [0, 2, 0, 2]
    assert (tmp_path / "f.toml").read_text() == "# not a command\nx = 1\n"
    report = wrong(ran)
    assert (
        report.count("\n$ ") == 1 and "$ patchkeeper lsit\n" in report and "$ patchkeeper --version" in report
    )


# ---- the README's shape -------------------------------------------------------------------------
def test_the_readme_stays_short():
    words = len(README.read_text().split())
    assert words <= MAX_WORDS, f"README.md has {words} words; at most {MAX_WORDS} (move details to docs/)"


def test_every_linked_doc_exists():
    """Every relative .md or folder link of README.md, docs/*.md and bench/*.md, every file of the
    repository they name, and every docs page an error's hint names, is there; every docs page is
    linked from the README."""
    pages = [README, *sorted(DOCS.glob("*.md")), *sorted((REPO / "bench").glob("*.md"))]
    missing = []
    for page in pages:  # links to pages and to folders (the lab notes beside bench/ and scripts/)
        for link in re.findall(r"\]\(([^)#\s]+(?:\.md|/))(?:#[^)]*)?\)", page.read_text()):
            target = page.parent / link
            if not link.startswith(("http://", "https://")) and not (
                target.is_dir() if link.endswith("/") else target.is_file()
            ):
                missing.append(f"{page.relative_to(REPO)} -> {link}")
    for page in pages:  # and every file of this repository a page names
        missing += [
            f"{page.relative_to(REPO)} -> {name}"
            for name in re.findall(
                r"(?<![\w/])((?:src|tests|bench|scripts)/[\w/.-]+\.(?:py|sh|json))", page.read_text()
            )
            if not (REPO / name).is_file()
        ]
    for source in sorted((REPO / "src").rglob("*.py")):  # the hints of errors name pages too
        missing += [
            f"{source.relative_to(REPO)} -> {name}"
            for name in re.findall(r"docs/[\w-]+\.md", source.read_text())
            if not (REPO / name).is_file()
        ]
    assert not missing, missing
    linked = set(re.findall(r"\]\((docs/[^)#\s]+\.md)", README.read_text()))
    assert linked and {f"docs/{p.name}" for p in DOCS.glob("*.md")} <= linked


def test_docs_hold_user_pages_only_and_the_lab_notes_are_linked_from_development():
    """docs/ is for users: measurements (benchmarks, dated runs) live beside bench/ and scripts/,
    linked from the README's Development section."""
    assert [p.name for p in DOCS.iterdir() if p.is_dir() or re.search(r"\d{4}-\d\d-\d\d|BENCH", p.name)] == []
    development = section(README.read_text(), "Development")
    assert "](bench/BENCHMARKS.md)" in development and "](scripts/gpu_host/run-2026-12-02/)" in development


def _help(*verb: str) -> str:
    exe = Path(sys.executable).parent / "patchkeeper"
    return subprocess.run([str(exe), *verb, "--help"], capture_output=True, text=True, check=True).stdout


def _verbs() -> set[str]:
    listed = _help().split("Commands:\n", 1)[1]
    # a verb's line starts with two spaces; a summary's wrapped lines with more
    return {line.split()[0] for line in listed.splitlines() if re.match(r"  \S", line)}


def test_the_readme_has_a_row_for_every_verb():
    rows = set(re.findall(r"^\| `([a-z-]+)", section(README.read_text(), "Verbs"), re.M))
    missing = _verbs() - rows
    assert not missing, f"verbs without a row in the README's table: {sorted(missing)}"


def test_every_command_in_the_docs_names_real_verbs_and_options():
    """Each `patchkeeper ...` line of a code block in README.md or docs/*.md: its verb is one the CLI
    has, and each option it gives appears in that verb's --help."""
    verbs, helps, bad = _verbs(), {}, []
    shown = 0
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for block in fenced(page.read_text()):
            shown_lines = block.splitlines()
            for at, line in enumerate(shown_lines):
                line = line.strip().removeprefix("$ ")
                if not line.startswith("patchkeeper "):
                    continue
                if shown_lines[at + 1 : at + 2] == [
                    f"patchkeeper: error: No such command {line.split()[1]!r}."
                ]:
                    continue  # a mistyped verb, shown with the error it gets (exit-codes.md)
                try:
                    words = shlex.split(line.split(">", 1)[0].split("|", 1)[0], comments=True)
                except ValueError:
                    bad.append(f"{page.name}: cannot be read as a command: {line}")
                    continue
                words = [w.strip("[]") for w in words[1:]]
                while words and words[0] in ("-w", "--workspace", "-i", "--inventory"):
                    words = words[2:]
                if not words or words[0] in ("--help", "-h", "--version"):
                    continue
                verb, shown = words[0], shown + 1
                if verb not in verbs:
                    if (verb, None) not in PENDING:
                        bad.append(f"{page.name}: no verb {verb!r}: {line}")
                    continue
                if verb not in helps:
                    helps[verb] = _help(verb)
                text = helps[verb]
                for word in words[1:]:
                    option = word.split("=", 1)[0]
                    if (
                        re.fullmatch(r"--?[a-zA-Z][\w-]*", option)
                        and not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text)
                        and (verb, option) not in PENDING
                    ):
                        bad.append(f"{page.name}: `{verb}` has no option {option}: {line}")
    assert shown >= 40, shown
    assert not bad, "\n".join(bad)
