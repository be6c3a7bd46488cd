"""What a newcomer meets in the first hour (issue 34): init checks --python, a workspace without
targets or default says so, a typo gets "did you mean", -t and -w go on either side of the verb,
a fresh $HOME without a git identity still commits, SSH failures in words, `snapshot -n`, and
`status` of every target when there is no default."""

from __future__ import annotations

import json
import os
import pty
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import click
from conftest import REPO, copy_venv, edit_file, make_workspace

from patchkeeper.cli import main, summary

SPEC = "sglang/srt/speculative/spec_info.py"


def pk(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "patchkeeper", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


# ---- init --python ------------------------------------------------------------------------------
def test_init_refuses_a_python_that_is_not_one_and_writes_nothing(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a program\n")
    text.chmod(0o755)
    for python, said in (
        (tmp_path / "missing" / "python", "no such file"),
        (text, "cannot be run"),
        (Path("/bin/true"), "is not a Python that patchkeeper can run in"),
        (tmp_path, "is a directory"),
    ):
        ws = tmp_path / f"ws-{python.name}"
        proc = pk(tmp_path, "-w", str(ws), "init", "--python", str(python))
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
        assert "--python VENV/bin/python" in proc.stderr and not ws.exists()


def test_init_says_when_the_package_is_not_installed_there_yet(tmp_path):
    proc = pk(
        tmp_path, "-w", str(tmp_path / "ws"), "init", "--python", sys.executable
    )  # this venv: no sglang
    assert proc.returncode == 0, proc.stderr
    assert f"note: sglang is not installed in {sys.executable} yet (wrong venv?)" in proc.stdout
    (next_line,) = [line for line in proc.stdout.splitlines() if line.startswith("next:")]
    assert "install sglang" in next_line and "apply" not in next_line  # nothing to apply there yet


def test_a_verb_outside_any_workspace_says_how_to_make_one(tmp_path):
    err = pk(tmp_path, "status").stderr
    assert f"no patchkeeper.toml in {tmp_path.resolve()} or its parents" in err
    assert "`patchkeeper init` makes one here" in err


def test_a_wrong_venv_is_asked_about_first(tmp_path):
    ws = make_workspace(tmp_path / "ws", Path(sys.executable).parents[1])  # the dev venv: no sglang
    err = ws.pk("status", check=2).stderr
    hint = err.split("hint: ", 1)[1]
    assert hint.startswith("wrong venv? python = ") and hint.index("wrong venv") < hint.index("pip install")


def test_init_without_python_then_a_verb_says_there_are_no_targets(tmp_path):
    ws = tmp_path / "ws"
    assert pk(tmp_path, "-w", str(ws), "init").returncode == 0
    err = pk(tmp_path, "-w", str(ws), "status").stderr
    assert f"error: no targets: {ws}/patchkeeper.toml defines none" in err and "[targets.local]" in err


# ---- names --------------------------------------------------------------------------------------
def test_a_typo_in_a_patch_set_or_target_name_gets_did_you_mean(env):
    assert "did you mean 'ddtree'?" in env.pk("apply", "ddtre", check=2).stderr
    assert "did you mean 'nextn'?" in env.pk("show", "nxetn", check=2).stderr
    err = env.pk("status", "-t", "locla", check=2).stderr
    assert "did you mean 'local'?" in err and "hint: -t local, or add [targets.locla]" in err
    assert "did you mean" not in env.pk("status", "-t", "zzzzzz", check=2).stderr


def test_target_and_workspace_options_go_on_either_side_of_the_verb(env, tmp_path):
    expected = env.pk("status", "-t", "local").stdout
    for args in (
        ["-t", "local", "status", "-w", str(env.root)],
        ["status", "-w", str(env.root), "-t", "local"],
        ["--target=local", "--workspace", str(env.root), "status"],
        ["status", f"--workspace={env.root}"],
    ):
        proc = pk(tmp_path, *args)
        assert proc.returncode == 0 and proc.stdout == expected, (args, proc.stderr)


def test_status_without_a_default_target_shows_every_target(tmp_path, pristine_venv):
    env = make_workspace(
        tmp_path / "ws",
        copy_venv(pristine_venv, tmp_path / "venv"),
        f'\n[targets.other]\npython = "{pristine_venv}/bin/python"\npackage = "sglang"\n',
    )
    toml = env.root / "patchkeeper.toml"
    toml.write_text(toml.read_text().replace('default_target = "local"\n', ""))
    out = env.pk("status").stdout
    assert "local" in out and "other" in out
    assert out == env.pk("status", "--all").stdout


# ---- snapshot -n ---------------------------------------------------------------------------------
def test_snapshot_dry_run_says_what_it_would_record_and_records_nothing(env):
    before = env.snapshot()
    out = env.pk("snapshot", "--name", "first", "-n").stdout
    assert "local: no baseline yet; a real run records one first" in out
    assert "would record state 'first' (" in out and "bytes kept); nothing changed (dry run)" in out
    assert env.snapshot() == before and not (env.state_dir / "ledger").exists()


# ---- a fresh $HOME without a git identity ---------------------------------------------------------
def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def test_without_a_git_identity_the_workspace_commits_as_patchkeeper_and_says_so_once(baselined):
    env = baselined
    _git(env.root, "init", "-q")
    _git(env.root, "config", "user.useConfigOnly", "true")  # no identity, and git may not guess one
    no_identity = {
        "GIT_AUTHOR_NAME": "",
        "GIT_AUTHOR_EMAIL": "",
        "GIT_COMMITTER_NAME": "",
        "GIT_COMMITTER_EMAIL": "",
        "EMAIL": "",
    }
    no_identity = {k: v for k, v in os.environ.items() if k not in no_identity}
    first = subprocess.run(
        [sys.executable, "-m", "patchkeeper", "-w", str(env.root), "apply", "ddtree", "--no-verify"],
        capture_output=True,
        text=True,
        env=no_identity,
    )
    assert first.returncode == 0, first.stderr
    email = f"patchkeeper@{socket.gethostname()}"
    assert first.stderr.count("git has no identity here") == 1 and email in first.stderr
    assert "warning" not in first.stderr
    assert (
        _git(env.root, "log", "-1", "--format=%an <%ae>|%cn <%ce>").strip() == f"patchkeeper <{email}>|"
        f"patchkeeper <{email}>"
    )
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "patchkeeper",
            "-w",
            str(env.root),
            "rollback",
            "--to",
            "baseline",
            "--no-verify",
        ],
        capture_output=True,
        text=True,
        env=no_identity,
    )
    assert (
        again.returncode == 0 and "git has no identity" not in again.stderr and "warning" not in again.stderr
    )
    assert "rollback" in _git(env.root, "log", "-1", "--format=%s")
    other = env.root.parent / "other-ws"  # another workspace of the same user: git's identity is the user's
    shutil.copytree(env.root, other, ignore=shutil.ignore_patterns(".git", "snapshots"))
    _git(other, "init", "-q")
    _git(other, "config", "user.useConfigOnly", "true")
    third = subprocess.run(
        [sys.executable, "-m", "patchkeeper", "-w", str(other), "apply", "ddtree", "--no-verify"],
        capture_output=True,
        text=True,
        env=no_identity,
    )
    assert third.returncode == 0 and "git has no identity" not in third.stderr, third.stderr
    assert _git(other, "log", "-1", "--format=%an").strip() == "patchkeeper"


