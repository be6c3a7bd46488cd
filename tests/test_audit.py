"""`patchkeeper audit` on a real site-packages: sglang plus real markupsafe and six wheels, corrupted."""

from __future__ import annotations

import json
import os
import pty
import py_compile
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, SITE_REL, copy_venv, edit_file, make_workspace, tree
from helpers import heavy, imported
from made_wheels import pip_install

from patchkeeper.host.answers import Comparison
from patchkeeper.host.statcache import StatCache
from patchkeeper.targets import shapes

WHEELS = Path(os.environ.get("PK_WHEELS", REPO / ".cache" / "wheels"))


@pytest.fixture(scope="session")
def audit_pristine(pristine_venv, tmp_path_factory) -> Path:
    """The sglang venv with markupsafe (it has a compiled .so) and six installed from real wheels."""
    wheels = sorted(WHEELS.glob("markupsafe-*.whl")) + sorted(WHEELS.glob("six-*.whl"))
    if len(wheels) < 2:
        pytest.fail(
            f"markupsafe and six wheels are missing from {WHEELS}: run `make test`, which downloads them"
        )
    venv = tmp_path_factory.mktemp("audit-pristine") / "venv"
    subprocess.run(["cp", "-a", str(pristine_venv), str(venv)], check=True)
    pip_install(venv, *wheels)
    return venv


@pytest.fixture
def aenv(tmp_path, audit_pristine):
    return make_workspace(tmp_path / "ws", copy_venv(audit_pristine, tmp_path / "venv"))


def audit(env, *args, check=None):
    proc = env.pk("audit", "--json", *args, check=check)
    return proc.returncode, json.loads(proc.stdout)


def found(doc, cls):
    return {f["path"]: f for f in doc["findings"] if f["class"] == cls}


def test_clean_target_then_applied_patch_sets_are_patched_not_drift(aenv):
    code, doc = audit(aenv)
    assert code == 0 and doc["findings"] == [] and doc["files"] > 10_000
    assert "no recorded state; sglang matches its RECORD; environment clean" == doc["summary"]
    aenv.pk("apply", "ddtree")
    code, doc = audit(aenv)
    assert code == 0 and doc["counts"]["drift"] == 0
    patched = found(doc, "patched")
    assert patched["sglang/srt/speculative/ddtree_utils.py"]["kind"] == "added"
    assert patched["@dropin"]["kind"] == "added"  # the drop-in beside the host's unit, which is not touched
    out = aenv.pk("audit").stdout
    assert "ddtree_utils.py" not in out and f"{doc['counts']['patched']} patched" in out
    assert (
        out.strip().splitlines()[-1]
        == f"code state matches {doc['state']['id']} (ddtree@3.1.0); environment clean"
    )
    assert "ddtree_utils.py" in aenv.pk("audit", "-v").stdout


def test_hand_edits_after_apply_are_drift(aenv):
    aenv.pk("apply", "ddtree")
    spec = aenv.site / "sglang/srt/speculative/spec_info.py"
    edit_file(spec, spec.read_bytes() + b"# hot fix\n")
    (aenv.site / "sglang/srt/copied_in.py").write_text("X = 1\n")
    edit_file(aenv.unit, b"[Service]\nExecStart=/bin/true\n")
    code, doc = audit(aenv)
    assert code == 1
    drift = found(doc, "drift")
    assert {k: v["kind"] for k, v in drift.items()} == {
        "sglang/srt/speculative/spec_info.py": "changed",
        "sglang/srt/copied_in.py": "added",
        "@unit": "changed",
    }
    assert "sglang/srt/speculative/spec_info.py" not in found(doc, "patched")  # each file once
    assert "3 file(s) changed outside patchkeeper" in doc["summary"]


def _in_their_place(env, links: bool = True) -> None:
    """After `apply ddtree`: a directory and a named pipe where recorded files were, one file removed,
    and with `links` a symbolic link where another was and the unit a symbolic link."""
    env.pk("apply", "ddtree")
    spec_dir = env.site / "sglang/srt/speculative"
    (spec_dir / "ddtree_utils.py").unlink()  # a patch set's own file
    (spec_dir / "ddtree_utils.py").mkdir()
    (env.site / "sglang/srt/server_args.py").unlink()
    os.mkfifo(env.site / "sglang/srt/server_args.py")
    (env.site / "sglang/version.py").unlink()
    if links:
        (spec_dir / "spec_info.py").rename(spec_dir / "spec_info.py.real")
        (spec_dir / "spec_info.py").symlink_to("spec_info.py.real")
        env.unit.rename(env.unit.with_name("real.service"))
        env.unit.symlink_to("real.service")


