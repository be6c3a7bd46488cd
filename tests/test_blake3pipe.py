"""A local target recorded with blake3 stays usable when its interpreter changes to one without blake3
(host/blake3pipe.py: the agent hashes through patchkeeper's own Python), with a real Python 3.12."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import blake3
import pytest
from conftest import REPO

WHEELS = Path(os.environ.get("PK_WHEELS", REPO / ".cache" / "wheels"))
PY312 = Path("/root/.pyenv/versions/3.12.1/bin/python3")
BASE = Path(os.path.realpath(sys.executable))  # this Python's own interpreter (not the venv's link)

pytestmark = pytest.mark.skipif(
    not PY312.exists(),
    reason=f"no Python 3.12 at {PY312} (pyenv) for a target on another interpreter than patchkeeper's",
)


def _venv(python: Path, where: Path) -> Path:
    """A venv of `python` holding six 1.17.0, installed by this Python's pip (the venv has none)."""
    shutil.rmtree(where, ignore_errors=True)
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(where)], check=True)
    six = WHEELS / "six-1.17.0-py2.py3-none-any.whl"
    if not six.exists():
        pytest.fail(f"{six} is missing: run `make test`, which downloads it")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(where / "bin" / "python"),
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
    return next((where / "lib").glob("python3.*/site-packages"))


def _pk(ws: Path, *args: str, check: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "patchkeeper", "--workspace", str(ws), *args], capture_output=True, text=True
    )
    assert proc.returncode == check, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_a_target_recorded_with_blake3_stays_usable_on_a_python_without_it(tmp_path):
    """The venv is rebuilt on Python 3.12 (no blake3 there) after patchkeeper, in-process on 3.11, recorded
    its states with blake3: every verb still reads them, and ddtree's fix can be put back and rolled back."""
    assert subprocess.run([str(PY312), "-c", "import blake3"], capture_output=True).returncode != 0
    venv = tmp_path / "venv"
    site = _venv(BASE, venv)
    old = (site / "six.py").read_text()
    new = old.replace('__version__ = "1.17.0"', '__version__ = "1.17.0+fix"')
    ws = tmp_path / "ws"
    (ws / "patchsets" / "sixfix").mkdir(parents=True)
    (ws / "patchsets" / "sixfix" / "patchset.toml").write_text(
        'name = "sixfix"\nversion = "1.0.0"\npackage = "six"\n'
    )
    (ws / "patchsets" / "sixfix" / "fix.patch").write_text(
        "diff --git a/six.py b/six.py\n"
        + "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a/six.py", "b/six.py"))
    )
    (ws / "patchkeeper.toml").write_text(
        f'default_target = "t"\n[targets.t]\npython = "{venv}/bin/python"\n'
        f'package = "six"\nstate_dir = "{tmp_path / "state"}"\n'
    )
    _pk(ws, "apply", "sixfix", "--no-verify")
    state = json.loads(_pk(ws, "status", "--json").stdout)["state"]
    assert state["manifest"].startswith("blake3:")

    site = _venv(PY312, venv)  # the venv rebuilt on another Python, six installed again by pip
    assert (site / "six.py").read_text() == old
    out = _pk(ws, "status", check=1).stdout
    assert f"six was reinstalled outside patchkeeper since state {state['id']} (sixfix@1.0.0)" in out
    assert "1 of the 1 files sixfix@1.0.0 changes are back to the release's bytes" in out
    assert "cannot hash" not in _pk(ws, "audit", check=1).stdout
    _pk(ws, "apply", "sixfix", "--no-verify")
    assert (site / "six.py").read_text() == new
    assert "files match the recorded state" in _pk(ws, "status").stdout
    _pk(ws, "rollback", "--to", "baseline", "--no-verify")
    assert (site / "six.py").read_text() == old
    assert _pk(ws, "audit").returncode == 0
    entries = json.loads(_pk(ws, "log", "--json").stdout)
    assert all(e["after"]["manifest"].startswith("blake3:") for e in entries)  # one algorithm throughout


def test_the_agent_of_another_python_hashes_with_blake3_through_this_one(tmp_path):
    """The 3.12 agent runs in 3.12 (bytecode is judged there) and its digests are blake3's own."""
    from patchkeeper.host.contract import ScanRequest
    from patchkeeper.targets.local import LocalTarget
    from patchkeeper.workspace import TargetConfig

    site = _venv(PY312, tmp_path / "venv")
    big = site / "big.bin"
    big.write_bytes(os.urandom(5 << 20) + b"end")  # above disk._BIG: hashed as a big file is
    target = LocalTarget(TargetConfig(name="t", python=f"{tmp_path / 'venv'}/bin/python", package="six"))
    try:
        assert not target.same_interpreter and target.agent.pid() != os.getpid()
        assert target.agent.algorithm() == "blake3"
        rows = target.agent.scan(ScanRequest(str(site), ("six.py", "big.bin"), ())).rows
        for name in ("six.py", "big.bin"):
            assert rows[name][0] == "blake3:" + blake3.blake3((site / name).read_bytes()).hexdigest()
    finally:
        target.close()