# ---- SSH failures in words -----------------------------------------------------------------------
def test_ssh_failures_are_said_in_words(tmp_path, pristine_venv):
    from patchkeeper.targets.ssh import in_words

    assert (
        in_words(socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "ct129", 22)
        == "the host name ct129 does not resolve (Name or service not known)"
    )
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens there now
    for persist in ("0", "60"):  # this process connects, or a holder does
        env = make_workspace(
            tmp_path / f"ws{persist}",
            pristine_venv,
            f'\n[targets.far]\nssh = "nobody@127.0.0.1:{port}"\npython = "/usr/bin/python3"\n'
            f'package = "sglang"\npersist = {persist}\n',
        )
        err = env.pk("status", "-t", "far", check=None).stderr
        assert f"127.0.0.1 port {port}: nothing listens there (connection refused)" in err, err
        assert "Errno" not in err


# ---- output a newcomer reads -----------------------------------------------------------------------
def test_list_lines_fit_the_terminal_and_say_where_the_full_text_is(env):
    out = env.pk("list", env={"COLUMNS": "100"}).stdout
    assert max(len(line) for line in out.splitlines()) <= 100, out
    assert (
        "DDTREE through the DFlash worker" in out and "(a description in full: patchkeeper show NAME)" in out
    )
    full = env.pk("show", "ddtree").stdout
    assert "Not done: tree verification is not wired yet" in " ".join(full.split())


def test_a_dry_run_prints_the_drop_ins_exec_start_once(baselined):
    env = baselined
    out = env.pk("apply", "ddtree", "--dry-run").stdout
    assert out.count("--speculative-draft-model-path") == 1, out  # in the drop-in shown, not again
    assert "ExecStart (effective, from " in out and "as set there (shown above)" in out


