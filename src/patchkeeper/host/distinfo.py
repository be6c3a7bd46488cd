"""An installed distribution's metadata files, read here only: RECORD, METADATA, entry_points.txt.

Standard library only (the agent and distcheck use it on the host; `check --wheel` on a wheel's
METADATA). Hand-written rather than importlib.metadata: the scans read one RECORD per command and
audit reads every distribution's, where the csv module and email parser cost more than the work.
"""

from __future__ import annotations

import csv
import hashlib
import os
from typing import Any, Iterable, Iterator

from .disk import is_install_record


def record_lines(record: str) -> list[str]:
    """A RECORD's lines, [] without one."""
    try:
        with open(record, newline="", encoding="utf-8") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def record_paths(record: str) -> list[str]:
    """The paths of a RECORD (CSV: path,hash,size), [] without one."""
    return paths_of(record_lines(record))


def paths_of(lines: list[str]) -> list[str]:
    """The path of each of a RECORD's lines; csv only for the rare quoted path."""
    quoted = [line for line in lines if line.startswith('"')]
    if quoted:
        paths = dict(zip(quoted, (row[0] for row in csv.reader(quoted))))
        return [paths[line] if line[0] == '"' else line.rsplit(",", 2)[0] for line in lines if line]
    return [line.rsplit(",", 2)[0] for line in lines if line]


def installation(site: str, name: str) -> dict[str, Any]:
    """What identifies this installation of a distribution, beside its name and version: who installed
    it (INSTALLER), RECORD's size and mtime (any reinstall rewrites it; a copy of the venv keeps them),
    and a sha256 of RECORD's rows that say what the release's files are (each path inside
    site-packages and its hash, sorted; not the installer's own records, bytecode or scripts), which
    two installs of one wheel share, by pip or by uv, and which a RECORD whose rows were cut loses."""

    dist_dir = os.path.join(site, name)
    try:
        with open(os.path.join(dist_dir, "INSTALLER"), encoding="utf-8", errors="replace") as f:
            installer = f.read(64).strip()
    except OSError:
        installer = ""
    record = os.path.join(dist_dir, "RECORD")
    try:
        st = os.stat(record)
        with open(record, newline="", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return {"installer": installer, "record": None, "files": None, "rows": 0}
    release = sorted(
        f"{path},{algo}={b64}"
        for path, algo, b64, _ in record_text_rows(lines)
        if not path.startswith(("../", "/")) and "__pycache__/" not in path and not is_install_record(path)
    )
    digest = hashlib.sha256("\n".join(release).encode("utf-8", "surrogateescape")).hexdigest()
    return {
        "installer": installer,
        "record": [st.st_size, st.st_mtime_ns],
        "files": f"sha256:{digest}",
        "rows": len(release),
    }


def layout(paths: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A distribution's RECORD paths as a scan needs them: its top-level directories (walked, to
    catch added files) and the paths inside site-packages that such a walk does not reach."""
    inside = [p for p in paths if not p.startswith(("../", "/"))]
    nested = [p for p in inside if "/" in p]  # each below a top directory the walk covers
    return tuple(sorted({p.partition("/")[0] for p in nested})), tuple(p for p in inside if "/" not in p)


def record_rows(record: str) -> Iterator[tuple[str, str, str, int | None]]:
    """(path, algorithm, urlsafe-b64 digest, size) of every RECORD row that carries a hash."""
    with open(record, newline="", encoding="utf-8") as f:
        lines = f.read().splitlines()
    yield from record_text_rows(lines)


def record_text_rows(lines: list[str]) -> Iterator[tuple[str, str, str, int | None]]:
    """The rows of RECORD text (its lines, without line ends), as `record_rows`.
    A path listed more than once is checked by its last hashed row, unless one of its rows has no
    hash: the installer wrote it again after the wheel did (pip lists a .pyc the wheel shipped with
    the wheel's hash and again, without one, for its own compile over it; numpy's RECORD has one).
    Lines are split at their last two commas, as csv would, unless one is quoted (a path with a comma)."""
    if any(line.startswith('"') for line in lines):
        split: Iterable[list[str]] = csv.reader(lines)
    else:
        split = (line.rsplit(",", 2) for line in lines)
    rows: dict[str, tuple[str, str, int | None] | None] = {}
    unhashed: set[str] = set()
    for row in split:
        if not row or not row[0]:
            continue
        if len(row) < 2 or not row[1] or "=" not in row[1]:
            unhashed.add(row[0])
            rows.setdefault(row[0], None)
            continue
        algo, _, b64 = row[1].partition("=")
        rows[row[0]] = (algo, b64, int(row[2]) if len(row) > 2 and row[2].isdigit() else None)
    for path, found in rows.items():
        if found is not None and path not in unhashed:
            yield path, found[0], found[1], found[2]


# what an installer writes beside a wheel's own files: recorded, but no part of what a distribution is
INSTALLER_FILES = frozenset(
    {"INSTALLER", "REQUESTED", "direct_url.json", "uv_cache.json", "uv_build.json", "RECORD"}
)


def record_identity(rows: Iterable[tuple[str, str, str, int | None]]) -> str:
    """A digest of what a distribution is, from its RECORD rows (record_rows): every file inside
    the site dir with its hash, but the files its installer writes (INSTALLER_FILES in the dist-info)
    and the rows outside the site dir (console scripts, rewritten for each environment). Two
    installs of one wheel, by pip or uv, have the same; a rebuild with other bytes has another."""

    kept = sorted(
        f"{path}\0{algo}={b64}"
        for path, algo, b64, _ in rows
        if not path.startswith(("../", "/")) and not _installer_file(path)
    )
    return "sha256:" + hashlib.sha256("\n".join(kept).encode("utf-8", "surrogateescape")).hexdigest()


def _installer_file(path: str) -> bool:
    head, _, name = path.rpartition("/")
    return name in INSTALLER_FILES and head.endswith(".dist-info") and "/" not in head


def metadata_fields(lines: Iterable[str]) -> dict[str, str]:
    """The header fields of a METADATA file (the first value of each), up to its body."""
    fields: dict[str, str] = {}
    for line in lines:
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and not key.startswith((" ", "\t")):
            fields.setdefault(key, value.strip())
    return fields


def installed_version(dist_dir: str) -> str | None:
    """The Version field of a dist-info directory's METADATA, None without one."""
    try:
        with open(os.path.join(dist_dir, "METADATA"), encoding="utf-8", errors="replace") as f:
            return metadata_fields(f).get("Version")
    except FileNotFoundError:
        return None


def console_scripts(dist_dir: str) -> set[str]:
    """The `module:function` targets of a distribution's console and GUI scripts (entry_points.txt)."""
    out: set[str] = set()
    section = ""
    try:
        with open(os.path.join(dist_dir, "entry_points.txt"), encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("["):
                    section = line.strip("[]").strip()
                elif "=" in line and section in ("console_scripts", "gui_scripts"):
                    out.add(line.split("=", 1)[1].split("[", 1)[0].strip())
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    return out
