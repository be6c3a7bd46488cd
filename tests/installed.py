"""patchkeeper installed as `uv tool install` and pipx install it: its wheel built from this checkout,
in a venv of its own without pip, its dependencies installed by uv from wheels (offline: the wheels
are packed from this venv's installed distributions, as they were installed, with fresh RECORDs)."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).parent / "uv"


def build_wheel(dest: Path) -> Path:
    """patchkeeper's wheel, built from the checkout's tracked files (no stale build/ of an earlier run)."""
    source = dest / "source"
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True
    ).stdout
    for rel in filter(None, tracked.decode().split("\0")):
        if (REPO / rel).is_file():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, source / rel)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dest / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (dest / "dist").glob("patchkeeper-*.whl")
    return wheel


def _requires(name: str) -> list[str]:
    """The names a distribution depends on (no extras), as installed here."""
    out = []
    for text in metadata.requires(name) or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(req.name)
    return out


def _closure(names: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name not in seen:
            seen[name] = None
            todo += _requires(name)
    return list(seen)


def _repack(name: str, dest: Path) -> Path:
    """An installed distribution packed back into a wheel: its site-packages files, its .dist-info
    (WHEEL gives the tags), a RECORD of their hashes; scripts are left to the installer (entry points)."""
    dist = metadata.distribution(name)
    site = Path(str(dist.locate_file("")))
    info = Path(str(dist._path))  # type: ignore[attr-defined]
    tags = [
        line.split(":", 1)[1].strip()
        for line in (info / "WHEEL").read_text().splitlines()
        if line.startswith("Tag:")
    ]
    wheel = dest / f"{info.name[: -len('.dist-info')]}-{tags[0]}.whl"
    files = sorted(
        {
            str(f)
            for f in dist.files or []
            if not str(f).startswith("..")
            and "__pycache__" not in str(f)
            and not str(f).endswith((".pyc", "/RECORD", "/INSTALLER", "/REQUESTED", "/direct_url.json"))
        }
    )
    rows = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel in files:
            data = (site / rel).read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            zf.writestr(zipfile.ZipInfo(rel), data)
            zf.getinfo(rel).external_attr = ((site / rel).stat().st_mode & 0o777) << 16
            rows.append(f"{rel},sha256={digest},{len(data)}")
        zf.writestr(f"{info.name}/RECORD", "\n".join(rows + [f"{info.name}/RECORD,,"]) + "\n")
    return wheel


def install_without_pip(root: Path) -> Path:
    """A venv without pip holding patchkeeper's wheel and its dependencies, installed by uv (what
    `uv tool install` and pipx make); returns its bin directory."""
    wheelhouse = root / "wheelhouse"
    wheelhouse.mkdir(parents=True)
    wheel = build_wheel(root / "build")
    for name in _closure(_requires("patchkeeper")):
        _repack(name, wheelhouse)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [
            str(UV),
            "pip",
            "install",
            "--quiet",
            "--offline",
            "--no-index",
            "--find-links",
            str(wheelhouse),
            "--python",
            str(venv / "bin" / "python"),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "UV_CACHE_DIR": str(root / "uv-cache")},
    )
    return venv / "bin"


def clean_env(bin_dir: Path, path: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a user of that install: its bin first on PATH (or only `path`), no
    PYTHONPATH (which would load this checkout instead of the installed package)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = path if path is not None else str(bin_dir) + os.pathsep + os.environ.get("PATH", "")
    return {**env, **extra}
