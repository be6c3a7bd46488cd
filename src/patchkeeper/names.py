"""The grammar of each name read from a file before it becomes part of a path: a patch set's name and
version, its identity NAME@VERSION, a file inside a patch set, a site-packages path of a diff.

An export's header, a patch set's patchset.toml, a diff's file names and a ledger come from other
people and other hosts: a name is checked here before any filesystem use, and one that does not fit
is refused (BadInput) naming where it came from. What a target sends (state ids, digests, store
keys) is checked where it enters, in targets/shapes.py.
"""

from __future__ import annotations

import re

from .errors import BadInput
from .host.filekeys import (
    MAX_COMPONENT,
    path_problem as path_problem,  # a file key's grammar, the agent's too
)
from .printable import CONTROL

MAX_NAME = 100  # a patch set's name: one directory under patchsets/
MAX_VERSION = 64  # a PEP 440 version: one directory under patchsets/.history/NAME/
PATCHSET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")  # the characters of PEP 440 versions, no '/'
DIGEST = re.compile(r"(?:blake3|sha256):[0-9a-f]{64}")
_NAME_HINT = "use letters, digits, '.', '_' and '-'"


def name_problem(name: object) -> str | None:
    """Why `name` cannot name a patch set (a directory under patchsets/), or None when it can."""
    if not isinstance(name, str) or not PATCHSET_NAME.fullmatch(name):
        return f"{_shown(name)} cannot name a patch set"
    if len(name) > MAX_NAME:
        return f"a patch set name of {len(name)} characters is over the {MAX_NAME} allowed"
    return None


def version_problem(version: object) -> str | None:
    """Why `version` cannot be a patch set's version (a directory of .history/NAME/), or None."""
    if not isinstance(version, str) or not VERSION.fullmatch(version):
        return f"{_shown(version)} is not a version (e.g. 1.0.0)"
    if len(version) > MAX_VERSION:
        return f"a version of {len(version)} characters is over the {MAX_VERSION} allowed"
    return None


def check_name(name: object, origin: str = "") -> str:
    problem = name_problem(name)
    if problem:
        raise BadInput(_where(origin) + problem, _NAME_HINT)
    assert isinstance(name, str)
    return name


def check_version(version: object, origin: str = "") -> str:
    problem = version_problem(version)
    if problem:
        raise BadInput(_where(origin) + problem, "give a PEP 440 version such as 1.2.0")
    assert isinstance(version, str)
    return version


def check_ident(ident: object, origin: str = "") -> tuple[str, str]:
    """(name, version) of a patch set's identity NAME@VERSION."""
    name, at, version = ident.partition("@") if isinstance(ident, str) else ("", "", "")
    problem = (
        (None if at else f"{_shown(ident)} is not a patch set NAME@VERSION")
        or name_problem(name)
        or version_problem(version)
    )
    if problem:
        raise BadInput(
            _where(origin) + problem, "name a patch set version as NAME@VERSION, e.g. ddtree@3.1.0"
        )
    return name, version


def check_digest(digest: object, origin: str = "") -> str:
    """A content digest ALGORITHM:HEX, as patchkeeper writes them."""
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise BadInput(_where(origin) + f"{_shown(digest)} is not a digest (blake3:HEX)", "export it again")
    return digest


def component_problem(value: object, what: str) -> str | None:
    """Why `value` cannot be one path component of a name patchkeeper makes (a target's name, under
    snapshots/): text, not hidden ('.', '..', '.git'), no '/', backslash, NUL or control character,
    within NAME_MAX; None when it can."""
    if not isinstance(value, str) or not value:
        return f"{what} {_shown(value)} is empty or not text"
    if value.startswith(".") or "/" in value or "\\" in value or CONTROL.search(value):
        return f"{what} {_shown(value)} is not one plain path component (no leading '.', '/', '\\', control character)"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return f"{what} {_shown(value)} is not UTF-8"
    if size > MAX_COMPONENT:
        return f"{what} {_shown(value)} is longer than {MAX_COMPONENT} bytes"
    return None


def check_path(rel: object, origin: str = "", what: str = "path") -> str:
    """A relative path that stays inside the directory it is joined to (see path_problem)."""
    problem = path_problem(rel, what)
    if problem:
        raise BadInput(_where(origin) + problem, "paths are relative, with '/' between directories")
    assert isinstance(rel, str)
    return rel


def control_problem(rel: object, what: str = "path") -> str | None:
    """Why `rel` cannot be a file name patchkeeper writes from a patch: it holds a control character
    (C0, DEL, C1, a line or paragraph separator), which no file of a real package has and which a
    terminal would obey; None when it holds none."""
    if isinstance(rel, str) and CONTROL.search(rel):
        return f"{what} {_shown(rel)} holds a control character"
    return None


def check_file_entry(rel: object, origin: str = "") -> str:
    """A file inside a patch set directory (patchset.toml, a .patch, a role file): a relative path
    (see path_problem) without control characters."""
    problem = path_problem(rel, "file name") or control_problem(rel, "file name")
    if problem:
        raise BadInput(_where(origin) + problem, "a patch set's files have plain relative names")
    assert isinstance(rel, str)
    return rel


def _where(origin: str) -> str:
    return f"{origin}: " if origin else ""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
