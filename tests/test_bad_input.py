"""Bad input: a clear one-line error, exit 2, and nothing changed on the target."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import make_workspace

ESCAPE = """diff --git a/{p} b/{p}
new file mode 100644
index 0000000..e69de29
--- /dev/null
+++ b/{p}
@@ -0,0 +1 @@
+pwned = True
"""


def _patchset(env, name, patch_text, toml_extra=""):
    d = env.root / "patchsets" / name
    d.mkdir()
    (d / "patchset.toml").write_text(
        f'name = "{name}"\nversion = "1.0.0"\npackage = "sglang"\npackage_version = "==0.5.23"\n{toml_extra}'
    )
    if patch_text is not None:
        (d / "0001.patch").write_text(patch_text)


def _refused(env, *args, expect):
    before = env.snapshot()
    proc = env.pk(*args, check=2)
    assert expect in proc.stderr, proc.stderr
    assert proc.stderr.startswith("patchkeeper: error:")
    assert env.snapshot() == before
    assert not (env.state_dir / "journal.json").exists()


def test_unknown_patchset_and_target(env):
    _refused(env, "apply", "nope", expect="unknown patch set 'nope'")
    _refused(env, "apply", "ddtree", "-t", "ct999", expect="unknown target 'ct999'")


@pytest.mark.parametrize(
    "path, expect",
    [
        ("../evil.py", "escapes site-packages"),
        ("sglang/../../evil.py", "escapes site-packages"),
    ],
)
def test_paths_escaping_site_packages(env, path, expect):
    _patchset(env, "evil", ESCAPE.format(p=path))
    _refused(env, "apply", "evil", expect=expect)


def test_absolute_path_in_a_diff(env):
    _patchset(env, "evil", ESCAPE.format(p="/tmp/evil.py").replace("b//tmp", "b/tmp"))
    text = ESCAPE.format(p="x").replace("a/x", "/etc/evil").replace("b/x", "/etc/evil")
    (env.root / "patchsets/evil/0001.patch").write_text(text)
    _refused(env, "apply", "evil", expect="evil")


def test_path_through_a_symlink_out_of_site_packages(baselined, tmp_path):
    env = baselined
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, env.site / "sglang" / "linked")
    _patchset(env, "evil", ESCAPE.format(p="sglang/linked/evil.py"))
    _refused(env, "apply", "evil", expect="outside site-packages")
    assert not (outside / "evil.py").exists()


def test_malformed_patchset_toml_and_diff(env):
    _patchset(env, "badtoml", None, toml_extra="requires = [unclosed\n")
    _refused(env, "apply", "badtoml", expect="malformed TOML")
    _patchset(env, "baddiff", "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-only one line\n")
    _refused(env, "apply", "baddiff", expect="not a unified diff")
    _patchset(env, "nokey", None)
    (env.root / "patchsets/nokey/patchset.toml").write_text('name = "nokey"\n')
    _refused(env, "apply", "nokey", expect="version must be a non-empty string")


def test_hunk_that_does_not_apply_names_file_hunk_and_line(baselined):
    env = baselined
    spec = "sglang/srt/speculative/spec_info.py"
    _patchset(
        env,
        "stale",
        f"""diff --git a/{spec} b/{spec}
--- a/{spec}
+++ b/{spec}
@@ -1,3 +1,3 @@
-this line is not in the file
+replacement
 context
 more context