def test_each_count_of_files_says_what_it_counts(env):
    out = env.pk("apply", "ddtree", "--no-verify").stdout
    assert "recorded baseline of local: " in out and " files of sglang, state " in out
    out = env.pk("audit", check=None).stdout
    assert " files checked (every distribution in site-packages, not only sglang)" in out


def test_init_says_once_that_the_unit_it_names_does_not_exist_yet(tmp_path):
    ws = tmp_path / "ws"
    proc = pk(tmp_path, "-w", str(ws), "init", "--python", sys.executable)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(f"unit role is {ws}/sglang-qwen.service, which does not exist") == 1
    assert "/etc/systemd/system/NAME.service" in proc.stdout
    assert (
        "# No unit yet: this one, in the workspace, does not exist" in (ws / "patchkeeper.toml").read_text()
    )


def test_list_with_one_broken_patch_set_lists_the_others_and_marks_it(env):
    (env.root / "patchsets" / "nextn" / "patchset.toml").write_text("name = [broken\n")
    proc = env.pk("list", check=2)
    assert "ddtree@" in proc.stdout and "dflash@" in proc.stdout
    assert "nextn            BROKEN: cannot be read" in proc.stdout
    assert "patchkeeper: error: " in proc.stderr and "nextn" in proc.stderr
    doc = json.loads(env.pk("list", "--json", check=2).stdout)
    assert [d["name"] for d in doc] == ["ddtree", "dflash", "nextn"]
    assert "version" in doc[0] and doc[2]["error"]["message"] and "version" not in doc[2]


def test_restore_pristine_after_the_baseline_says_it_acts_only_before_and_what_works(baselined):
    env = baselined
    env.pk("snapshot", "--name", "first")
    edit_file(env.site / SPEC, (env.site / SPEC).read_bytes() + b"# by hand\n")
    before = env.snapshot()
    err = env.pk("apply", "ddtree", "--restore-pristine", "--no-verify", check=2).stderr
    assert "--restore-pristine acts only before a target's first baseline; local has one" in err
    current = json.loads(env.pk("status", "--json").stdout)["state"]["id"]
    assert f"hint: to drop hand edits now: `patchkeeper rollback --to {current}` gives every file" in err
    err = env.pk("snapshot", "--name", "second", "--accept-edits", check=2).stderr
    assert "--accept-edits acts only before" in err and "`patchkeeper snapshot --name NAME`" in err
    for flag in ("--restore-pristine", "--accept-edits"):  # repair took them and said nothing
        err = env.pk("repair", "six", flag, check=2).stderr
        assert f"{flag} acts only before a target's first baseline; local has one" in err
    assert env.snapshot() == before
    env.pk("rollback", "--to", current, "--no-verify")  # what the hint says works
    env.pk("apply", "ddtree", "--no-verify")


def test_a_target_whose_python_is_wrong_is_not_counted_unreachable(tmp_path, pristine_venv):
    env = make_workspace(
        tmp_path / "ws",
        copy_venv(pristine_venv, tmp_path / "venv"),
        f'\n[targets.other]\npython = "{sys.executable}"\npackage = "sglang"\n',  # no sglang there
    )
    proc = env.pk("status", "--all", check=2)
    assert proc.stdout.splitlines()[-1] == "2 target(s): 0 unreachable, 1 in error", proc.stdout
    assert "'sglang' is not installed in" in proc.stdout


def test_a_kept_version_named_with_at_gets_the_way_to_apply_it(baselined):
    env = baselined
    sets = env.root / "patchsets"
    toml = (sets / "nextn" / "patchset.toml").read_text()
    now = tomllib.loads(toml)["version"]
    kept = sets / ".history" / "nextn" / "0.9.0"  # as a save leaves the version it replaced
    shutil.copytree(sets / "nextn", kept)
    (kept / "patchset.toml").write_text(toml.replace(f'version = "{now}"', 'version = "0.9.0"'))
    err = env.pk("apply", "nextn@0.9.0", "--no-verify", check=2).stderr
    assert "nextn@0.9.0 is a kept version (patchsets/.history/nextn/0.9.0/)" in err
    hint = err.split("hint: to apply 0.9.0, put it back as the current version: `", 1)[1].split("`", 1)[0]
    subprocess.run(hint, shell=True, cwd=env.root, check=True)  # the hint's command, as written
    env.pk("apply", "nextn", "--no-verify")
    assert "nextn@0.9.0" in env.pk("status").stdout
    assert "nextn@0.9.0 is the current version" in env.pk("apply", "nextn@0.9.0", check=2).stderr
    assert f"nextn@{now} is a kept version" in env.pk("apply", f"nextn@{now}", check=2).stderr


