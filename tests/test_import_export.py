"""`patchkeeper import` of an export made by someone else: its header's names are data, checked before
any path is made of them; the restore works in a directory of its own and removes only that."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import every_path, make_workspace, tree
from helpers import hostile_paths

from patchkeeper.patchset import exchange, patchset

TOML = b'name = "victim"\nversion = "3.1.0"\npackage = "sglang"\n'
KEY = b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIattacker attacker@evil"


def _export(ident: str, digest: str, files: dict[str, bytes]) -> bytes:
    """An export's header as `patchkeeper export` writes it, with whatever ident and files the sender chose."""
    head = [f"# patchkeeper-export 1 {ident} {digest}"]
    for rel, data in files.items():
        head.append(f"# file {json.dumps(rel)} {len(data)}")
        head.extend("#| " + piece for piece in data.decode().split("\n"))
    head.append("# end")
    return ("\n".join(head) + "\n").encode()


def _import(ws, export: Path, tmpdir: Path, name: str = "victim"):
    """The real CLI, with $TMPDIR where the test says (the restore's temporary directory goes there)."""
    tmpdir.mkdir(parents=True, exist_ok=True)
    return ws.pk("import", name, str(export), check=None, env={"TMPDIR": str(tmpdir)})


def _one_line_refusal(proc) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("patchkeeper: error:") and "Traceback" not in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.startswith("patchkeeper: error:")]) == 1


def test_an_ident_that_climbs_out_of_the_temporary_directory_writes_nothing(tmp_path, pristine_venv):
    ws = make_workspace(tmp_path / "ws", pristine_venv)
    tmpdir = tmp_path / "box" / "tmp"  # the restore's directory is tmpdir/tmpXXXX: ../../victim is box/victim
    victim = tmp_path / "box" / "victim"
    victim.mkdir(parents=True)
    (victim / "keep").write_bytes(b"mine")
    export = tmp_path / "evil.patch"
    export.write_bytes(
        _export("../../victim@3.1.0", "blake3:" + "0" * 64, {"authorized_keys": KEY, "patchset.toml": TOML})
    )
    before = tree(tmp_path / "box"), tree(ws.root)
    proc = _import(ws, export, tmpdir)
    _one_line_refusal(proc)
    assert "'../../victim' cannot name a patch set" in proc.stderr
    assert not (victim / "authorized_keys").exists()
    assert (tree(tmp_path / "box"), tree(ws.root)) == before
    assert os.listdir(tmpdir) == []  # nothing left behind either


def test_an_absolute_ident_whose_digest_matches_deletes_nothing(tmp_path, pristine_venv):
    """The sender computed the digest of the victim's directory with its files added: the old restore
    wrote them there, found the digest right, and removed the whole directory."""
    ws = make_workspace(tmp_path / "ws", pristine_venv)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data.db").write_bytes(b"precious")
    files = {"patchset.toml": TOML}
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "data.db").write_bytes(b"precious")
    (staged / "patchset.toml").write_bytes(TOML)
    export = tmp_path / "evil.patch"
    export.write_bytes(_export(f"{victim}@3.1.0", patchset.digest_dir(staged), files))
    before = tree(victim)
    proc = _import(ws, export, tmp_path / "tmp")
    _one_line_refusal(proc)
    assert "cannot name a patch set" in proc.stderr
    assert tree(victim) == before and (victim / "data.db").read_bytes() == b"precious"
    assert not (ws.root / "patchsets" / "victim").exists()


HOSTILE_IDENTS = [
    "../x@1.0.0",
    "..@1.0.0",
    ".@1.0.0",
    "/etc@1.0.0",
    "a/b@1.0.0",
    "a@../../x",
    "a@1.0/../../x",
    "a@/abs",
    "a\\b@1.0.0",
    ".git@1.0.0",
    "a@",
    "@1.0.0",
    "noversion",
    "a" * 300 + "@1.0.0",
    "a@" + "1" * 300,
    "a\x00b@1.0.0",
    "a@1.0.0\x7f",
    "-rf@1.0.0",
]

HOSTILE_FILES = [
    "../outside",
    "../../outside",
    "a/../../outside",
    "/etc/passwd",
    "",
    ".",
    "a//b",
    "a/./b",
    "trailing/",
    ".git/config",
    "sub/.GIT/hooks/post-checkout",
    "back\\slash",
    "nul\x00byte",
    "new\nline",
    "x" * 256,
    "/".join(["d"] * 2100),
]


def _hostile_export(tmp_path: Path, ident: str, rel: str) -> Path:
    files = {"patchset.toml": TOML, rel: b"x"}
    export = tmp_path / "hostile.patch"
    export.write_bytes(_export(ident, "blake3:" + "0" * 64, files))
    return export


@pytest.fixture
def workspace(tmp_path, pristine_venv):
    return make_workspace(tmp_path / "ws", pristine_venv)


@pytest.mark.parametrize("ident", HOSTILE_IDENTS)
def test_hostile_idents_are_refused_before_any_write(workspace, tmp_path, ident):
    before = tree(workspace.root)
    proc = _import(workspace, _hostile_export(tmp_path, ident, "role.conf"), tmp_path / "tmp")
    _one_line_refusal(proc)
    assert "the export's header" in proc.stderr
    assert tree(workspace.root) == before and os.listdir(tmp_path / "tmp") == []


