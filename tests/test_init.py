"""`patchkeeper init`, and the shipped patch sets as package data: a wheel built from this checkout
holds them, and init run from that wheel installed in a fresh venv writes a working workspace."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from conftest import REPO, Env, copy_venv

SHIPPED = sorted(
    p.relative_to(REPO / "patchsets").as_posix() for p in (REPO / "patchsets").rglob("*") if p.is_file()
)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_init_writes_a_workspace_once(tmp_path, pristine_venv):
    venv = copy_venv(
        pristine_venv, tmp_path / "venv"
    )  # never the pristine one: a dry run may claim a state dir
    ws = Env(tmp_path / "ws", venv, tmp_path / "ws" / "sglang-qwen.service")
    (tmp_path / "ws").mkdir()
    proc = ws.pk("init", "--python", f"{venv}/bin/python")
    assert "patchsets/ (ddtree, dflash, nextn)" in proc.stdout
    doc = tomllib.loads((ws.root / "patchkeeper.toml").read_text())
    assert doc["default_target"] == "local" and doc["targets"]["local"]["python"] == f"{venv}/bin/python"
    assert doc["defaults"]["package"] == "sglang"
    assert "# [targets.gpu1]" in (ws.root / "patchkeeper.toml").read_text()  # commented examples
    assert "# [defaults.service]" in (ws.root / "patchkeeper.toml").read_text()
    assert sorted(_files(ws.root / "patchsets")) == SHIPPED and (ws.root / "snapshots").is_dir()
    listed = ws.pk("list").stdout
    assert all(name in listed for name in ("ddtree@", "dflash@", "nextn@"))
    assert "would change" in ws.pk("apply", "ddtree", "--dry-run").stdout  # the target works as written

    (ws.root / "patchkeeper.toml").write_text("# mine\n")
    before = _files(ws.root)
    proc = ws.pk("init", check=2)
    assert proc.stderr.startswith("patchkeeper: error: ") and "already holds a workspace" in proc.stderr
    assert _files(ws.root) == before  # nothing overwritten


def _checkout_copy(source: Path) -> Path:
    """The checkout's tracked files (as in the work tree) copied to `source`: no stale build/."""
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True
    ).stdout
    for rel in filter(None, tracked.decode().split("\0")):
        if (REPO / rel).is_file():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, source / rel)
    return source


def test_an_editable_install_builds_without_a_warning_as_a_plain_pth_to_src(tmp_path):
    # `make install` is `pip install -e .`: setuptools' editable hook, run here as pip runs it, with every
    # warning an error (`make demo` showed its 10-line "Editable installation" warning on a fresh machine)
    source, out = _checkout_copy(tmp_path / "source"), tmp_path / "out"
    out.mkdir()
    hook = "import sys; from setuptools import build_meta; build_meta.build_editable(sys.argv[1])"
    built = subprocess.run(
        [sys.executable, "-W", "error", "-c", hook, str(out)], cwd=source, capture_output=True, text=True
    )
    assert built.returncode == 0 and "Warning" not in built.stdout + built.stderr, built.stderr[-2000:]
    (wheel,) = out.glob("patchkeeper-*.whl")
    with zipfile.ZipFile(wheel) as z:
        pth = [n for n in z.namelist() if n.endswith(".pth")]
        assert pth == ["__editable__.patchkeeper-0.1.0.pth"]  # no import finder: src/ on sys.path
        assert z.read(pth[0]).decode().strip() == str(source / "src")


def test_the_wheel_ships_the_patch_sets_and_init_runs_from_it(tmp_path):
    dist, source = tmp_path / "dist", _checkout_copy(tmp_path / "source")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-v",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    assert (
        "Warning" not in built.stdout + built.stderr
    )  # a quiet build: `make demo` showed four setuptools warnings
    (wheel,) = dist.glob("patchkeeper-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert (
        sorted(n[len("patchkeeper/shipped/") :] for n in names if n.startswith("patchkeeper/shipped/"))
        == SHIPPED
    )

    # a fresh venv with only the wheel's patchkeeper; its dependencies seen from this venv's site-packages
    # (no package index in the tests), not this checkout's patchkeeper (an editable finder is not loaded there)
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    site = next((venv / "lib").glob("python*/site-packages"))
    ours = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "click").is_dir())
    (site / "deps.pth").write_text(ours + "\n")
    alone = {
        k: v for k, v in os.environ.items() if k != "PYTHONPATH"
    }  # not a checkout's src/ first on the path
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import patchkeeper; print(patchkeeper.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env=alone,
    ).stdout
    assert where.startswith(str(site))
    ws = tmp_path / "ws"
    proc = subprocess.run(
        [str(venv / "bin" / "patchkeeper"), "-w", str(ws), "init"], capture_output=True, text=True, env=alone
    )
    assert proc.returncode == 0, proc.stderr
    assert _files(ws / "patchsets") == _files(REPO / "patchsets")
    assert (
        "ddtree@"
        in subprocess.run(
            [str(venv / "bin" / "patchkeeper"), "-w", str(ws), "list"],
            capture_output=True,
            text=True,
            check=True,
            env=alone,
        ).stdout
    )
