"""Where a release's bytes come from: a wheel given, the workspace's wheels directory, or `pip
download` for the target's interpreter tags (download.py); a wheel's files matched to an installed RECORD."""

from __future__ import annotations

import configparser
import contextlib
import csv
import hashlib
import json
import posixpath
import re
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import names
from ..errors import BadInput, Refused
from ..host.disk import normalize_name
from ..host.distcheck import record_hash
from ..targets import Target
from . import download

# The target interpreter's tags, for `pip download` (standard library only: it runs on the target).
_TAGS = (
    "import json, platform, sys, sysconfig\n"
    "libc = platform.libc_ver()\n"
    "print(json.dumps({'implementation': sys.implementation.name, 'version': list(sys.version_info[:2]),"
    " 'abiflags': getattr(sys, 'abiflags', ''), 'platform': sysconfig.get_platform(),"
    " 'libc': [libc[0], libc[1]]}))\n"
)
_IMPLEMENTATIONS = {"cpython": "cp", "pypy": "pp", "ironpython": "ip", "jython": "jy"}


@dataclass(frozen=True)
class Tags:
    """The arguments `pip download` needs to pick a wheel for another interpreter."""

    python_version: str  # "3.11"
    implementation: str  # "cp"
    abis: tuple[str, ...]  # ("cp311", "abi3", "none")
    platforms: tuple[str, ...]  # ("manylinux_2_36_x86_64", ..., "linux_x86_64")

    def pip_args(self) -> list[str]:
        args = ["--python-version", self.python_version, "--implementation", self.implementation]
        for abi in self.abis:
            args += ["--abi", abi]
        for plat in self.platforms:
            args += ["--platform", plat]
        return args


def target_tags(target: Target, fallback: str) -> Tags:
    """Ask the target's own interpreter for its implementation, version, ABI and platform tags."""
    code, out, err = target.run_python(_TAGS, python=target.info.python)
    try:
        d: dict[str, Any] = json.loads(out) if code == 0 else {}
        impl = str(_IMPLEMENTATIONS.get(d["implementation"], d["implementation"]))
        major, minor = d["version"]
        plat = re.sub(r"[-.]", "_", d["platform"])
        libc, libc_version = d["libc"]
    except (ValueError, TypeError, KeyError):
        said = err.decode(errors="replace").strip()[-200:] or out[:200].decode(errors="replace") or str(code)
        raise Refused(
            f"cannot ask {target.name}'s interpreter for its wheel tags: {said}",
            f"fix the target's interpreter (`python` in patchkeeper.toml), or download the wheel "
            f"elsewhere and {fallback}",
        ) from None
    abis = (
        (f"{impl}{major}{minor}{d.get('abiflags', '')}", "abi3", "none")
        if impl == "cp"
        else (f"{impl}{major}{minor}", "none")
    )
    platforms = [plat]
    if plat.startswith("linux_") and libc == "glibc" and re.fullmatch(r"\d+\.\d+", libc_version or ""):
        arch = plat[len("linux_") :]
        glibc_minor = int(libc_version.split(".")[1])
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        platforms = []
        for m in range(glibc_minor, 4, -1):
            platforms.append(f"manylinux_2_{m}_{arch}")
            if m in legacy:
                platforms.append(f"{legacy[m]}_{arch}")
        platforms.append(plat)
    return Tags(f"{major}.{minor}", impl, abis, tuple(platforms))


def wheel_name_version(path: Path) -> tuple[str, str] | None:
    """(normalized name, version) from a wheel's file name, None when it is not one."""
    parts = path.name[: -len(".whl")].split("-") if path.name.endswith(".whl") else []
    if len(parts) not in (5, 6):
        return None
    return normalize_name(parts[0]), parts[1]


def same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version  # lazy: tens of ms to import, off the fast paths

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


