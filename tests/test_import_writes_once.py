"""`patchkeeper import` of an export writes each of its files once to its temporary directory (the digest
is checked on the bytes, digest_files, by digest_dir's rule), and saves the same patch set as ever: the
exported one byte for byte, its patchset.toml's name and version changed when the import renames it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from patchkeeper.host.disk import hash_bytes, hash_file
from patchkeeper.patchset import exchange, patchset

SHIPPED = ("ddtree", "dflash", "nextn")

# The CLI in a subprocess that reports every open() for writing below an import's temporary directory:
# the interpreter's own audit events (PEP 578) observe it, nothing in patchkeeper is replaced.
WATCHED = """
import os, sys

def hook(event, args):
    if event != "open" or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    path, mode, flags = os.fsdecode(args[0]), args[1], args[2] or 0
    writes = any(c in mode for c in "wax+") if mode else bool(flags & (os.O_WRONLY | os.O_RDWR))
    if writes and "/pk-import-" in path:
        sys.stderr.write("WROTE " + path.split("/pk-import-", 1)[1].split("/", 1)[1] + "\\n")

sys.addaudithook(hook)
from patchkeeper.__main__ import run
sys.argv = ["patchkeeper", *sys.argv[1:]]
run()
"""


def _pk(ws: Path, *args: str, watched: bool = False) -> subprocess.CompletedProcess[str]:
    head = ["-c", WATCHED] if watched else ["-m", "patchkeeper"]
    proc = subprocess.run([sys.executable, *head, "-w", str(ws), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc


def _files(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _export(ws: Path, name: str, tmp_path: Path) -> Path:
    out = tmp_path / f"{name}.export"
    out.write_text(_pk(ws, "export", name).stdout)
    return out


# (the name it is imported as, --version): kept, renamed, renamed with another version
VARIANTS = [("{}", None), ("{}-copy", None), ("{}-next", "9.8.7")]


@pytest.mark.parametrize("source", SHIPPED)
@pytest.mark.parametrize("as_name, version", VARIANTS)
def test_an_import_saves_the_exported_patch_set_byte_for_byte(ws, tmp_path, source, as_name, version):
    export = _export(ws, source, tmp_path)
    exported = _files(ws / "patchsets" / source)
    name = as_name.format(source)
    if name == source:  # imported into a workspace that does not hold it yet
        for p in sorted((ws / "patchsets" / source).rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        (ws / "patchsets" / source).rmdir()
    proc = _pk(ws, "import", name, str(export), *(["--version", version] if version else []))
    saved = _files(ws / "patchsets" / name)
    assert saved.keys() == exported.keys()
    for rel in exported.keys() - {"patchset.toml"}:
        assert saved[rel] == exported[rel], rel
    was, now = (tomllib.loads(d["patchset.toml"].decode()) for d in (exported, saved))
    assert now == {**was, "name": name, "version": version or was["version"]}
    if name == source and version is None:
        assert saved["patchset.toml"] == exported["patchset.toml"]
    assert patchset.digest_dir(ws / "patchsets" / name) in proc.stdout


@pytest.mark.parametrize("source", SHIPPED)
@pytest.mark.parametrize("as_name, version", VARIANTS[1:])
def test_an_import_writes_each_file_once_to_its_temporary_directory(ws, tmp_path, source, as_name, version):
    export = _export(ws, source, tmp_path)
    proc = _pk(
        ws,
        "import",
        as_name.format(source),
        str(export),
        *(["--version", version] if version else []),
        watched=True,
    )
    wrote = sorted(
        line.removeprefix("WROTE ") for line in proc.stderr.splitlines() if line.startswith("WROTE ")
    )
    name = as_name.format(source)
    assert wrote == sorted(f"{name}/{rel}" for rel in _files(ws / "patchsets" / source)), proc.stderr


def test_the_watch_sees_a_write(ws, tmp_path):
    """The audit hook is not blind: a file opened for writing below a pk-import- directory is reported."""
    probe = tmp_path / "pk-import-probe" / "x"
    probe.parent.mkdir()
    code = WATCHED.split("from patchkeeper.__main__")[0] + f"open({str(probe / 'f')!r}, 'wb').close()\n"
    probe.mkdir()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stderr == "WROTE x/f\n"


def _digest_dir_as_it_was(directory: Path) -> str:
    """digest_dir before digest_files shared its rule: the paths sorted as Path objects."""
    parts = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        parts.append(f"{path.relative_to(directory).as_posix()}\0{hash_file(str(path))}\n")
    return hash_bytes("".join(parts).encode())


NAME = st.text(alphabet="ab-._0Zé", min_size=1, max_size=4).filter(lambda s: s not in (".", ".."))


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.lists(NAME, min_size=1, max_size=3).map("/".join), st.binary(max_size=8), max_size=8)
)
def test_digest_files_is_digest_dir_of_the_files_written(tmp_path_factory, files):
    """The bytes' digest is the digest of the directory they make, in the order digest_dir always used
    ("a-b" < "a/b" as strings, but a/b's parts sort first): digests recorded before are unchanged."""
    names = sorted(files)
    if any(a != b and b.startswith(a + "/") for a in names for b in names):
        return  # a file that is another's directory: exchange.restore refuses such an export
    directory = tmp_path_factory.mktemp("d")
    for rel, data in files.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_bytes(data)
    assert patchset.digest_files(files) == patchset.digest_dir(directory) == _digest_dir_as_it_was(directory)


def test_an_edited_export_is_refused_before_anything_is_written(ws, tmp_path):
    export = _export(ws, "ddtree", tmp_path)
    _, digest, _ = exchange.restore(export.read_bytes(), str(export))
    edited = re.sub(
        r"^(#\| )([a-z])",
        lambda m: m[1] + ("b" if m[2] != "b" else "c"),
        export.read_text(),
        count=1,
        flags=re.M,
    )
    export.write_text(edited)  # one letter of a file's line changed, its size kept
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "patchkeeper", "-w", str(ws), "import", "other", str(export)],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmpdir)},
    )
    assert proc.returncode == 2 and f"does not match the digest {digest}" in proc.stderr, proc.stderr
    assert not (ws / "patchsets" / "other").exists() and os.listdir(tmpdir) == []
