"""Distributions against their RECORD and the recorded fingerprint, with real pip and real wheels:
six 1.17.0 rebuilt with other code, a wheel that ships a .pyc pip compiles again, two wheels that
share a top-level file, and files added by hand before any baseline."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
from conftest import PRISTINE, REPO, SITE_REL, copy_venv, make_workspace
from made_wheels import make_wheel, pip_install, rebuilt

WHEELS = Path(os.environ.get("PK_WHEELS", REPO / ".cache" / "wheels"))


def six_wheel() -> Path:
    found = sorted(WHEELS.glob("six-1.17.0-*.whl"))
    if not found:
        pytest.fail(f"no six 1.17.0 wheel in {WHEELS}: run `make test`, which downloads it")
    return found[0]


@pytest.fixture
def denv(tmp_path, pristine_venv):
    venv = copy_venv(pristine_venv, tmp_path / "venv")
    pip_install(venv, six_wheel())
    return make_workspace(tmp_path / "ws", venv)


def audit(env, check=None) -> dict:
    return json.loads(env.pk("audit", "--json", check=check).stdout)


def test_six_rebuilt_with_other_code_and_a_consistent_record_is_found(denv, tmp_path):
    denv.pk("snapshot", "--name", "start")
    pip_install(denv.venv, six_wheel(), reinstall=True)  # the same wheel again: the same distribution
    assert audit(denv, check=0)["summary"].endswith("environment clean")
    assert denv.pk("diff", "--env", "--against", "start").returncode == 0

    with zipfile.ZipFile(six_wheel()) as z:
        six_py = z.read("six.py")
    other = rebuilt(
        six_wheel(), tmp_path / "rebuilt", {"six.py": six_py + b"\nimport os  # not the release\n"}
    )
    pip_install(denv.venv, other, reinstall=True)
    doc = audit(denv, check=1)
    found = [f for f in doc["findings"] if f["class"] == "environment"]
    assert [(f["dist"], f["kind"]) for f in found] == [("six", "rebuilt")]
    assert (
        "six 1.17.0 is another build" in found[0]["detail"] and "environment drift in six" in doc["summary"]
    )
    proc = denv.pk("diff", "--env", "--against", "start", check=1)
    assert "distribution rebuilt    six  1.17.0 is another build" in proc.stdout
    doc = json.loads(denv.pk("diff", "--env", "--against", "start", "--json", check=1).stdout)
    assert [(c["area"], c["kind"], c["subject"]) for c in doc["changes"]] == [
        ("distribution", "rebuilt", "six")
    ]


def test_a_pyc_the_wheel_ships_and_pip_compiles_again_is_no_drift(denv, tmp_path):
    import importlib.util
    import marshal
    import sys

    tag = sys.implementation.cache_tag
    shipped = (
        importlib.util.MAGIC_NUMBER
        + bytes(12)
        + marshal.dumps(compile("VALUE = 0\n", "build/mod.py", "exec"))
    )
    whl = make_wheel(
        tmp_path / "w",
        "shippyc",
        "1.0",
        {
            "shippyc/__init__.py": b"",
            "shippyc/mod.py": b"VALUE = 1\n",
            f"shippyc/__pycache__/mod.{tag}.pyc": shipped,
        },
    )
    pip_install(denv.venv, whl)
    record = (denv.site / "shippyc-1.0.dist-info" / "RECORD").read_text().splitlines()
    assert len([r for r in record if r.startswith(f"shippyc/__pycache__/mod.{tag}.pyc,")]) == 2  # as numpy's
    doc = audit(denv, check=0)
    assert (
        doc["findings"] == []
        and doc["summary"] == "no recorded state; sglang matches its RECORD; environment clean"
    )
    assert json.loads(denv.pk("env", "--json").stdout)["distributions"]["shippyc"]["differ"] == []


def test_a_top_level_file_two_wheels_install_is_shared_not_drift(denv, tmp_path):
    first = make_wheel(
        tmp_path / "w",
        "flashinfer-stand-in",
        "0.6.0",
        {"flashinfer_stand_in/__init__.py": b"", "build_backend.py": b"# flashinfer's backend\n"},
    )
    second = make_wheel(
        tmp_path / "w",
        "dlpack-stand-in",
        "0.1.0",
        {"dlpack_stand_in/__init__.py": b"", "build_backend.py": b"# the dlpack extension's backend\n"},
    )
    pip_install(denv.venv, first)
    pip_install(denv.venv, second)  # its bytes win
    doc = audit(denv, check=0)
    assert doc["findings"] == []
    assert any(
        n.startswith(
            "build_backend.py: a file of flashinfer_stand_in, also installed by dlpack_stand_in-0.1.0"
        )
        for n in doc["notes"]
    ), doc["notes"]
    out = denv.pk("audit").stdout
    assert "environment clean" in out and "build_backend.py: a file of flashinfer_stand_in" in out
    denv.pk("snapshot", "--name", "start")
    doc = audit(denv, check=0)
    assert doc["findings"] == [] and any(n.startswith("build_backend.py") for n in doc["notes"])
    fp = json.loads(denv.pk("env", "--json").stdout)
    assert fp["distributions"]["flashinfer-stand-in"]["differ"] == []
    assert fp["distributions"]["flashinfer-stand-in"]["shared"] == ["build_backend.py"]
    # bytes of neither: a change again
    (denv.site / "build_backend.py").write_text("# by hand\n")
    doc = audit(denv, check=1)
    assert {(f["dist"], f["kind"]) for f in doc["findings"]} == {
        ("flashinfer_stand_in", "changed"),
        ("dlpack_stand_in", "changed"),
    }


def test_audit_before_any_baseline_names_files_the_record_does_not_know(denv):
    site = denv.site
    for rel in ("sglang/srt/speculative/dflash_worker.py", "sglang/srt/speculative/ddtree_utils.py"):
        (site / rel).unlink(missing_ok=True)
        (site / rel).write_text("# copied in by scp\n")
    doc = audit(denv, check=1)
    added = {f["path"]: f for f in doc["findings"] if f["kind"] == "added"}
    assert set(added) == {"sglang/srt/speculative/dflash_worker.py", "sglang/srt/speculative/ddtree_utils.py"}
    assert all(f["class"] == "drift" and "not in sglang's RECORD" in f["detail"] for f in added.values())
    assert "sglang differs from its RECORD in 2 file(s)" in doc["summary"]
    proc = denv.pk("apply", "ddtree", check=2)  # adoption refuses, naming the same files
    assert "dflash_worker.py (added)" in proc.stderr and "ddtree_utils.py (added)" in proc.stderr


def test_record_rows_split_as_csv_splits_them(tmp_path):
    """distinfo.record_text_rows splits a line at its last two commas (an audit reads 70,000 rows) and
    hands the RECORD to csv when a line is quoted: on every RECORD of the real sglang venv, and on one
    with a quoted path holding a comma, its rows are csv's."""
    import csv

    from patchkeeper.host.distinfo import record_lines, record_text_rows

    def by_csv(lines):
        rows, unhashed = {}, set()
        for row in csv.reader(lines):
            if row and row[0] and (len(row) < 2 or not row[1] or "=" not in row[1]):
                unhashed.add(row[0])
                rows.setdefault(row[0], None)
            elif row and row[0]:
                algo, _, b64 = row[1].partition("=")
                rows[row[0]] = (algo, b64, int(row[2]) if len(row) > 2 and row[2].isdigit() else None)
        return [(p, *found) for p, found in rows.items() if found is not None and p not in unhashed]

    site = PRISTINE / SITE_REL
    records = sorted(site.glob("*.dist-info/RECORD"))
    assert len(records) >= 3
    for record in records:
        lines = record_lines(str(record))
        assert list(record_text_rows(lines)) == by_csv(lines) != []
    quoted = tmp_path / "RECORD"
    quoted.write_text(
        '"a,b.py",sha256=AAA,3\r\nc.py,sha256=BBB,\r\n__pycache__/c.pyc,,\r\nd.py,sha256=CCC,7\r\nd.py,,\r\n',
        newline="",
    )
    lines = record_lines(str(quoted))
    assert (
        list(record_text_rows(lines))
        == by_csv(lines)
        == [("a,b.py", "sha256", "AAA", 3), ("c.py", "sha256", "BBB", None)]
    )