# ---- the terminal: --help, colour, -w -----------------------------------------------------------------
def test_help_gives_each_verb_its_summary_whole(tmp_path):
    text = pk(tmp_path, "--help", env={"COLUMNS": "80"}).stdout
    commands = text.split("Commands:", 1)[1]
    assert "..." not in commands
    flat = " ".join(commands.split())
    ctx = click.Context(main)
    for name in main.list_commands(ctx):
        assert f"{name} {summary(main.get_command(ctx, name))}" in flat, name


def _stderr_on_a_terminal(tmp_path, *args: str, env: dict | None = None) -> bytes:
    master, slave = pty.openpty()
    subprocess.run(
        [sys.executable, "-m", "patchkeeper", *args],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env={**os.environ, "TERM": "xterm", **(env or {})},
    )
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the terminal's other side is closed and read
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return out


def test_colour_on_a_terminal_only_and_never_with_no_color(tmp_path):
    red = b"\x1b[31m"
    assert red in _stderr_on_a_terminal(tmp_path, "status", env={"NO_COLOR": ""})
    assert red not in _stderr_on_a_terminal(tmp_path, "status", env={"NO_COLOR": "1"})
    piped = subprocess.run([sys.executable, "-m", "patchkeeper", "status"], cwd=tmp_path, capture_output=True)
    assert b"\x1b[" not in piped.stderr and b"error: no patchkeeper.toml" in piped.stderr


def test_a_workspace_directory_that_does_not_exist_is_said_so(tmp_path):
    proc = pk(tmp_path, "-w", str(tmp_path / "nosuch"), "status")
    assert proc.returncode == 2 and f"error: {tmp_path}/nosuch does not exist" in proc.stderr
    assert f"patchkeeper -w {tmp_path}/nosuch init" in proc.stderr


def test_status_of_another_target_hints_with_its_t_and_a_re_render_is_called_so(tmp_path, pristine_venv):
    other = copy_venv(pristine_venv, tmp_path / "other")
    shutil.copy(REPO / "demo" / "sglang-qwen.service", tmp_path / "other.service")
    env = make_workspace(
        tmp_path / "ws",
        copy_venv(pristine_venv, tmp_path / "venv"),
        f'\n[targets.ct129]\npython = "{other}/bin/python"\npackage = "sglang"\n\n'
        f'[targets.ct129.vars]\ndraft_model_path = "/m"\n\n'
        f'[targets.ct129.files]\nunit = "{tmp_path}/other.service"\n',
    )
    env.pk("apply", "dflash", "-t", "ct129", "--no-verify")
    toml = env.root / "patchkeeper.toml"
    toml.write_text(toml.read_text().replace('draft_model_path = "/m"\n', 'draft_model_path = "/m2"\n'))
    out = env.pk("status", "-t", "ct129").stdout
    assert "`patchkeeper apply dflash -t ct129` would write:" in out
    out = env.pk("apply", "dflash", "-t", "ct129", "--dry-run").stdout
    assert "re-rendering dflash@3.1.0 with the target's current values" in out and "switching" not in out


def test_the_effective_exec_start_is_wrapped_and_reads_back_whole(baselined):
    env = baselined
    env.pk("apply", "dflash", "--no-verify")
    out = env.pk("status").stdout.splitlines()
    first = next(i for i, line in enumerate(out) if line.startswith("ExecStart (effective, from "))
    end = next(i for i in range(first, len(out)) if not out[i].endswith(" \\"))
    shown = out[first : end + 1]
    assert len(shown) > 2 and all(len(line) <= 100 for line in shown[1:]), shown  # the first: its path too
    command = " ".join(line.removesuffix(" \\").strip() for line in shown).split("): ", 1)[1]
    assert command == json.loads(env.pk("status", "--json").stdout)["exec_start"]["text"]


def test_an_apply_says_which_hand_edits_outside_the_set_it_leaves(baselined):
    env = baselined
    env.pk("snapshot", "--name", "first")
    version = env.site / "sglang" / "version.py"
    edit_file(version, version.read_bytes() + b"# by hand\n")
    out = env.pk("apply", "ddtree", "--no-verify").stdout
    assert "note: 1 file(s) changed by hand outside the applied patch sets stay as they are" in out
    assert "sglang/version.py (changed) (`patchkeeper diff` shows them)" in out
    assert "changed by hand" not in env.pk("apply", "nextn", "--no-verify", "--dry-run").stdout