@contextlib.contextmanager
def candidates(
    target: Target, dist: str, version: str, explicit: str | None, wheels_dir: Path | None, wheel_option: bool
) -> Iterator[tuple[str, list[Path]]]:
    """(where they came from, wheel files) that may hold `dist` `version`: --wheel, else the
    workspace's wheels directory, else `pip download` into a temporary directory (removed after).
    `wheel_option`: whether the verb has --wheel, for the hints."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise BadInput(f"--wheel {explicit}: no such file", "give the path of a .whl file")
        yield "--wheel", [path]
        return
    found = in_directory(wheels_dir, dist, version)
    if found:
        yield f"the workspace's wheels directory {wheels_dir}", found
        return
    local_python = None if target.config.ssh else target.info.python
    with downloaded(
        target_tags(target, where_to_put(wheels_dir, wheel_option)),
        target.name,
        dist,
        version,
        wheels_dir,
        local_python,
        wheel_option,
    ) as got:
        yield "pip download", got


def in_directory(wheels_dir: Path | None, dist: str, version: str) -> list[Path]:
    """The wheels of `dist` `version` in the workspace's wheels directory, by their file names."""
    if wheels_dir is None or not wheels_dir.is_dir():
        return []
    want = normalize_name(dist)
    found = []
    for path in sorted(wheels_dir.glob("*.whl")):
        nv = wheel_name_version(path)
        if nv and nv[0] == want and same_version(nv[1], version):
            found.append(path)
    return found


def where_to_put(wheels_dir: Path | None, wheel_option: bool) -> str:
    """Where a user may put a wheel patchkeeper could not download: the verb's --wheel, the wheels directory."""
    directory = (
        f"put it in the workspace's wheels directory {wheels_dir}"
        if wheels_dir
        else 'put it in a wheels directory (`wheels = "DIR"` in patchkeeper.toml)'
    )
    return f"pass it with --wheel FILE, or {directory}" if wheel_option else directory


@contextlib.contextmanager
def downloaded(
    tags: Tags,
    where: str,
    dist: str,
    version: str,
    wheels_dir: Path | None,
    local_python: str | None,
    wheel_option: bool,
) -> Iterator[list[Path]]:
    """`pip download` of `dist` `version` for an interpreter's tags (`where` names it), into a temporary
    directory removed after; `local_python`: a local target's interpreter, whose pip is tried first."""
    what = (
        f"{dist} {version} for {where} ({tags.implementation}{tags.python_version}, {tags.abis[0]}, "
        f"{tags.platforms[0]}){' (not in ' + str(wheels_dir) + ')' if wheels_dir else ''}"
    )
    with download.download(
        local_python, tags.pip_args(), f"{dist}=={version}", what, where_to_put(wheels_dir, wheel_option)
    ) as got:
        yield got


@dataclass(frozen=True)
class Unavailable:
    """Why the wheel cannot give a file: not in it (left and named), or not matching RECORD."""

    reason: str
    mismatch: bool = False


