"""Imports are data: every name read from a file or a host is checked against its grammar (names.py)
before it becomes a path; each place where one did is refused here with hostile values."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
from conftest import make_workspace, tree
from helpers import hostile_paths

from patchkeeper import names
from patchkeeper.checks import wheels
from patchkeeper.errors import BadInput, PatchkeeperError
from patchkeeper.host.errors import AgentError
from patchkeeper.host.store import Store
from patchkeeper.patchset import patchset, saving
from patchkeeper.records.ledger import LedgerEntry
from patchkeeper.targets import shapes

HOSTILE_NAMES = ["", ".", "..", "../x", "a/b", "/abs", ".hidden", "-flag", "a\0b", "a\nb", "a b", "x" * 101,
                 ".git", "a\\b", "é"]  # fmt: skip
HOSTILE_VERSIONS = ["", ".", "..", "../1", "1/0", "/1", "1\0", "1\n", " 1", "1 0", "x" * 65, ".1"]


@pytest.mark.parametrize("value", hostile_paths())
def test_every_hostile_path_is_refused(value):
    assert names.path_problem(value) is not None
    with pytest.raises(BadInput):
        names.check_path(value, "origin")
    with pytest.raises(BadInput):
        names.check_file_entry(value, "origin")
    with pytest.raises(BadInput):
        patchset.check_relative(value, "origin")


@pytest.mark.parametrize("value", HOSTILE_NAMES)
def test_every_hostile_name_is_refused(value):
    with pytest.raises(BadInput, match="cannot name a patch set|over the 100"):
        names.check_name(value)
    with pytest.raises(BadInput):
        names.check_ident(f"{value}@1.0.0")


@pytest.mark.parametrize("value", HOSTILE_VERSIONS)
def test_every_hostile_version_is_refused(value):
    with pytest.raises(BadInput):
        names.check_version(value)
    with pytest.raises(BadInput):
        names.check_ident(f"ddtree@{value}")


@pytest.mark.parametrize("value", ["", ".", "..", ".x", "a/b", "a\\b", "a\0b", "a\nb", "x" * 256])
def test_every_hostile_component_is_refused(value):
    assert names.component_problem(value, "the target name") is not None


def test_the_names_patchkeeper_writes_itself_pass():
    for rel in ("sglang/srt/x.py", "sglang/plan b.py", "sglang/caf\u00e9.py", "a/.gitignore", "x.git/y"):
        assert names.check_path(rel) == rel
    assert names.check_ident("ddtree@3.1.0") == ("ddtree", "3.1.0")
    for version in ("1.0.0", "1!2.0.post1", "1.0+local.7", "2.0rc1", "0.5.23.dev0", "by-hand", "3.1.0-2"):
        assert names.check_version(version) == version
    for target in ("local", "ct129", "gpu-host.example.com", "root@10.0.0.1", "[::1]"):
        assert names.component_problem(target, "t") is None
    for name in os.listdir(Path(__file__).parents[1] / "patchsets"):
        assert names.check_name(name) == name  # the shipped patch sets


def _set(root: Path, name: str, toml: str = "", files: dict[str, bytes] | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "patchset.toml").write_text(f'name = "{name}"\nversion = "1.0.0"\npackage = "sglang"\n{toml}')
    for rel, data in (files or {}).items():
        (d / rel).write_bytes(data)
    return d


def test_a_required_patch_set_name_from_patchset_toml_is_checked(tmp_path):
    root = tmp_path / "patchsets"
    victim = tmp_path / "victim"
    _set(tmp_path, "victim")  # a patch set directory outside patchsets/, which ../victim would reach
    _set(root, "needs", 'requires = ["../victim"]')
    with pytest.raises(BadInput, match="'../victim' cannot name a patch set"):
        patchset.load(root, "needs")
    for name in (
        "../victim",
        str(victim),
        "..",
        ".history",
    ):  # a name from a ledger entry, as status reads it
        with pytest.raises(BadInput, match="cannot name a patch set"):
            patchset.load(root, name)


def test_a_symlink_in_a_patch_set_is_refused_and_never_exported(tmp_path, pristine_venv):
    ws = make_workspace(tmp_path / "ws", pristine_venv)
    secret = tmp_path / "id_ed25519"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    d = _set(ws.root / "patchsets", "linked", '[files]\nunit = "unit.conf"\n')
    (d / "unit.conf").symlink_to(secret)
    proc = ws.pk("export", "linked", check=2)
    assert "unit.conf is a symlink; a patch set holds regular files" in proc.stderr
    assert "PRIVATE KEY" not in proc.stdout + proc.stderr


def test_a_git_component_in_a_diff_is_refused(tmp_path):
    diff = "diff --git a/sglang/.git/config b/sglang/.git/config\nnew file mode 100644\n--- /dev/null\n"
    diff += "+++ b/sglang/.git/config\n@@ -0,0 +1 @@\n+[core]\n"
    _set(tmp_path, "dotgit", files={"dotgit.patch": diff.encode()})
    with pytest.raises(BadInput, match="has a .git component"):
        patchset.load(tmp_path, "dotgit")


@pytest.mark.parametrize(
    "journal",
    [
        {"name": "ddtree", "new": ".ddtree.pk-new-1", "kept": "../../victim"},
        {"name": "ddtree", "new": ".ddtree.pk-new-1", "kept": ".history/ddtree/../../../victim"},
        {"name": "ddtree", "new": ".ddtree.pk-new-1", "kept": "/abs/victim"},
        {"name": "ddtree", "new": "../victim", "kept": None},
        {"name": "../victim", "new": ".x.pk-new-1", "kept": None},
        {"name": "ddtree", "new": ".other.pk-new-1", "kept": None},
        {"name": "ddtree", "new": ".ddtree.pk-new-1", "kept": ".history/other/1.0.0"},
    ],
)
def test_a_save_journal_naming_paths_elsewhere_moves_nothing(tmp_path, pristine_venv, journal):
    """patchsets/.pk-save.json is read back after a crash, and its names renamed: a hostile or damaged
    one is refused, nothing moved (before: `kept` was joined unchecked and renamed to)."""
    ws = make_workspace(tmp_path / "ws", pristine_venv)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data").write_bytes(b"mine")
    (ws.root / "patchsets" / ".ddtree.pk-new-1").mkdir()
    (ws.root / "patchsets" / ".ddtree.pk-new-1" / "patchset.toml").write_text("x")
    (ws.root / "patchsets" / saving.JOURNAL).write_text(json.dumps(journal))
    before = tree(tmp_path)
    proc = ws.pk("list", check=2)
    assert "pk-save.json is damaged" in proc.stderr and "Traceback" not in proc.stderr
    assert tree(tmp_path) == before


@pytest.mark.parametrize("target", ["../../outside", "..", ".hidden", "a/b", "a\\b", "tab\there"])
def test_a_target_name_that_is_not_one_path_component_is_refused(tmp_path, pristine_venv, target):
    """snapshots/<target>/ holds the copy of a target's ledger: a target named ../../outside (in
    patchkeeper.toml or an Ansible inventory's host name) would put it outside the workspace."""
    ws = make_workspace(tmp_path / "ws", pristine_venv)
    toml = ws.root / "patchkeeper.toml"
    toml.write_text(toml.read_text().replace("[targets.local]", f"[targets.{json.dumps(target)}]"))
    proc = ws.pk("status", "-t", target, check=2)
    assert "the target name" in proc.stderr and "not one plain path component" in proc.stderr
    assert not (tmp_path / "outside").exists()


