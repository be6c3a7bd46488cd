"""The bytecode check on the real sglang venv: a pyc written since the baseline is recompiled and
compared whatever its header says (the incident: spec_info.py compiled elsewhere and copied in)."""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import py_compile
import subprocess
from pathlib import Path

import pytest
from conftest import SITE_REL, copy_venv, drop_bytecode, make_workspace

SPEC = "sglang/srt/speculative/spec_info.py"
SPEC_PYC = "sglang/srt/speculative/__pycache__/spec_info.cpython-311.pyc"
VERSION_PYC = "sglang/__pycache__/_version.cpython-311.pyc"


@pytest.fixture
def benv(tmp_path, pristine_venv):
    return make_workspace(tmp_path / "ws", copy_venv(pristine_venv, tmp_path / "venv"))


def forge(
    source: Path, code_of: bytes, pyc: Path, checked_hash: bool = False, at: str = "/home/dev/sglang"
) -> None:
    """A pyc of `code_of`, compiled elsewhere (another path), whose header says it is `source`'s:
    a timestamp header with the source's mtime and size, or a checked hash of the source's bytes.
    Written on an inode of its own (the venv is hardlinked to the pristine one)."""
    code = compile(code_of, f"{at}/{source.name}", "exec", dont_inherit=True)
    if checked_hash:
        head = (
            importlib.util.MAGIC_NUMBER
            + (3).to_bytes(4, "little")
            + importlib.util.source_hash(source.read_bytes())
        )
    else:
        st = source.stat()
        head = (
            importlib.util.MAGIC_NUMBER
            + (0).to_bytes(4, "little")
            + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
            + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
        )
    pyc.unlink(missing_ok=True)
    pyc.write_bytes(head + marshal.dumps(code))


def bytecode(env) -> dict:
    proc = env.pk("audit", "--json", check=None)
    doc = json.loads(proc.stdout)
    return {f["path"]: f for f in doc["findings"] if f["class"] == "bytecode"}


def test_a_pyc_copied_in_after_the_baseline_is_compared_whatever_its_header_says(benv):
    site = benv.venv / SITE_REL
    benv.pk("snapshot", "--name", "start")  # records the baseline
    assert bytecode(benv) == {}
    patched = (site / SPEC).read_bytes() + b"\nINCIDENT = 'compiled from the patched spec_info.py'\n"
    forge(site / SPEC, patched, site / SPEC_PYC)  # the header matches the unchanged source
    found = bytecode(benv)
    assert (
        found[SPEC_PYC]["kind"] == "mismatch"
        and "its header matches spec_info.py" in found[SPEC_PYC]["detail"]
    )
    assert "1 pyc file(s) do not match their source" in benv.pk("audit", check=1).stdout
    # a checked-hash pyc with the source's right hash and other code
    forge(site / "sglang/_version.py", b"__version__ = 'other'\n", site / VERSION_PYC, checked_hash=True)
    found = bytecode(benv)
    assert (
        found[VERSION_PYC]["kind"] == "mismatch"
        and "source hash matches _version.py" in found[VERSION_PYC]["detail"]
    )
    assert SPEC_PYC in found  # a mismatch is never remembered as a verdict: found again
    # a pyc compiled elsewhere from the very same source: only its file name differs, not a finding
    forge(site / SPEC, (site / SPEC).read_bytes(), site / SPEC_PYC)
    forge(
        site / "sglang/_version.py",
        (site / "sglang/_version.py").read_bytes(),
        site / VERSION_PYC,
        checked_hash=True,
    )
    assert bytecode(benv) == {}
    assert bytecode(benv) == {}  # and the verdict kept says so too


def test_after_rollback_to_baseline_a_copied_pyc_is_still_reported(benv):
    site = benv.venv / SITE_REL
    benv.pk("apply", "ddtree")  # records the baseline, then patches spec_info.py among others
    patched_spec = (site / SPEC).read_bytes()
    other = site / "sglang/srt/speculative/spec_utils.py"
    other_pyc = other.parent / "__pycache__" / "spec_utils.cpython-311.pyc"
    untouched = site / "sglang/srt/utils/__init__.py"
    untouched_pyc = untouched.parent / "__pycache__" / "__init__.cpython-311.pyc"
    assert untouched_pyc.exists()
    forge(untouched, untouched.read_bytes() + b"\nX = 1\n", untouched_pyc)  # ddtree touches no such file
    assert set(bytecode(benv)) == {str(untouched_pyc.relative_to(site))}
    benv.pk("rollback", "--to", "baseline")
    # the incident: the patched spec_info.py compiled elsewhere, copied beside the released source
    forge(site / SPEC, patched_spec, site / SPEC_PYC)
    found = bytecode(benv)
    assert set(found) == {SPEC_PYC, str(untouched_pyc.relative_to(site))}
    assert not other_pyc.exists() or str(other_pyc.relative_to(site)) not in found
    proc = benv.pk("audit", check=1)
    assert "2 pyc file(s) do not match their source" in proc.stdout