def _standing_drift(state_id: str, links: bool = True) -> dict[str, tuple[str, str]]:
    gone = f"removed since state {state_id}, by no transaction"
    instead = "stands in its place, not a regular file"
    drift = {
        "sglang/srt/speculative/spec_info.py": (
            "removed",
            f"{gone}: a symbolic link (to spec_info.py.real) {instead}",
        ),
        "sglang/srt/speculative/spec_info.py.real": (
            "added",
            f"added since state {state_id}, by no transaction",
        ),
        "sglang/srt/speculative/ddtree_utils.py": ("removed", f"{gone}: a directory {instead}"),
        "sglang/srt/server_args.py": ("removed", f"{gone}: a named pipe {instead}"),
        "sglang/version.py": ("removed", gone),
        "@unit": ("removed", f"{gone}: a symbolic link (to real.service) {instead}"),
    }
    if not links:
        for key in (
            "sglang/srt/speculative/spec_info.py",
            "sglang/srt/speculative/spec_info.py.real",
            "@unit",
        ):
            del drift[key]
    return drift


def test_a_file_with_a_link_a_directory_or_a_pipe_in_its_place_is_said_so_not_only_removed(aenv):
    """A scan digests regular files only: a recorded file whose path now holds a symbolic link, a
    directory or a named pipe is gone as a file, and the audit says what stands there instead, for
    the role file (the unit) too. A file really gone is only removed."""
    _in_their_place(aenv)
    code, doc = audit(aenv)
    assert code == 1
    drift = {k: (v["kind"], v["detail"]) for k, v in found(doc, "drift").items()}
    assert drift == _standing_drift(doc["state"]["id"])
    out = aenv.pk("audit", check=1).stdout
    assert "sglang/srt/server_args.py  removed since" in out and "a named pipe stands in its place" in out


def test_what_stands_in_a_files_place_is_said_again_from_the_seal(aenv, monkeypatch):
    """The tree's answer given again from its seal (no comparison made) says what stands in each
    removed file's place as the audit that sealed it did (a directory, a named pipe: a tree with a
    symbolic link among the files it covers is never sealed, seal.py)."""
    from patchkeeper import workspace
    from patchkeeper.change.session import Session
    from patchkeeper.checks import audit as audit_core
    from patchkeeper.host import compare, statcache

    _in_their_place(aenv, links=False)
    monkeypatch.setattr(statcache.StatCache, "GRANULARITY_NS", -(10**12))  # seal even these fresh files
    made = []
    comparison = compare.comparison
    monkeypatch.setattr(compare, "comparison", lambda *a: made.append(1) or comparison(*a))
    ws = workspace.load(aenv.root)
    reports = []
    for _ in range(3):  # sealed by the first or the second (once the scan's stat cache exists)
        made.clear()
        with Session(ws, None, "audit", write=False) as s:
            reports.append(audit_core.audit_target(s.target, s.ledger))
    assert made == []  # the third compared nothing: its answer is the seal's
    for report in reports:
        drift = {f.path: (f.kind, f.detail) for f in report.findings if f.cls == "drift"}
        assert drift == _standing_drift(report.state.id, links=False)


def test_the_controller_refuses_a_comparison_saying_what_stands_at_a_file_it_does_not_find_gone():
    row = ("blake3:" + "0" * 64, 1, 0o644)
    shapes.answer("compare_many", [Comparison({"sglang/a.py": (row, None)}, {"sglang/a.py": "a directory"})])
    for standing in ({"sglang/b.py": "a directory"}, {"sglang/c.py": "a directory"}, {"sglang/a.py": 7}):
        pairs = {"sglang/a.py": (row, None), "sglang/c.py": (row, row)}
        with pytest.raises(shapes.Malformed):
            shapes.answer("compare_many", [Comparison(pairs, standing)])  # type: ignore[arg-type]