def _entry(version: str, name: str = "ddtree") -> dict:
    ref = {"name": name, "version": version, "digest": "blake3:" + "a" * 64}
    state = {"id": "0123456789ab", "manifest": "blake3:" + "b" * 64, "stack": [ref]}
    return {"id": "20260101T000000-abcdef", "seq": 1, "time": 0.0, "who": "u", "command": "apply",
            "kind": "apply", "after": state, "patchsets": [ref]}  # fmt: skip


@pytest.mark.parametrize(
    "version, name", [("../../x", "ddtree"), ("1.0/..", "ddtree"), ("1.0.0", ".history")]
)
def test_a_ledger_entry_naming_a_patch_set_outside_the_grammar_is_malformed(version, name):
    assert LedgerEntry.from_dict(_entry("3.1.0")).patchsets[0]["version"] == "3.1.0"
    with pytest.raises(shapes.Malformed):
        LedgerEntry.from_dict(_entry(version, name))


@pytest.mark.parametrize(
    "digest",
    ["../../x:" + "a" * 64, "blake3:" + "a" * 63, "blake3:../" + "a" * 61, "sha1:" + "a" * 64, "blake3:"],
)
def test_a_digest_that_is_not_one_never_becomes_a_store_path(tmp_path, digest):
    store = Store(str(tmp_path / "store"))
    with pytest.raises(AgentError, match="not a digest"):
        store._loose(digest)
    assert store._loose("blake3:" + "a" * 64).endswith("objects/blake3/aa/" + "a" * 62)


def test_wheel_members_outside_site_packages_are_no_site_files(tmp_path):
    path = tmp_path / "evil-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("evil-1.0.dist-info/METADATA", "Name: evil\nVersion: 1.0\n")
        z.writestr("evil-1.0.dist-info/RECORD", "")
        for member in ("evil/ok.py", "../outside.py", "/abs.py", "evil/../../up.py", ".git/config"):
            z.writestr(member, "x = 1\n")
    with wheels.Wheel(path) as w:
        assert w.site_names() == {"evil/ok.py"}


def test_an_error_names_where_the_bad_name_came_from():
    with pytest.raises(PatchkeeperError) as info:
        names.check_ident("../x@1", "shared.patch: the export's header")
    assert str(info.value).startswith("shared.patch: the export's header: '../x' cannot name a patch set")