@pytest.mark.parametrize("rel", HOSTILE_FILES)
def test_hostile_file_entries_are_refused_before_any_write(workspace, tmp_path, rel):
    before = tree(workspace.root)
    proc = _import(workspace, _hostile_export(tmp_path, "victim@3.1.0", rel), tmp_path / "tmp")
    _one_line_refusal(proc)
    assert "file name" in proc.stderr
    assert tree(workspace.root) == before and os.listdir(tmp_path / "tmp") == []


@pytest.mark.parametrize(
    "files",
    [
        {"patchset.toml": TOML, "a": b"1", "a/b": b"2"},  # a file that is another's directory
        {"patchset.toml": TOML, "a/b": b"2", "a": b"1"},
    ],
)
def test_clashing_file_entries_are_refused(workspace, tmp_path, files):
    export = tmp_path / "clash.patch"
    export.write_bytes(_export("victim@3.1.0", "blake3:" + "0" * 64, files))
    proc = _import(workspace, export, tmp_path / "tmp")
    _one_line_refusal(proc)
    assert "as a file and a directory" in proc.stderr


def test_a_symlink_in_the_temporary_directory_is_not_followed(workspace, tmp_path):
    """The restore makes its own directory (mkdtemp, mode 0700) and writes only below it: a symlink an
    attacker planted in $TMPDIR under any predictable name is never used."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    for planted in ("victim", "pk-import-victim", "victim@3.1.0"):
        (tmpdir / planted).symlink_to(victim)
    exported = workspace.pk("export", "ddtree").stdout.encode()
    export = tmp_path / "ddtree.patch"
    export.write_bytes(exported)
    out = _import(workspace, export, tmpdir, name="ddtree2")
    assert out.returncode == 0, out.stderr
    assert os.listdir(victim) == [] and sorted(os.listdir(tmpdir)) == sorted(
        ["victim", "pk-import-victim", "victim@3.1.0"]
    )


# ---- a bundle whose digest is right but which loading refuses: refused before anything is saved ----------
GOOD_TOML = 'name = "ok"\nversion = "2.0.0"\npackage = "sglang"\n'


def _diff(path: str) -> bytes:
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1,2 @@\n # Code Structure\n+patched\n"
    ).encode("utf-8", "surrogateescape")


def _hostile_bundles() -> list[tuple[str, dict[str, bytes]]]:
    """(what, files) of patch sets ok@2.0.0 that `patchset.load` refuses: diffs whose paths are the
    hostile corpus (the report's `sglang/../../../../outside/canary` first), role files outside the
    patch set, and patchset.toml values a loaded set may not have."""
    out = [
        (
            "climbing diff",
            {"patchset.toml": GOOD_TOML.encode(), "evil.patch": _diff("sglang/../../../../outside/canary")},
        )
    ]
    sample = ["..", "a/../../x", "/etc/passwd", "a//b", ".git/config", "a/.GIT/hooks/x", "a\\..\\b",
              "nul\0x", "x" * 256, "\udcff", "sglang/../x"]  # fmt: skip  # one of each kind of the corpus
    assert set(sample) <= set(hostile_paths())  # (the loader's own tests take the whole corpus)
    for path in sample:
        out.append((f"diff path {path!r}", {"patchset.toml": GOOD_TOML.encode(), "evil.patch": _diff(path)}))
    for role in ("../../outside/canary", "/etc/passwd", "missing.conf", "sub/../../x", ""):
        toml = GOOD_TOML + f'[files]\ndropin = "{role}"\n'
        out.append((f"role file {role!r}", {"patchset.toml": toml.encode(), "ok.conf": b"[Service]\n"}))
    for extra in ('requires = ["../x"]', 'unknown = 1', 'package_version = "not a spec"', "[vars]\nBad-Name = 1",
                  'group = 3', "[verify]\nmin_accept_length = 0"):  # fmt: skip
        out.append((f"patchset.toml {extra!r}", {"patchset.toml": (GOOD_TOML + extra + "\n").encode()}))
    out.append(("malformed TOML", {"patchset.toml": GOOD_TOML.encode() + b"[[[\n"}))
    out.append(("another name", {"patchset.toml": GOOD_TOML.replace('"ok"', '"other"').encode()}))
    out.append(
        ("a diff that is not one", {"patchset.toml": GOOD_TOML.encode(), "x.patch": b"@@ -1 +1 @@\n-a\n+b\n"})
    )
    return out


BUNDLES = _hostile_bundles()


@pytest.mark.parametrize("what, files", BUNDLES, ids=[what for what, _ in BUNDLES])
def test_a_bundle_that_loading_refuses_is_refused_and_the_workspace_is_unchanged(
    tmp_path, pristine_venv, what, files
):
    ws = make_workspace(tmp_path / "ws", pristine_venv)
    good = ws.root / "patchsets" / "ok"
    good.mkdir()
    (good / "patchset.toml").write_text('name = "ok"\nversion = "1.0.0"\npackage = "sglang"\n')
    (good / "0001.patch").write_bytes(_diff("sglang/README.md"))
    made = tmp_path / "made" / "ok"
    for rel, data in files.items():
        (made / rel).parent.mkdir(parents=True, exist_ok=True)
        (made / rel).write_bytes(data)
    bundle = tmp_path / "ok2.export"
    bundle.write_bytes(exchange.export(made, "ok@2.0.0", patchset.digest_dir(made)))
    before = every_path(ws.root)
    proc = _import(ws, bundle, tmp_path / "tmp", name="ok")
    _one_line_refusal(proc)
    assert str(bundle) in proc.stderr.splitlines()[0]
    assert every_path(ws.root) == before, what
    assert os.listdir(tmp_path / "tmp") == []
    assert "ok@1.0.0" in ws.pk("list").stdout