def test_environment_corruption_is_found_and_the_probe_names_the_broken_library(aenv, audit_pristine):
    site = aenv.site
    so = next((site / "markupsafe").glob("_speedups*.so"))
    init = site / "markupsafe/__init__.py"
    edit_file(init, init.read_bytes()[:100])  # truncated
    edit_file(so, b"\x7fELF garbage, not a library")  # replaced .so
    (site / "six.py").unlink()  # deleted
    pip = aenv.venv / "bin/pip"  # a console script whose shebang was rewritten (venv relocated): no alarm
    edit_file(pip, b"#!/opt/elsewhere/bin/python3\n" + pip.read_bytes().split(b"\n", 1)[1])
    code, doc = audit(aenv, "--probe", "markupsafe._speedups", "--probe", "pip")
    assert code == 1
    env = found(doc, "environment")
    assert set(env) == {"markupsafe/__init__.py", f"markupsafe/{so.name}", "six.py"}
    assert env["six.py"]["kind"] == "missing" and env["six.py"]["dist"] == "six"
    assert (
        env[f"markupsafe/{so.name}"]["kind"] == "changed"
        and env["markupsafe/__init__.py"]["dist"] == "markupsafe"
    )
    probe = found(doc, "probe")
    assert set(probe) == {"markupsafe._speedups"}  # pip imports fine
    assert probe["markupsafe._speedups"]["detail"].startswith("ImportError: ")
    assert str(so) in probe["markupsafe._speedups"]["detail"]
    assert doc["summary"] == (
        "no recorded state; sglang matches its RECORD; environment drift in markupsafe, six; "
        "import fails: markupsafe._speedups"
    )
    assert doc["counts"]["bytecode"] == 0  # the truncated module's pyc is stale: recompiled, never run
    assert tree(audit_pristine) != tree(aenv.venv) and (audit_pristine / SITE_REL / "six.py").exists()


def test_a_distributions_file_with_a_directory_or_a_pipe_in_its_place_says_which(aenv):
    """Another distribution's RECORD check follows links (a link to the right bytes is no finding) and
    says what stands where a file should: a directory, a named pipe (never opened)."""
    site = aenv.site
    (site / "six.py").unlink()
    (site / "six.py").mkdir()
    typed = site / "markupsafe/py.typed"
    typed.unlink()
    os.mkfifo(typed)
    init = site / "markupsafe/__init__.py"
    init.rename(init.with_name("__init__.py.real"))
    init.symlink_to("__init__.py.real")
    code, doc = audit(aenv)
    assert code == 1
    env = {k: (v["kind"], v["detail"]) for k, v in found(doc, "environment").items()}
    assert env == {
        "six.py": ("not-a-file", "RECORD lists a file; this is a directory, not a regular file"),
        "markupsafe/py.typed": (
            "not-a-file",
            "RECORD lists a file; this is a named pipe, not a regular file",
        ),
    }