def test_a_pyc_older_than_the_baseline_is_judged_by_its_header_until_audit_rehash(benv):
    """The pycs present when the baseline was recorded, and not written after the package's RECORD,
    are believed by their header (recompiling every one would cost each baseline seconds of CPU);
    `audit --rehash` recompiles them all."""
    site = benv.venv / SITE_REL
    assert drop_bytecode(site, keep=SPEC.rpartition("/")[0]) > 1000  # (what --rehash recompiles: those left)
    forge(site / SPEC, (site / SPEC).read_bytes() + b"\nBEFORE = 'the baseline'\n", site / SPEC_PYC)
    record = next(site.glob("sglang-*.dist-info")) / "RECORD"
    old = record.stat().st_mtime_ns - 10**9  # copied with an mtime from before the install kept (cp -p):
    os.utime(site / SPEC_PYC, ns=(old, old))  # the first baseline believes its header too
    benv.pk("snapshot", "--name", "start")
    assert bytecode(benv) == {}
    doc = json.loads(benv.pk("audit", "--json", "--rehash", check=1).stdout)
    assert [(f["path"], f["kind"]) for f in doc["findings"] if f["class"] == "bytecode"] == [
        (SPEC_PYC, "mismatch")
    ]


def unchecked(source: Path, code_of: bytes, pyc: Path) -> None:
    """An unchecked-hash pyc of `code_of` (py_compile's own), put where `source`'s pyc goes: Python
    runs it without looking at the source."""
    made = pyc.with_name("made.pyc")
    tmp = made.with_suffix(".py")
    tmp.write_bytes(code_of)
    py_compile.compile(
        str(tmp),
        cfile=str(made),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        doraise=True,
    )
    tmp.unlink()
    pyc.unlink(missing_ok=True)
    made.rename(pyc)


def timestamped(source: Path, code_of: bytes, pyc: Path) -> None:
    """A timestamp pyc of `code_of` made by py_compile from a copy of the source that has the
    source's mtime and size (the edit keeps its length), put where `source`'s pyc goes."""
    assert len(code_of) == source.stat().st_size
    made = pyc.with_name("made.pyc")
    tmp = made.with_suffix(".py")
    tmp.write_bytes(code_of)
    st = source.stat()
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    py_compile.compile(str(tmp), cfile=str(made), doraise=True)
    tmp.unlink()
    pyc.unlink(missing_ok=True)
    made.rename(pyc)


def runs(env, source: Path) -> str:
    """Which code the venv's Python loads for `source` (its import system's loader, which reads
    the pyc where it believes it): "foreign" (SpeculativeAlgorithX) or "source"."""
    probe = (
        "import importlib.util, sys; spec = importlib.util.spec_from_file_location('m', sys.argv[1]); "
        "print('foreign' if 'SpeculativeAlgorithX' in spec.loader.get_code('m').co_names else 'source')"
    )
    ran = subprocess.run(
        [str(env.venv / "bin/python"), "-c", probe, str(source)], capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.strip()


@pytest.mark.parametrize("kind", ["unchecked-hash", "timestamp"])
def test_a_foreign_pyc_is_refused_by_the_first_baseline(benv, kind):
    """The incident's "compiled it, copied it" before patchkeeper: a pyc Python runs without
    checking its source against other code. The first baseline refuses it like a file that
    differs from RECORD; --restore-pristine takes it out (Python compiles the source again)."""
    site = benv.venv / SITE_REL
    source = site / SPEC
    code = source.read_bytes().replace(b"class SpeculativeAlgorithm", b"class SpeculativeAlgorithX", 1)
    assert code != source.read_bytes() and len(code) == source.stat().st_size
    (unchecked if kind == "unchecked-hash" else timestamped)(source, code, site / SPEC_PYC)
    assert runs(benv, source) == "foreign"  # Python's own loader takes the pyc
    audit = benv.pk("audit", check=1)
    assert SPEC_PYC in audit.stdout and "delete them and Python compiles the source again" in audit.stdout
    for argv in (["snapshot", "--name", "start"], ["apply", "ddtree"], ["apply", "ddtree", "--dry-run"]):
        proc = benv.pk(*argv, check=2)
        assert f"{SPEC_PYC} (bytecode)" in proc.stderr and "no baseline was recorded" in proc.stderr, (
            proc.stderr
        )
    assert "baseline" not in benv.pk("log", check=None).stdout
    foreign = (site / SPEC_PYC).read_bytes()
    benv.pk("snapshot", "--name", "start", "--restore-pristine")
    assert not (site / SPEC_PYC).exists()
    assert bytecode(benv) == {}
    assert runs(benv, source) == "source"
    assert foreign  # (its bytes were backed up by the transaction; the ledger names it)
    assert SPEC_PYC in benv.pk("log").stdout
