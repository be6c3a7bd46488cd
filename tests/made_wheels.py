"""Small real wheels made in a test (a consistent RECORD, installable by pip), and pip to install them."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import zipfile
from pathlib import Path


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(where: Path, name: str, version: str, files: dict[str, bytes], entry_points: str = "") -> Path:
    """A py3-none-any wheel of `files` (paths inside site-packages), with METADATA, WHEEL, an
    entry_points.txt when given, and a RECORD that lists every file with its hash."""
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    members = dict(files)
    members[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    members[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    if entry_points:
        members[f"{info}/entry_points.txt"] = entry_points.encode()
    record = "".join(f"{path},{record_hash(data)},{len(data)}\n" for path, data in members.items())
    whl = where / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    where.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(whl, "w") as z:
        for path, data in members.items():
            z.writestr(path, data)
        z.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")
    return whl


def rebuilt(wheel: Path, where: Path, change: dict[str, bytes]) -> Path:
    """`wheel` (same name, same version) with the files of `change` replaced, its RECORD made
    consistent again: another build of the same release."""
    where.mkdir(parents=True, exist_ok=True)
    out = where / wheel.name
    with zipfile.ZipFile(wheel) as src:
        members = {i.filename: src.read(i) for i in src.infolist()}
    members.update(change)
    record_name = next(n for n in members if n.endswith(".dist-info/RECORD"))
    rows = "".join(
        f"{path},{record_hash(data)},{len(data)}\n" for path, data in members.items() if path != record_name
    )
    members[record_name] = (rows + f"{record_name},,\n").encode()
    with zipfile.ZipFile(out, "w") as z:
        for path, data in members.items():
            z.writestr(path, data)
    return out


def pip_install(venv: Path, *wheels: Path, reinstall: bool = False) -> None:
    subprocess.run(
        [
            str(venv / "bin/python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            *(["--force-reinstall"] if reinstall else []),
            *map(str, wheels),
        ],
        check=True,
        capture_output=True,
    )
