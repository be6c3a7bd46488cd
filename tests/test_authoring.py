"""record, import, export, check and show through the real CLI, on real sglang and real git repos."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest
from checkout import make_checkout
from conftest import edit_file, make_workspace, tree

from patchkeeper.patchset import patchset
from patchkeeper.workspace import TargetConfig

SPEC = "sglang/srt/speculative/spec_info.py"


def _pristine_site(pristine_venv: Path, env) -> Path:
    return pristine_venv / env.site.relative_to(env.venv)


def _edit_target(env) -> None:
    """Modify, add, delete, chmod in the package; write a drop-in beside the unit."""
    spec = env.site / SPEC
    edit_file(
        spec, spec.read_bytes().replace(b"    DFLASH = auto()\n", b"    DFLASH = auto()\n    MINE = auto()\n")
    )
    (env.site / "sglang/srt/speculative/mine_utils.py").write_bytes(b"X = 1  # no newline at the end")
    (env.site / "sglang/srt/speculative/spec_utils.py").unlink()
    version = env.site / "sglang/version.py"
    edit_file(version, version.read_bytes())
    version.chmod(0o755)
    env.dropin.parent.mkdir(exist_ok=True)
    env.dropin.write_bytes(b"[Service]\n# MINE\n")


def test_record_from_target_gives_back_the_edited_bytes(baselined):
    env = baselined
    env.pk("snapshot", "--name", "start")
    old_mode = stat.S_IMODE((env.site / "sglang/version.py").stat().st_mode)
    _edit_target(env)
    edited = env.snapshot()
    out = env.pk("record", "mine", "--from", "start").stdout
    assert "created mine@1.0.0" in out and "4 file(s), 1 role file(s)" in out
    diff = (env.root / "patchsets/mine/mine.patch").read_text()
    assert "new file mode 100644" in diff and "deleted file mode 100644" in diff
    assert (
        f"old mode {0o100000 | old_mode:o}\nnew mode 100755" in diff
        and "\\ No newline at end of file" in diff
    )
    toml = (env.root / "patchsets/mine/patchset.toml").read_text()
    assert 'package_version = "==0.5.23"' in toml and 'dropin = "50-patchkeeper.conf"' in toml

    env.pk("rollback", "--to", "start")
    assert env.snapshot() != edited
    env.pk("apply", "mine")
    assert env.snapshot() == edited  # bytes and modes, the drop-in included

    # the same content again: nothing to do; changed content needs --bump
    assert "nothing written" in env.pk("record", "mine", "--from", "start").stdout
    edit_file(env.site / SPEC, (env.site / SPEC).read_bytes() + b"# more\n")
    before = tree(env.root / "patchsets")
    err = env.pk("record", "mine", "--from", "start", check=2).stderr
    assert "unchanged version" in err and "--bump" in err
    assert tree(env.root / "patchsets") == before
    out = env.pk("record", "mine", "--from", "start", "--bump", "minor").stdout
    assert "updated mine@1.1.0 (was 1.0.0)" in out
    assert 'version = "1.1.0"' in (env.root / "patchsets/mine/patchset.toml").read_text()


def test_record_refuses_a_binary_file_and_writes_nothing(baselined):
    env = baselined
    env.pk("snapshot", "--name", "start")
    (env.site / "sglang/srt/speculative/blob.bin").write_bytes(b"\x00\x01binary")
    err = env.pk("record", "bin", "--from", "start", check=2).stderr
    assert "binary" in err and "sglang/srt/speculative/blob.bin" in err
    assert not (env.root / "patchsets/bin").exists()
    err = env.pk("record", "x", "--from", "no-such-state", check=2).stderr
    assert "no state 'no-such-state'" in err


@pytest.fixture
def checkout(tmp_path, pristine_venv, env):
    return make_checkout(_pristine_site(pristine_venv, env), tmp_path / "src")


def test_record_from_git_range_applies_to_the_real_package(baselined, checkout):
    env = baselined
    out = env.pk(
        "record", "feature", "--git", str(checkout.root), "--range", "v0.5.23..feature", "--subdir", "python"
    ).stdout
    assert "created feature@1.0.0" in out and "6 file(s)" in out
    diff = (env.root / "patchsets/feature/feature.patch").read_text()
    assert "diff --git a/sglang/srt/speculative/spec_info.py b/sglang/srt/speculative/spec_info.py" in diff
    assert "README.md" not in diff and "python/" not in diff
    env.pk("apply", "feature")
    for rel in (
        "sglang/srt/speculative/spec_info.py",
        "sglang/srt/speculative/feature_utils.py",
        "sglang/version.py",
        "sglang/srt/arg_groups/speculative_hook.py",
        "sglang/srt/speculative/spec_registry.py",
    ):
        src, dst = checkout.pkg / rel, env.site / rel
        assert dst.read_bytes() == src.read_bytes(), rel
        assert stat.S_IMODE(dst.stat().st_mode) == stat.S_IMODE(src.stat().st_mode), rel
    assert not (env.site / "sglang/srt/speculative/spec_utils.py").exists()

    # a new commit on the branch: same version refused, --bump patch accepted
    (checkout.pkg / "sglang/version.py").write_text("__version__ = '0.5.23+feature'\n")
    checkout.git("commit", "-qam", "more")
    args = (
        "record",
        "feature",
        "--git",
        str(checkout.root),
        "--range",
        "v0.5.23..feature",
        "--subdir",
        "python",
    )
    env.pk(*args, check=2)
    assert "updated feature@1.0.1" in env.pk(*args, "--bump", "patch").stdout


def test_record_from_git_refuses_bad_input_and_writes_nothing(env, checkout, tmp_path):
    base = ("record", "f", "--git", str(checkout.root))
    before = tree(env.root)
    cases = [
        ((*base, "--range", "v0.5.23..nope", "--subdir", "python"), "no commit 'nope'"),
        ((*base, "--range", "v0.5.23", "--subdir", "python"), "not of the form A..B"),
        ((*base, "--range", "v0.5.23..feature", "--subdir", "pythn"), "no directory 'pythn'"),
        (("record", "f", "--git", str(tmp_path), "--range", "a..b"), "is not a git checkout"),
    ]
    for args, message in cases:
        proc = env.pk(*args, check=2)
        assert message in proc.stderr and "hint:" in proc.stderr, proc.stderr
    assert tree(env.root) == before


def test_record_from_git_runs_nothing_the_checkout_configures(env, checkout, tmp_path):
    """A checkout handed over with its own .git/config: an fsmonitor hook, a clean filter and a diff
    driver that would each leave a file behind if git ran them; the range is read from its commits."""
    ran = tmp_path / "ran"
    ran.mkdir()
    for key, value in [
        ("core.fsmonitor", f"touch {ran}/fsmonitor; false"),
        ("filter.evil.clean", f"touch {ran}/clean; cat"),
        ("diff.evil.textconv", f"touch {ran}/textconv; cat"),
        ("diff.evil.command", f"touch {ran}/command; true"),
        ("diff.external", f"touch {ran}/external; true"),
    ]:
        checkout.git("config", key, value)
    (checkout.root / ".git" / "info").mkdir(exist_ok=True)
    (checkout.root / ".git" / "info" / "attributes").write_text("* filter=evil diff=evil\n")
    (checkout.pkg / "sglang/version.py").write_text("uncommitted\n")  # a dirty work tree, never looked at
    args = ("record", "f", "--git", str(checkout.root), "--range", "v0.5.23..feature", "--subdir", "python")
    assert "created f@1.0.0" in env.pk(*args).stdout
    assert sorted(p.name for p in ran.iterdir()) == []
    assert "uncommitted" not in "".join(p.read_text() for p in (env.root / "patchsets" / "f").glob("*.patch"))


def _site_copy(env, dest: Path) -> Path:
    """A plain copy of the pristine package's site-packages part (no patchkeeper involved)."""
    dest.mkdir()
    for name in ("sglang", "sglang-0.5.23.dist-info"):
        shutil.copytree(env.site / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_export_applies_with_git_apply_and_patch_and_import_round_trips(env, tmp_path, pristine_venv):
    exported = env.pk("export", "ddtree").stdout
    patch_file = tmp_path / "ddtree.patch"
    patch_file.write_text(exported)
    by_git = _site_copy(env, tmp_path / "by-git")
    by_patch = _site_copy(env, tmp_path / "by-patch")
    subprocess.run(["git", "apply", str(patch_file)], cwd=by_git, check=True)
    subprocess.run(["patch", "-p1", "-s", "-i", str(patch_file)], cwd=by_patch, check=True)
    env.pk("apply", "ddtree")
    wanted = {
        k: v for k, v in tree(env.site).items() if k.split("/")[0] in ("sglang", "sglang-0.5.23.dist-info")
    }
    assert tree(by_git) == wanted
    assert tree(by_patch) == wanted

    other = make_workspace(tmp_path / "ws2", env.venv)
    shutil.rmtree(other.root / "patchsets")
    out = other.pk("import", "ddtree", str(patch_file)).stdout
    assert "created ddtree@3.1.0" in out
    digest = json.loads(env.pk("show", "ddtree", "--json").stdout)["digest"]
    assert json.loads(other.pk("show", "ddtree", "--json").stdout)["digest"] == digest
    assert tree(other.root / "patchsets/ddtree") == tree(env.root / "patchsets/ddtree")
    # the same export again: nothing to do; an altered export is refused
    assert "nothing written" in other.pk("import", "ddtree", str(patch_file)).stdout
    patch_file.write_text(exported.replace("DDTREE = auto()", "DDTREX = auto()"))
    assert "does not match the digest" in other.pk("import", "ddtree2", str(patch_file), check=2).stderr
    assert not (other.root / "patchsets/ddtree2").exists()


def test_import_of_an_export_under_another_name_and_version_keeps_vars_and_comments(baselined, tmp_path):
    env = baselined
    patch_file = tmp_path / "ddtree.patch"
    patch_file.write_bytes(env.pk("export", "ddtree").stdout.encode())
    was = (env.root / "patchsets/ddtree/patchset.toml").read_text()
    assert "created tree2@4.0.0" in env.pk("import", "tree2", str(patch_file), "--version", "4.0.0").stdout
    toml = (env.root / "patchsets/tree2/patchset.toml").read_text()
    assert toml == was.replace('name = "ddtree"', 'name = "tree2"').replace(
        'version = "3.1.0"', 'version = "4.0.0"'
    )
    shown = json.loads(env.pk("show", "tree2", "--json").stdout)
    assert shown["variables"]["model_path"] == "/root/models/Qwen3.6-27B"
    env.pk("apply", "tree2", "--no-verify")  # the drop-in renders with the [vars] defaults
    assert "--model-path /root/models/Qwen3.6-27B" in env.dropin.read_text()


def test_import_a_plain_patch_from_a_git_checkout(baselined, checkout, tmp_path):
    env = baselined
    mail = tmp_path / "feature.patch"
    mail.write_text(checkout.git("format-patch", "--stdout", "v0.5.23..feature", "--", "python"))
    out = env.pk("import", "pr-1", str(mail), "--subdir", "python", "--version", "0.1.0").stdout
    assert "created pr-1@0.1.0" in out
    assert 'description = "feature"' in (env.root / "patchsets/pr-1/patchset.toml").read_text()
    env.pk("apply", "pr-1")
    assert (env.site / SPEC).read_bytes() == (
        checkout.pkg / "sglang" / SPEC.removeprefix("sglang/")
    ).read_bytes()

    bad = tmp_path / "bad.patch"
    bad.write_text("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n")
    before = tree(env.root / "patchsets")
    proc = env.pk("import", "bad", str(bad), check=2)
    assert "bad.patch" in proc.stderr and "hint:" in proc.stderr
    proc = env.pk("import", "bad", str(mail), check=2)  # paths below python/ without --subdir
    assert "pass --subdir python" in proc.stderr
    assert tree(env.root / "patchsets") == before


def test_check_reports_clean_offset_and_failing_hunks(env):
    out = env.pk("check", "ddtree").stdout
    assert f"ok    {SPEC}  applies cleanly" in out and "ddtree@3.1.0: applies" in out
    spec = env.site / SPEC
    original = spec.read_bytes()
    edit_file(spec, b"# one\n# two\n# three\n" + original)
    out = env.pk("check", "ddtree").stdout
    assert "applies at an offset: @@ -37,6 +37,10 @@ 3 line(s) later" in out
    # after a recorded state, a hand edit is pre-image drift, and a changed line fails its hunk
    edit_file(spec, original)
    env.pk("snapshot", "--name", "start")
    edit_file(spec, original.replace(b"    DFLASH = auto()\n", b"    DFLASH_RENAMED = auto()\n"))
    proc = env.pk("check", "ddtree", check=1)
    assert f"FAIL  {SPEC}" in proc.stdout
    assert "expected '    DFLASH = auto()', found '    DFLASH_RENAMED = auto()'" in proc.stdout
    assert "differ from the recorded state" in proc.stdout and SPEC in proc.stdout
    doc = json.loads(env.pk("check", "ddtree", "--json", check=1).stdout)
    failed = [f for f in doc["files"] if not f["applies"]]
    assert [f["path"] for f in failed] == [SPEC]
    offsets = [h["offset"] for h in failed[0]["hunks"]]
    assert offsets[0] is None and offsets[1:] == [0] * (len(offsets) - 1)  # the later hunks still apply
    assert b"DFLASH_RENAMED" in spec.read_bytes()  # check changed nothing


def test_check_against_wheels_without_a_target(env, tmp_path):
    def wheel(path: Path, version: str, files: dict[str, bytes]) -> Path:
        with zipfile.ZipFile(path, "w") as z:
            for rel, data in files.items():
                z.writestr(rel, data)
            z.writestr(
                f"sglang-{version}.dist-info/METADATA",
                f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n\nbody\n",
            )
        return path

    ps_paths = [p for p in patchset.load(env.root / "patchsets", "ddtree").paths if (env.site / p).exists()]
    files = {rel: (env.site / rel).read_bytes() for rel in ps_paths}
    same = wheel(tmp_path / "sglang-0.5.23-py3-none-any.whl", "0.5.23", files)
    out = env.pk("check", "ddtree", "--wheel", str(same)).stdout
    assert "ddtree@3.1.0: applies" in out and "role file(s) dropin not checked" in out
    moved = dict(files)
    moved[SPEC] = b"# new header\n" * 5 + files[SPEC]
    newer = wheel(tmp_path / "sglang-0.5.24-py3-none-any.whl", "0.5.24", moved)
    proc = env.pk("check", "ddtree", "--wheel", str(newer), check=1)
    assert "5 line(s) later" in proc.stdout and "needs sglang==0.5.23; wheel" in proc.stdout
    assert "has 0.5.24" in proc.stdout
    env.pk("check", "ddtree", "--wheel", str(tmp_path / "missing.whl"), check=2)


def test_show_lists_metadata_diffstat_and_targets(baselined):
    env = baselined
    out = env.pk("show", "ddtree").stdout
    assert "ddtree@3.1.0" in out and "sglang==0.5.23" in out and "speculative-algo" in out
    assert "sglang/srt/speculative/ddtree_utils.py" in out and "(new)" in out
    assert "not applied on any target" in out
    env.pk("apply", "ddtree")
    doc = json.loads(env.pk("show", "ddtree", "--json").stdout)
    assert doc["applied_on"][0]["target"] == "local" and doc["applied_on"][0]["current"]
    stat_of = {s["path"]: s for s in doc["diffstat"]}
    assert stat_of["sglang/srt/speculative/ddtree_utils.py"]["added"] == 194


def test_record_over_a_templated_unit_keeps_the_template_and_maps_edits_back(baselined):
    """nextn's drop-in is a template: recording the target's rendered drop-in keeps the {{ }} placeholders
    (and the [vars] defaults), an edit beside them is written into the template, and an edit of a
    value the template fills in per target is refused by name, writing nothing."""
    env = baselined
    env.pk("apply", "nextn")
    template = (env.root / "patchsets/nextn/dropin.conf").read_bytes()
    assert b"{{ tp_size }}" in template and b"{{" not in env.dropin.read_bytes()
    # a value changed in patchkeeper.toml since the apply: the unit is still the rendering the ledger recorded
    toml = (env.root / "patchkeeper.toml").read_text()
    (env.root / "patchkeeper.toml").write_text(
        toml.replace("[targets.local.vars]\n", "[targets.local.vars]\nport = 31000\n")
    )
    out = env.pk("record", "nextn", "--from", "baseline", "--bump", "minor").stdout
    assert "updated nextn@3.2.0" in out
    (env.root / "patchkeeper.toml").write_text(toml)
    assert (env.root / "patchsets/nextn/dropin.conf").read_bytes() == template
    recorded = patchset.load(env.root / "patchsets", "nextn")
    assert dict(recorded.defaults) == {
        "model_path": "/root/models/Qwen3.6-27B",
        "host": "0.0.0.0",
        "port": "30000",
        "tp_size": "2",
    }
    assert {n: t.describe() for n, t in recorded.types} == {
        "python": "path",
        "model_path": "path",
        "host": "word",
        "port": "int 1..65535",
        "tp_size": "int 1..64",
    }

    rendered = env.dropin.read_bytes()
    edit_file(
        env.dropin,
        rendered.replace(b"--mem-fraction-static 0.88", b"--mem-fraction-static 0.85").replace(
            b"[Service]\n", b"[Service]\nEnvironment=MODEL=/root/models/Qwen3.6-27B\n"
        ),
    )
    out = env.pk("record", "nextn", "--from", "baseline", "--bump", "patch").stdout
    assert "updated nextn@3.2.1" in out and "the value of {{ model_path }}" in out
    edited = (env.root / "patchsets/nextn/dropin.conf").read_bytes()
    assert edited == template.replace(b"--mem-fraction-static 0.88", b"--mem-fraction-static 0.85").replace(
        b"[Service]\n", b"[Service]\nEnvironment=MODEL=/root/models/Qwen3.6-27B\n"
    )
    other = patchset.load(env.root / "patchsets", "nextn").bind(
        TargetConfig(
            name="ct200",
            python="/root/ml-env/bin/python3",
            package="sglang",
            vars={"tp_size": "8", "port": "31000"},
        )
    )
    unit = dict(other.files)["dropin"]
    assert b"--port 31000 \\\n    --host 0.0.0.0 --tp-size 8 --mem-fraction-static 0.85" in unit
    env.pk("rollback", "--to", "baseline")
    assert env.pk("apply", "nextn").returncode == 0 and env.dropin.read_bytes() == rendered.replace(
        b"--mem-fraction-static 0.88", b"--mem-fraction-static 0.85"
    ).replace(b"[Service]\n", b"[Service]\nEnvironment=MODEL=/root/models/Qwen3.6-27B\n")

    # a new patch set over the applied nextn's rendered unit takes nextn's template and its defaults
    assert "created tuned@1.0.0" in env.pk("record", "tuned", "--from", "baseline").stdout
    assert (env.root / "patchsets/tuned/dropin.conf").read_bytes() == edited
    assert patchset.load(env.root / "patchsets", "tuned").defaults == recorded.defaults

    before = tree(env.root / "patchsets")
    edit_file(env.dropin, env.dropin.read_bytes().replace(b"--tp-size 2 ", b"--tp-size 4 "))
    err = env.pk("record", "nextn", "--from", "baseline", "--bump", "patch", check=2).stderr
    assert "changes the value of {{ tp_size }} ('2')" in err and "patchsets/nextn/dropin.conf" in err
    assert "hint: give local its own value in [targets.local.vars]" in err
    assert tree(env.root / "patchsets") == before