class Wheel:
    """A wheel read with zipfile: its distribution name, version, and the release bytes of an
    installed RECORD path (scripts regenerated as the installer writes them)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._zip = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise BadInput(f"{path} is not a readable wheel: {exc}", "give a .whl file") from None
        self._names = set(self._zip.namelist())
        infos = sorted({n.split("/", 1)[0] for n in self._names if n.split("/", 1)[0].endswith(".dist-info")})
        if len(infos) != 1:
            raise BadInput(
                f"{path.name} is not a wheel: it has {len(infos)} .dist-info directories", "give a .whl file"
            )
        self.dist_info = infos[0]
        self.data_dir = self.dist_info[: -len(".dist-info")] + ".data"
        meta = self.read(f"{self.dist_info}/METADATA").decode("utf-8", "replace")
        fields = dict(line.split(":", 1) for line in meta.split("\n\n", 1)[0].splitlines() if ":" in line)
        self.name = fields.get("Name", "").strip()
        self.version = fields.get("Version", "").strip()
        self._hashes: dict[str, str] | None = None

    def read(self, name: str) -> bytes:
        """A member's bytes, checked against its CRC by zipfile; a damaged one is BadInput naming the wheel."""
        try:
            return self._zip.read(name)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError) as exc:
            raise BadInput(
                f"the wheel {self.path} is damaged: its member {name} cannot be read ({exc}); "
                "nothing was changed",
                "download the wheel again (a download cut short or corrupted?)",
            ) from None

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> Wheel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _member(self, name: str) -> tuple[bytes, int] | None:
        if name not in self._names:
            return None
        info = self._zip.getinfo(name)
        executable = (info.external_attr >> 16) & 0o111
        return self.read(name), 0o755 if executable else 0o644

    def site_names(self) -> set[str]:
        """Every file the wheel installs into site-packages, by its path there."""
        out = set()
        for name in self._names:
            for prefix in (f"{self.data_dir}/purelib/", f"{self.data_dir}/platlib/"):
                if name.startswith(prefix):
                    name = name[len(prefix) :]
            if (
                not name.endswith("/")
                and not name.startswith((f"{self.data_dir}/", f"{self.dist_info}/"))
                and names.path_problem(name) is None  # a member named ../x or /x is no file of site-packages
            ):
                out.add(name)
        return out

    def site_file(self, rel: str) -> tuple[bytes, int] | None:
        """The bytes and mode the wheel installs at site-packages/`rel`, None when it installs none."""
        for name in (rel, f"{self.data_dir}/purelib/{rel}", f"{self.data_dir}/platlib/{rel}"):
            got = self._member(name)
            if got is not None:
                return got
        return None

    def _record(self) -> dict[str, str]:
        """The wheel's own RECORD: member name -> "algo:b64" hash (read once)."""
        if self._hashes is None:
            text = self.read(f"{self.dist_info}/RECORD").decode("utf-8", "replace")
            self._hashes = {
                row[0]: row[1] for row in csv.reader(text.splitlines()) if len(row) >= 2 and row[1]
            }
        return self._hashes

    def verified_file(self, rel: str) -> tuple[bytes, int] | None:
        """site_file's bytes and mode, checked against the hash the wheel's own RECORD gives them
        (BadInput when it gives none or another); None when the wheel installs no such file."""
        for name in (rel, f"{self.data_dir}/purelib/{rel}", f"{self.data_dir}/platlib/{rel}"):
            got = self._member(name)
            if got is not None:
                expected = self._record().get(name)  # "sha256=<urlsafe b64>", as RECORD writes it
                algo, _, value = (expected or "").partition("=")
                if (
                    expected is None
                    or algo not in hashlib.algorithms_guaranteed
                    or record_hash(got[0], algo) != f"{algo}:{value}"
                ):
                    raise BadInput(
                        f"the wheel {self.path}: its {name} "
                        + ("is not in its RECORD" if expected is None else "does not match its RECORD"),
                        "download the wheel again (damaged or altered?)",
                    )
                return got
        return None

    def _entry_points(self) -> dict[str, str]:
        """console_scripts and gui_scripts: script name -> "module:attr"."""
        name = f"{self.dist_info}/entry_points.txt"
        if name not in self._names:
            return {}
        parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
        parser.optionxform = str  # type: ignore[assignment]
        parser.read_string(self.read(name).decode("utf-8", "replace"))
        out = {}
        for section in ("console_scripts", "gui_scripts"):
            if parser.has_section(section):
                out.update({k: v.split("[", 1)[0].strip() for k, v in parser.items(section)})
        return out

    def release_bytes(
        self, rel: str, expected: str, site: str, prefix: str, interpreters: list[str], current: bytes | None
    ) -> tuple[bytes, int] | Unavailable:
        """The bytes (and mode) an installer wrote for the installed RECORD path `rel`, checked
        against `expected` ("algo:b64"), or the reason they cannot be given."""
        algo = expected.partition(":")[0]
        if not rel.startswith("../") and not posixpath.isabs(rel):
            for name in (rel, f"{self.data_dir}/purelib/{rel}", f"{self.data_dir}/platlib/{rel}"):
                got = self._member(name)
                if got is not None:
                    if record_hash(got[0], algo) != expected:
                        return Unavailable(f"the wheel's {name} does not match RECORD", True)
                    return got
            return Unavailable("not in the wheel (written by the installer)")
        path = posixpath.normpath(posixpath.join(site, rel))
        scripts = posixpath.join(prefix, "bin")
        if posixpath.dirname(path) == scripts:
            return self._script(posixpath.basename(path), expected, interpreters, current)
        if path.startswith(prefix.rstrip("/") + "/"):
            under = posixpath.relpath(path, prefix)
            got, kind = self._member(f"{self.data_dir}/data/{under}"), "data file"
            if got is None and under.startswith("include/"):
                got, kind = self._header(under), "header"
            if got is None:
                return Unavailable("not in the wheel")
            return (
                got
                if record_hash(got[0], algo) == expected
                else Unavailable(f"the wheel's {kind} does not match RECORD", True)
            )
        return Unavailable("outside the interpreter's prefix: not restored")

    def _header(self, under: str) -> tuple[bytes, int] | None:
        """The wheel's `.data/headers/H` for a file installed (below the prefix) at
        `include/.../<distribution>/H`: the headers scheme path, `include/site/pythonX.Y/<dist>` in a
        venv and `include/pythonX.Y/<dist>` outside one, names the distribution as its METADATA does."""
        inside = f"{self.data_dir}/headers/"
        for name in sorted(self._names):
            header = name[len(inside) :]
            if name.startswith(inside) and under.endswith("/" + header):
                directory = under[: -len(header) - 1].rsplit("/", 1)[-1]
                if normalize_name(directory) == normalize_name(self.name):
                    return self._member(name)
        return None

    def _script(
        self, name: str, expected: str, interpreters: list[str], current: bytes | None
    ) -> tuple[bytes, int] | Unavailable:
        """A script as the installer wrote it: the wheel's with its `#!python` line rewritten, or
        the launcher generated for an entry point; the shebang is the one RECORD's hash confirms."""
        algo = expected.partition(":")[0]
        shebangs = []
        if current and current.startswith(b"#!"):
            shebangs.append(current.split(b"\n", 1)[0].rstrip(b"\r"))
        for exe in interpreters:
            shebangs.append(f"#!{exe}".encode())
            shebangs.append(f"#!/bin/sh\n'''exec' {_quote(exe)} \"$0\" \"$@\"\n' '''".encode())
        bodies = []
        member = self._member(f"{self.data_dir}/scripts/{name}")
        if member is not None:
            first, _, rest = member[0].partition(b"\n")
            if not re.fullmatch(rb"#!pythonw?\r?", first):
                return (
                    member
                    if record_hash(member[0], algo) == expected
                    else Unavailable("the wheel's script does not match RECORD", True)
                )
            bodies.append((rest, member[1]))  # pip keeps the member's executable bit
        entry = self._entry_points()
        targets = [entry[name]] if name in entry else list(dict.fromkeys(entry.values()))
        for spec in targets:
            module, _, attr = spec.partition(":")
            head = attr.split(".", 1)[0]
            for q in ("'", '"'):
                bodies.append(
                    (
                        f"# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom {module.strip()} import {head}\n"
                        f"if __name__ == {q}__main__{q}:\n"
                        f"    sys.argv[0] = re.sub(r{q}(-script\\.pyw|\\.exe)?${q}, {q}{q}, sys.argv[0])\n"
                        f"    sys.exit({attr.strip()}())\n".encode(),
                        0o755,
                    )
                )
        for shebang in dict.fromkeys(shebangs):
            for body, mode in bodies:
                data = shebang + b"\n" + body
                if record_hash(data, algo) == expected:
                    return data, mode
        return Unavailable(
            "a script the installer wrote for its interpreter; no interpreter path tried "
            "gives RECORD's hash: not regenerated"
        )


def _quote(exe: str) -> str:
    return f'"{exe}"' if " " in exe else exe


def interpreters(python: str, prefix: str, version: str) -> list[str]:
    """Interpreter paths an installer may have written into a script's shebang."""
    short = ".".join(version.split(".")[:2])
    return list(
        dict.fromkeys(
            [python, *(posixpath.join(prefix, "bin", n) for n in ("python", "python3", f"python{short}"))]
        )
    )