def test_bytecode_stale_mismatched_and_sourceless(aenv):
    site = aenv.site
    src = site / "sglang/_version.py"
    pyc = site / "sglang/__pycache__/_version.cpython-311.pyc"
    assert pyc.exists()
    st = src.stat()
    old = src.read_bytes()
    new = old.replace(b"0.5.23", b"9.9.99")
    assert len(new) == len(old)
    edit_file(src, new)
    code, doc = audit(aenv)
    assert code == 1 and found(doc, "drift")["sglang/_version.py"]["kind"] == "changed"
    # the pyc is now stale by its header: Python recompiles it, so it is counted, not a finding
    assert found(doc, "bytecode") == {} and "1 pyc file(s) are older than their source" in doc["notes"][0]
    # the same edit with the old mtime: the pyc header matches, its code does not, Python would run it
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    code, doc = audit(aenv)
    pyc_finding = found(doc, "bytecode")["sglang/__pycache__/_version.cpython-311.pyc"]
    assert pyc_finding["kind"] == "mismatch" and "runs the old code" in pyc_finding["detail"]
    # an unchecked-hash pyc compiled from other code than its source
    helper = site / "six.py"
    other = aenv.root / "other.py"
    other.write_text("print('not six')\n")
    six_pyc = site / "__pycache__/six.cpython-311.pyc"
    six_pyc.unlink()
    py_compile.compile(
        str(other), cfile=str(six_pyc), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    # a pyc beside a module without source is imported; one in __pycache__ without source is not
    py_compile.compile(str(other), cfile=str(site / "sglang/legacy.pyc"))
    py_compile.compile(str(other), cfile=str(site / "sglang/__pycache__/gone.cpython-311.pyc"))
    code, doc = audit(aenv)
    byte = found(doc, "bytecode")
    assert byte["__pycache__/six.cpython-311.pyc"]["kind"] == "mismatch"
    assert byte["sglang/legacy.pyc"]["kind"] == "sourceless"
    assert "sglang/__pycache__/gone.cpython-311.pyc" not in byte
    assert helper.exists() and "pyc file(s) do not match their source" in doc["summary"]


def test_stat_cache_is_never_fooled_by_same_size_edits_in_the_same_tick(aenv):
    six = aenv.site / "six.py"
    good = six.read_bytes()
    bad = good.replace(b"Utilities for writing", b"Utilities FOR writing")
    assert len(bad) == len(good) and bad != good
    cache = aenv.venv / ".patchkeeper/audit/six-1.17.0.dist-info.json"

    # racily clean: written, audited at once, rewritten in place within the same tick, same size
    edit_file(six, good)
    assert audit(aenv)[0] == 0
    st = six.stat()
    six.write_bytes(bad)  # our own inode now (edit_file unlinked the hardlink), so in place is safe
    os.utime(six, ns=(st.st_atime_ns, st.st_mtime_ns))
    code, doc = audit(aenv)
    assert code == 1 and found(doc, "environment")["six.py"]["kind"] == "changed"

    # an old entry that the cache holds: an in-place same-size rewrite with the mtime put back
    six.write_bytes(good)
    time.sleep(2.2)  # past the cache's timestamp granularity, so the entry is cached
    assert audit(aenv)[0] == 0
    assert "six.py" in StatCache(str(cache)).entries
    st = six.stat()
    six.write_bytes(bad)
    os.utime(six, ns=(st.st_atime_ns, st.st_mtime_ns))
    code, doc = audit(aenv)
    assert code == 1 and found(doc, "environment")["six.py"]["kind"] == "changed"

    # the managed package's cache (blake3, under a recorded state) likewise
    aenv.pk("snapshot", "--name", "base")
    ver = aenv.site / "sglang/_version.py"
    edit_file(ver, ver.read_bytes())
    assert audit(aenv)[1]["counts"]["drift"] == 0
    st = ver.stat()
    ver.write_bytes(ver.read_bytes().replace(b"0.5.23", b"0.5.24"))
    os.utime(ver, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert found(audit(aenv)[1], "drift")["sglang/_version.py"]["kind"] == "changed"


def test_audit_all_runs_every_target_into_one_table(tmp_path, audit_pristine):
    second = copy_venv(audit_pristine, tmp_path / "venv2")
    env = make_workspace(
        tmp_path / "ws",
        copy_venv(audit_pristine, tmp_path / "venv1"),
        f'\n[targets.ct2]\npython = "{second}/bin/python"\npackage = "sglang"\n'
        '\n[targets.gone]\npython = "/nonexistent/bin/python"\npackage = "sglang"\n',
    )
    (second / SITE_REL / "six.py").unlink()
    proc = env.pk("audit", "--all", check=2)  # one target cannot be reached
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["target", "state", "drift"]
    rows = {line.split()[0]: line for line in lines[1:-1]}
    assert "environment drift in six" in rows["ct2"] and "environment clean" in rows["local"]
    assert "error:" in rows["gone"]
    assert lines[-1] == "3 target(s): 1 clean, 1 with findings, 0 unreachable, 1 in error"  # no venv there
    doc = json.loads(env.pk("audit", "--all", "--json", check=2).stdout)
    assert doc["ct2"]["counts"]["environment"] == 1 and doc["local"]["exit"] == 0 and "error" in doc["gone"]
    assert heavy(imported(env, "audit", "--all", code=2)) == []  # nor do its local targets' worker processes


def test_status_shows_the_audit_line_once_the_cache_is_warm(aenv):
    aenv.pk("apply", "nextn")
    assert "audit:" not in aenv.pk("status").stdout
    audit(aenv)
    out = aenv.pk("status").stdout
    assert "audit: code state matches" in out and "(nextn@" in out


def test_bad_probe_name_is_refused_and_nothing_runs(aenv):
    proc = aenv.pk("audit", "--probe", "os; rm -rf /", check=2)
    assert "is not a module name" in proc.stderr and proc.stdout == ""
    assert not (aenv.venv / ".patchkeeper").exists()


def test_bytecode_verdict_cache_follows_the_pyc_and_its_source(aenv):
    """Warm audits reuse a pyc's verdict only while neither the pyc nor its source has changed."""
    site = aenv.site
    time.sleep(2.2)  # past the racy window: now verdicts are cached
    code, doc = audit(aenv)
    assert code == 0 and found(doc, "bytecode") == {}
    assert (aenv.state_dir / "audit" / "bytecode.cache").stat().st_size > 1000
    # a pyc replaced by bytecode of other code (unchecked hash: Python runs it without looking)
    pyc = site / "sglang/__pycache__/_version.cpython-311.pyc"
    other = aenv.root / "other.py"
    other.write_text("VERSION = 'not sglang'\n")
    pyc.unlink()
    py_compile.compile(
        str(other), cfile=str(pyc), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    code, doc = audit(aenv)
    assert found(doc, "bytecode")["sglang/__pycache__/_version.cpython-311.pyc"]["kind"] == "mismatch"
    # a source changed under a clean, cached pyc whose header still matches (mtime put back)
    src = site / "sglang/srt/speculative/spec_info.py"
    spc = site / "sglang/srt/speculative/__pycache__/spec_info.cpython-311.pyc"
    st = src.stat()
    edit_file(src, src.read_bytes().replace(b"DFLASH = auto()", b"DFLAZH = auto()"))
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert spc.exists()
    code, doc = audit(aenv)
    assert (
        found(doc, "bytecode")["sglang/srt/speculative/__pycache__/spec_info.cpython-311.pyc"]["kind"]
        == "mismatch"
    )


def test_a_hand_edit_recorded_by_a_snapshot_is_not_called_patched(aenv):
    aenv.pk("apply", "ddtree")
    version = aenv.site / "sglang/version.py"
    edit_file(version, version.read_bytes() + b"# hand edit\n")
    aenv.pk("snapshot", "--name", "with-edit")
    code, doc = audit(aenv, "-v")
    assert "sglang/version.py" not in found(doc, "patched")
    assert found(doc, "drift")["sglang/version.py"]["kind"] == "changed"
    assert "sglang/srt/speculative/spec_info.py" in found(doc, "patched") and code == 1


PY312 = Path("/root/.pyenv/versions/3.12.1/bin/python3")


@pytest.mark.skipif(
    not PY312.exists(), reason=f"no Python 3.12 at {PY312} to make a target of another version"
)
def test_a_target_on_another_python_is_judged_by_its_own_interpreter(tmp_path, pristine_venv):
    """A 3.12 target's pyc of other code (unchecked hash) is found: its agent runs in 3.12, over the wire."""
    import sys

    from patchkeeper.targets.local import LocalTarget
    from patchkeeper.workspace import TargetConfig

    venv = tmp_path / "venv312"
    subprocess.run([str(PY312), "-m", "venv", "--without-pip", str(venv)], check=True)
    six = sorted(WHEELS.glob("six-*.whl"))[-1]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin/python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--no-compile",
            str(six),
        ],
        check=True,
        capture_output=True,
    )
    site = venv / "lib/python3.12/site-packages"
    other = tmp_path / "other.py"
    other.write_text("def ensure_str(s):\n    return 'not six'\n")
    pyc = site / "__pycache__/six.cpython-312.pyc"
    subprocess.run(
        [
            str(venv / "bin/python"),
            "-c",
            "import py_compile, sys; py_compile.compile(sys.argv[1], "
            "cfile=sys.argv[2], invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)",
            str(other),
            str(pyc),
        ],
        check=True,
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "patchkeeper.toml").write_text(
        f'default_target = "py312"\n\n[targets.py312]\npython = "{venv}/bin/python"\npackage = "six"\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "patchkeeper", "--workspace", str(ws), "audit", "--json"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert found(json.loads(proc.stdout), "bytecode")["__pycache__/six.cpython-312.pyc"]["kind"] == "mismatch"

    other_python = LocalTarget(TargetConfig(name="py312", python=f"{venv}/bin/python", package="six"))
    same_python = LocalTarget(
        TargetConfig(name="local", python=f"{pristine_venv}/bin/python", package="sglang")
    )
    try:
        assert not other_python.same_interpreter and other_python.agent.interpreter().python.startswith(
            "3.12."
        )
        assert other_python.agent.pid() != os.getpid()  # a subprocess in the target's interpreter
        assert same_python.same_interpreter and same_python.agent.pid() == os.getpid()  # in-process
    finally:
        other_python.close()
        same_python.close()


def test_rehash_finds_a_write_through_a_shared_mapping_that_the_caches_cannot_see(baselined):
    """A write through mmap keeps every field of a file's identity on tmpfs: the stat cache and the
    seals believe the file unchanged; `audit --rehash` reads and hashes every file again."""
    env = baselined
    import mmap

    from conftest import drop_bytecode

    assert drop_bytecode(env.site) > 1000
    env.pk("snapshot", "--name", "base")
    version = env.site / "sglang/_version.py"
    edit_file(
        version, version.read_bytes()
    )  # an inode of its own: the mapping must not write into the pristine venv
    time.sleep(2.2)  # past the racily-clean window: its identity may now be remembered
    assert audit(env)[0] == 0 and audit(env)[0] == 0  # warm: the caches and the tree's seal are written
    before = version.stat()
    with open(version, "r+b") as f, mmap.mmap(f.fileno(), 0) as mapped:
        at = mapped.find(b"0.5.23")
        assert at >= 0
        mapped[at : at + 6] = b"6.6.66"
    after = version.stat()
    if (after.st_mtime_ns, after.st_ctime_ns) != (before.st_mtime_ns, before.st_ctime_ns):
        pytest.skip("this file system moves mtime for writes through a mapping: nothing for --rehash to find")
    assert audit(env)[0] == 0  # what the caches say
    code, doc = audit(env, "--rehash")
    assert code == 1 and found(doc, "drift")["sglang/_version.py"]["kind"] == "changed"


def test_audit_during_a_change_waits_for_it_then_answers(baselined):
    env = baselined
    import signal

    env.pk("status")
    change = subprocess.Popen(
        [sys.executable, "-m", "patchkeeper", "--workspace", str(env.root), "apply", "ddtree"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PATCHKEEPER_CRASH_AT": "journal-committed", "PATCHKEEPER_CRASH_SIGNAL": "STOP"},
    )
    try:
        os.waitid(os.P_PID, change.pid, os.WSTOPPED | os.WNOWAIT)  # stopped mid-change, holding the lock
        refused = env.pk("audit", "--wait", "0", check=2)
        assert f"is locked by pid {change.pid}" in refused.stderr and "--wait SECONDS" in refused.stderr
        waiting = subprocess.Popen(
            [sys.executable, "-m", "patchkeeper", "--workspace", str(env.root), "audit", "--wait", "600"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert "locked by pid" in waiting.stderr.readline()  # it waits...
        os.kill(change.pid, signal.SIGCONT)  # ...for the change to end
        out, err = waiting.communicate()
        assert waiting.returncode == 0, err
        assert out.strip().splitlines()[-1].startswith("code state matches") and "(ddtree@" in out
    finally:
        os.kill(change.pid, signal.SIGCONT)
        change.wait()


def _bar_counts(env, *args: str) -> tuple[subprocess.CompletedProcess, list[tuple[int, int]]]:
    """Run `audit ARGS` with stderr on a pseudo-terminal (stdout a pipe); the (files read, found)
    counts click's bar drew there, in order."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "patchkeeper", "--workspace", str(env.root), "audit", *args],
        stdout=subprocess.PIPE,
        stderr=slave,
        text=True,
        env={**os.environ, "COLUMNS": "120"},
    )
    os.close(slave)
    drawn = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the command ended and closed its end
            break
        if not chunk:
            break
        drawn += chunk
    os.close(master)
    out = proc.stdout.read() if proc.stdout else ""
    proc.wait()
    counts = [
        (int(d), int(t)) for d, t in re.findall(r"audit: files read +\[[#-]*\] +(\d+)/(\d+)", drawn.decode())
    ]
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, drawn.decode()), counts


def test_rehash_on_a_terminal_shows_the_files_read_as_they_are_read(aenv):
    """`audit --rehash` reads every file of the venv in one call to the agent: click's bar on stderr
    moves with the agent's count of files read (not only at the end), and reaches the total. (The pycs
    of one directory kept: what --rehash compiles, a phase of its own, is not what this is about.)"""
    from conftest import drop_bytecode

    assert drop_bytecode(aenv.site, keep="sglang/srt/speculative") > 1000
    proc, counts = _bar_counts(aenv, "--rehash")
    assert proc.returncode == 0, proc.stderr
    assert "environment clean" in proc.stdout
    between = sorted({(done, total) for done, total in counts if 0 < done < total})
    assert len({done for done, _ in between}) >= 2, counts  # seen moving, at two values at least
    done, total = counts[-1]
    assert done == total and total > 1000, counts
    assert [d for d, _ in counts] == sorted(d for d, _ in counts)  # it never goes back
    quiet, none = _bar_counts(aenv, "--rehash", "--json")  # a JSON document: no bar
    assert quiet.returncode == 0 and none == [] and json.loads(quiet.stdout)["target"]