""",
    )
    _refused(
        env,
        "apply",
        "stale",
        expect=f"{spec}: hunk @@ -1,3 +1,3 @@ does not apply: line 1: expected 'this line is not in the file'",
    )


def test_missing_interpreter_and_missing_package(env, tmp_path):
    ws = make_workspace(tmp_path / "ws2", tmp_path / "no-venv")
    proc = ws.pk("apply", "ddtree", check=2)
    assert "cannot run its interpreter" in proc.stderr
    toml = env.root / "patchkeeper.toml"
    toml.write_text(toml.read_text().replace('package = "sglang"', 'package = "vllm"'))
    _refused(env, "apply", "ddtree", expect="'vllm' is not installed")


def test_no_workspace(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "patchkeeper", "status"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "no patchkeeper.toml" in proc.stderr


def test_rollback_never_writes_through_a_symlinked_directory(baselined, tmp_path):
    env = baselined
    env.pk("apply", "ddtree")
    outside = tmp_path / "outside"
    outside.mkdir()
    spec_dir = env.site / "sglang/srt/speculative"
    spec_dir.rename(tmp_path / "moved-away")
    os.symlink(outside, spec_dir)
    _refused(env, "rollback", "--to", "baseline", expect="lead outside site-packages (through a symlink)")
    assert list(outside.iterdir()) == []


def test_a_stage_that_cannot_be_written_changes_nothing_and_leaves_no_journal(baselined):
    env = baselined
    env.unit.parent.rename(env.unit.parent.with_name("systemd-moved"))
    env.unit.parent.write_text("a file where the unit's directory was\n")
    _refused(env, "apply", "nextn", expect="nothing was changed")
    assert "nothing to recover" in env.pk("recover").stdout


@pytest.mark.parametrize(
    "toml, expect",
    [
        ("targets = 3\n", "targets must be a table"),
        ('[targets.local]\npython = "/x"\npackage = "sglang"\nfiles = "x"\n', "has a bad files"),
        ('[targets.local]\npython = "/x"\npackage = "sglang"\nssh = 3\n', "has a bad ssh"),
        ('[targets.local]\npackage = "sglang"\n', "lacks python"),
    ],
)
def test_malformed_workspace_values(env, toml, expect):
    (env.root / "patchkeeper.toml").write_text('default_target = "local"\n' + toml)
    _refused(env, "status", expect=expect)


@pytest.mark.parametrize(
    "extra, expect",
    [
        ('group = ["a"]\n', "group must be a string"),
        ('files = "x"\n', "[files] must be a table"),
    ],
)
def test_malformed_patchset_values(env, extra, expect):
    _patchset(env, "odd", None, toml_extra=extra)
    _refused(env, "apply", "odd", expect=expect)


def _no_records(env):
    """Nothing recorded either: a refusal comes before the baseline."""
    ledger = env.state_dir / "ledger"
    assert not ledger.exists() or not list(ledger.iterdir())


MODE = """diff --git a/sglang/version.py b/sglang/version.py
old mode 100644
new mode {mode}
"""


@pytest.mark.parametrize(
    "extra, expect",
    [
        ('pacakge_version = "==0.5.24"\n', "unknown key 'pacakge_version' (did you mean 'package_version'?)"),
        ('[files]\nunit = "u"\n[service]\nx = 1\n', "unknown key 'service'"),
    ],
)
def test_unknown_patchset_keys_are_refused_by_name(env, extra, expect):
    _patchset(env, "typo", None, toml_extra=extra)
    _refused(env, "apply", "typo", expect=expect)
    _no_records(env)


@pytest.mark.parametrize(
    "version",
    [
        "1.0.0\n20991231T000000-forged  root@x  apply",
        "1" + ".1" * 20_000,
        "1" + ".1" * 1_000_000,
        "banana",
        " 1.0",
    ],
)
def test_versions_must_be_pep440_and_short(env, version):
    d = env.root / "patchsets" / "odd"
    d.mkdir()
    (d / "patchset.toml").write_text(f'name = "odd"\nversion = {json.dumps(version)}\npackage = "sglang"\n')
    proc = env.pk("apply", "odd", check=2)
    assert (
        "version" in proc.stderr
        and ("PEP 440" in proc.stderr or "one line" in proc.stderr)
        or "over the 64 KiB" in proc.stderr
    ), proc.stderr
    assert len(proc.stderr) < 1000 and proc.stderr.count("\n") == 2  # one line and its hint
    _no_records(env)


def test_oversized_patch_files_are_refused(env):
    _patchset(env, "huge", None)
    with open(env.root / "patchsets/huge/0001.patch", "wb") as f:
        f.truncate(33 << 20)  # sparse: 33 MiB without writing them
    _refused(env, "apply", "huge", expect="over the 32 MiB")


def test_a_world_writable_mode_needs_force(env):
    _patchset(env, "modes", MODE.format(mode="100777"))
    _refused(env, "apply", "modes", expect="world-writable: sglang/version.py 777")
    _no_records(env)
    proc = env.pk("apply", "modes", "--force", "--no-verify")
    assert "warning:" in proc.stdout
    assert (env.site / "sglang/version.py").stat().st_mode & 0o7777 == 0o777


def test_setuid_setgid_and_sticky_modes_are_refused_even_with_force(env):
    """No recorded state holds such a mode (a stored manifest's mode is permission bits only), so no
    patch set may make one."""
    for mode, force in (
        ("104755", ()),
        ("104755", ("--force",)),
        ("102755", ("--force",)),
        ("101644", ("--force",)),
    ):
        shutil.rmtree(env.root / "patchsets" / "modes", ignore_errors=True)
        _patchset(env, "modes", MODE.format(mode=mode))
        _refused(
            env, "apply", "modes", *force, expect=f"setuid, setgid or sticky: sglang/version.py {mode[2:]}"
        )
    _no_records(env)
    assert (env.site / "sglang/version.py").stat().st_mode & 0o7777 == 0o644


def test_a_symlink_mode_in_a_patch_is_bad_input(env):
    _patchset(env, "link", MODE.format(mode="120000"))
    _refused(env, "apply", "link", expect="not a regular file's")


def test_short_state_prefix_is_refused_and_ambiguous_lists_candidates(baselined):
    env = baselined
    env.pk("apply", "nextn")
    entries = sorted((env.state_dir / "ledger").iterdir())
    base = json.loads(entries[0].read_text())
    _refused(env, "rollback", "--to", base["after"]["id"][:1], expect="needs at least 4 characters")
    # a second state whose id shares the baseline's first 4 characters, as a 65,536th state would
    twin = dict(
        base,
        id="20990101T000000-aaaaaa",
        seq=3,
        kind="snapshot",
        after=dict(base["after"], id=base["after"]["id"][:4] + "ffffffff", name="twin"),
    )
    (env.state_dir / "ledger" / "000003-20990101T000000-aaaaaa.json").write_text(json.dumps(twin))
    proc = env.pk("rollback", "--to", base["after"]["id"][:4], "--dry-run", check=2)
    assert "is ambiguous" in proc.stderr
    hint = proc.stderr.split("hint:")[1]
    assert f"{base['after']['id']} (baseline)" in hint and f"{twin['after']['id']} (twin)" in hint


def test_apply_on_a_target_without_the_role_records_nothing(env):
    toml = env.root / "patchkeeper.toml"
    toml.write_text(toml.read_text().split("[targets.local.files]")[0])
    _refused(env, "apply", "nextn", expect="has no such role")
    _no_records(env)


def test_a_crlf_patch_is_refused_as_crlf(env):
    _patchset(env, "crlf", None)
    text = (env.root / "patchsets/ddtree/0001-spec-info-ddtree.patch").read_bytes()
    (env.root / "patchsets/crlf/0001.patch").write_bytes(text.replace(b"\n", b"\r\n"))
    _refused(env, "apply", "crlf", expect="has CRLF (Windows) line endings, first on line 1")


def test_git_quoted_paths_are_accepted(baselined, tmp_path):
    """git quotes names with a quote, a backslash or non-ASCII bytes: the diff git writes applies."""
    env = baselined
    import subprocess

    repo = tmp_path / "git"
    (repo / "sglang").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    names = ['sglang/name with "quote".py', "sglang/café.py", "sglang/ünï cödé.py"]
    for name in names:
        (repo / name).write_text(f"# {name}\n")
    subprocess.run(["git", "-C", str(repo), "add", "-N", "."], check=True)
    text = subprocess.run(["git", "-C", str(repo), "diff"], check=True, capture_output=True, text=True).stdout
    assert '"b/sglang/name with \\"quote\\".py"' in text and "caf\\303\\251" in text
    _patchset(env, "quoted", text)
    env.pk("apply", "quoted", "--no-verify")
    for name in names:
        assert (env.site / name).read_text() == f"# {name}\n"
    env.pk("rollback", "--to", "baseline", "--no-verify")
    assert not any((env.site / name).exists() for name in names)
    (repo / "sglang/tab\there.py").write_text("x\n")  # git quotes a tab as \t: a control character, refused
    subprocess.run(["git", "-C", str(repo), "add", "-N", "."], check=True)
    text = subprocess.run(["git", "-C", str(repo), "diff"], check=True, capture_output=True, text=True).stdout
    assert "tab\\there" in text
    _patchset(env, "tabbed", text)
    _refused(env, "apply", "tabbed", expect="'sglang/tab\\there.py' holds a control character")


def test_a_symlinked_file_is_named_a_symlink(baselined, tmp_path):
    env = baselined
    version = env.site / "sglang/version.py"
    real = tmp_path / "version.py"
    real.write_bytes(version.read_bytes())
    version.unlink()
    version.symlink_to(real)
    _patchset(
        env,
        "v",
        f"""diff --git a/sglang/version.py b/sglang/version.py
--- a/sglang/version.py
+++ b/sglang/version.py
@@ -1 +1,2 @@
 {real.read_text().splitlines()[0]}
+patched = True
""",
    )
    _refused(env, "apply", "v", expect="sglang/version.py (a symlink)")


def test_a_deleted_pack_index_is_named(baselined):
    env = baselined
    env.pk("apply", "ddtree", "--no-verify")
    (index,) = (env.state_dir / "store" / "packs").glob("*.idx")
    index.unlink()
    proc = env.pk("rollback", "--to", "baseline", check=2)
    assert "the store lacks the bytes of 16 file(s) state" in proc.stderr and "spec_info.py" in proc.stderr
    assert f"the pack index {index} is missing" in proc.stderr and "recorded without bytes" not in proc.stderr


def test_diff_and_diff_env_refuse_three_sides_against_with_two_and_a_target_twice(env):
    for verb in (["diff"], ["diff", "--env"]):
        _refused(env, *verb, "a", "b", "c", expect=f"{' '.join(verb)} compares one target or two, not 3")
        _refused(
            env,
            *verb,
            "a",
            "b",
            "--against",
            "x",
            expect="--against compares one target with its own recorded state",
        )
        _refused(
            env,
            *verb,
            "local",
            "local",
            expect="compares two targets with each other, not 'local' with itself",
        )


# ---- odd names and odd places --------------------------------------------------------------------
def test_a_file_name_of_239_bytes_is_recorded_and_restored(baselined):
    env = baselined
    env.pk("snapshot", "--name", "clean")
    long = env.site / "sglang" / ("m" * 236 + ".py")  # 239 bytes: with the stage's 33 more, past NAME_MAX
    long.write_bytes(b"LONG = 1\n")
    env.pk("snapshot", "--name", "long")
    long.unlink()
    env.pk("rollback", "--to", "long", "--no-verify")
    assert long.read_bytes() == b"LONG = 1\n"
    env.pk("rollback", "--to", "clean", "--no-verify")
    assert not long.exists()


def test_record_of_a_path_with_a_space_reads_back_everywhere(baselined, tmp_path):
    env = baselined
    env.pk("snapshot", "--name", "before")
    spaced = env.site / "sglang" / "plan b"
    spaced.mkdir()
    (spaced / "mod.py").write_bytes(b"PLAN = 'b'\n")
    quoted = env.site / "sglang" / 'say"hi" now.py'
    quoted.write_bytes(b"HI = 1\n")
    env.pk("record", "planb", "-t", "local", "--from", "before")
    patch = (env.root / "patchsets/planb/planb.patch").read_text()
    assert "diff --git a/sglang/plan b/mod.py b/sglang/plan b/mod.py\n" in patch  # as git writes it
    assert '+++ "b/sglang/say\\"hi\\" now.py"\t\n' in patch  # a tab after a name with a space, as git writes
    assert "2 file(s)" in env.pk("show", "planb").stdout
    exported = env.pk("export", "planb").stdout
    env.pk("rollback", "--to", "before", "--no-verify")
    assert not (spaced / "mod.py").exists() and not quoted.exists()
    assert "applies cleanly" in env.pk("check", "planb").stdout
    env.pk("apply", "planb", "--no-verify")
    assert (spaced / "mod.py").read_bytes() == b"PLAN = 'b'\n" and quoted.read_bytes() == b"HI = 1\n"
    env.pk("rollback", "--to", "before", "--no-verify")
    proc = subprocess.run(
        ["git", "apply", "--check", "-"], input=exported, text=True, capture_output=True, cwd=env.site
    )
    assert proc.returncode == 0, proc.stderr  # git reads what record wrote
    (env.site / "sglang/tab\there.py").write_bytes(b"T = 1\n")  # a name no patch set may hold: not recorded
    _refused(env, "record", "tabbed", "-t", "local", "--from", "before", expect="holds a control character")
    assert not (env.root / "patchsets/tabbed").exists()


def test_git_s_own_diff_of_a_path_with_a_space_imports(env, tmp_path):
    repo = tmp_path / "src"
    (repo / "sglang/plan b").mkdir(parents=True)
    (repo / "sglang/plan b/mod.py").write_text("PLAN = 'a'\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    (repo / "sglang/plan b/mod.py").write_text("PLAN = 'b'\n")
    (repo / "sglang/plan b/new file.py").write_text("NEW = 1\n")
    subprocess.run([*git, "add", "-A"], check=True)
    (tmp_path / "git.patch").write_bytes(
        subprocess.run([*git, "diff", "--cached"], capture_output=True, check=True).stdout
    )
    env.pk("import", "gitplan", str(tmp_path / "git.patch"))
    kinds = {d["path"]: d["kind"] for d in json.loads(env.pk("show", "gitplan", "--json").stdout)["diffstat"]}
    assert kinds == {"sglang/plan b/mod.py": "modify", "sglang/plan b/new file.py": "add"}


@pytest.mark.parametrize("name", [b"sglang/caf\xe9.py", b'"sglang/caf\\351.py"'], ids=["raw", "git-quoted"])
def test_a_file_name_that_is_not_utf8_is_refused_naming_the_patch(env, name):
    a = b"a/" + name if not name.startswith(b'"') else b'"a/' + name[1:]
    b = b"b/" + name if not name.startswith(b'"') else b'"b/' + name[1:]
    _patchset(env, "latin", None)
    (env.root / "patchsets/latin/0001.patch").write_bytes(
        b"diff --git "
        + a
        + b" "
        + b
        + b"\nnew file mode 100644\n--- /dev/null\n+++ "
        + b
        + b"\n@@ -0,0 +1 @@\n+x = 1\n"
    )
    for verb in (["apply", "latin"], ["check", "latin"], ["show", "latin"]):
        proc = env.pk(*verb, check=2)
        assert "0001.patch: the file name 'sglang/caf\\\\xe9.py' is not UTF-8" in proc.stderr, proc.stderr


def test_a_workspace_inside_the_managed_site_packages_is_refused(env):
    inside = env.site / "ws"
    shutil.copytree(env.root, inside)
    before = env.snapshot()
    for verb in (["status"], ["apply", "ddtree", "--restore-pristine"]):
        proc = subprocess.run(
            [sys.executable, "-m", "patchkeeper", "--workspace", str(inside), *verb],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2
        assert proc.stderr.startswith(
            f"patchkeeper: error: target local: the workspace {inside} is inside its site-packages"
        ), proc.stderr
    assert env.snapshot() == before and (inside / "patchkeeper.toml").exists()


def test_a_role_file_that_is_a_file_of_the_package_is_refused(env):
    toml = env.root / "patchkeeper.toml"
    toml.write_text(
        toml.read_text().replace(f'unit = "{env.unit}"', f'unit = "{env.site}/sglang/version.py"')
    )
    for verb in (["apply", "ddtree"], ["status"]):
        proc = env.pk(*verb, check=2)
        # the unit, or the drop-in beside it (<unit>.d/, inside the package too), named as the role file refused
        assert "target local: role file " in proc.stderr and "version.py" in proc.stderr
        assert "is inside site-packages" in proc.stderr or "one file cannot be both" in proc.stderr, (
            proc.stderr
        )
    assert not (env.state_dir / "ledger").exists()


def _read_only(env, *args: str) -> subprocess.CompletedProcess:
    """A patchkeeper command with the workspace mounted read-only (a mount namespace of its own)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount the workspace read-only")
    ws = str(env.root)
    script = (
        f'mount --bind "{ws}" "{ws}" && mount -o remount,bind,ro "{ws}" "{ws}" && '
        f'exec "{sys.executable}" -m patchkeeper --workspace "{ws}" "$@"'
    )
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", *args], capture_output=True, text=True)
    if "mount:" in proc.stderr or "unshare:" in proc.stderr:
        pytest.skip(f"cannot mount the workspace read-only here: {proc.stderr.strip()}")
    return proc


def test_a_read_only_workspace_says_read_only(baselined):
    env = baselined
    env.pk("snapshot", "--name", "base")
    _patchset(env, "tiny", ESCAPE.format(p="sglang/tiny_added.py"))
    proc = _read_only(env, "apply", "tiny", "--no-verify")  # the change is made; its copy cannot be
    assert proc.returncode == 0, proc.stderr
    assert "could not be copied" in proc.stderr and "Read-only file system" in proc.stderr
    assert "hint: the file system is read-only" in proc.stderr and "make room" not in proc.stderr
    proc = _read_only(env, "record", "mine", "--from", "base")
    assert proc.returncode == 2 and "Read-only file system" in proc.stderr
    assert "hint: the file system is read-only" in proc.stderr
