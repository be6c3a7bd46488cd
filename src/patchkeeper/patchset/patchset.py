"""Read patchsets/<name>/ into frozen values; never writes."""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import names as grammar
from ..errors import BadInput, did_you_mean
from ..host.disk import hash_bytes, hash_file
from ..workspace import VAR_NAME, TargetConfig, value_text
from . import gitbinary, gitdiff, patching, templates, varspec
from .layout import MANIFEST as MANIFEST, names as names  # re-exported: where most readers find them

KEYS = (
    "name",
    "version",
    "description",
    "package",
    "package_version",
    "requires",
    "group",
    "files",
    "vars",
    "verify",
)
MAX_TOML = 64 << 10  # patchset.toml: a few lines of metadata
MAX_PATCH = 32 << 20  # one *.patch file; the shipped ones are under 20 KB
MAX_ROLE_FILE = 1 << 20  # a role file (a systemd unit...)
MAX_VERSION = 64
MAX_TEXT = 1000  # description and the other one-line strings
UNSAFE_MODE_BITS = 0o0002  # world-writable: refused unless --force
SPECIAL_MODE_BITS = 0o7000  # setuid, setgid, sticky: refused even with --force (no state records them)


@dataclass(frozen=True)
class PatchSet:
    """A patch set version as read from its directory: its metadata, file patches and role files."""

    name: str
    version: str
    description: str
    package: str
    package_version: str  # a PEP 440 specifier, "" for any
    requires: tuple[str, ...]
    group: str | None
    files: tuple[tuple[str, bytes], ...]  # (role, its template; once bound, the bytes the role file becomes)
    patches: tuple[tuple[str, tuple[patching.FilePatch, ...]], ...]  # (patch file name, its file patches)
    digest: str  # blake3 over every file of the patch set directory (the templates, not what they render to)
    defaults: tuple[tuple[str, str], ...] = ()  # [vars]: a value for a variable no target sets
    values: tuple[tuple[str, str], ...] | None = None  # once bound to a target: the values its templates used
    sources: tuple[tuple[str, str], ...] = ()  # (role, its file in the patch set directory)
    min_accept_length: float | None = None  # [verify]: the accept-length floor that tells its algorithm apart
    types: tuple[tuple[str, varspec.VarType], ...] = ()  # [vars]: each declared variable's type

    @property
    def ident(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def paths(self) -> tuple[str, ...]:
        """Every site-packages path the patch set touches (a rename's source too), in first-touched order."""
        return tuple(
            dict.fromkeys(
                p
                for _, fps in self.patches
                for fp in fps
                for p in ((fp.source, fp.path) if fp.source is not None else (fp.path,))
            )
        )

    @property
    def variables(self) -> tuple[str, ...]:
        """Every variable its role files use, in first-use order."""
        return tuple(dict.fromkeys(n for _, data in self.files for n in templates.names(data)))

    def bind(self, config: TargetConfig) -> PatchSet:
        """The patch set with its role files rendered for a target: its [targets.NAME.vars], then the
        [vars] defaults, then (for `python`) the target's own interpreter. A value that does not fit its
        declared type, or a placeholder without a value, is refused (BadInput) before anything changes."""
        if self.values is not None:
            return self  # already bound
        values = {"python": config.python, **dict(self.defaults), **config.vars}
        hint = (
            f"set it in [targets.{config.name}.vars] of patchkeeper.toml, "
            f"or give it a default in [vars] of patchsets/{self.name}/{MANIFEST}"
        )
        types = dict(self.types)
        for name in self.variables:
            if name not in values:
                continue  # templates.render names every missing one
            vartype = types.get(name, varspec.VarType())
            why = vartype.problem(values[name])
            if why:
                origin = (
                    f"[targets.{config.name}.vars]"
                    if name in config.vars
                    else f"[vars] of patchsets/{self.name}/{MANIFEST}"
                )
                raise BadInput(
                    f"{self.ident}: {name} = {values[name][:80]!r} (from {origin}) {why}; "
                    f"{name} is declared {vartype.describe()}; nothing was changed",
                    f"fix {name} in {origin}",
                )
        where = dict(self.sources)
        files = tuple(
            (
                role,
                templates.render(
                    data,
                    values,
                    f"patchsets/{self.name}/{where.get(role, role)} (role {role} of {self.ident})",
                    hint,
                ),
            )
            for role, data in self.files
        )
        used = tuple((n, values[n]) for n in self.variables)
        return replace(self, files=files, values=used)

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "digest": self.digest,
            "description": self.description,
            "package": self.package,
            "package_version": self.package_version,
            "requires": list(self.requires),
            "group": self.group,
            "paths": list(self.paths),
            "roles": [r for r, _ in self.files],
            "variables": {n: dict(self.defaults).get(n) for n in self.variables},
            "types": {n: t.describe() for n, t in self.types},
        }


class Library:
    """The workspace's patch sets as one command reads them: each loaded from disk once, then the same
    value for every step of the command that asks (a command reads its inputs once)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._loaded: dict[str, PatchSet] = {}

    def load(self, name: str) -> PatchSet:
        if name not in self._loaded:
            self._loaded[name] = load(self.root, name)
        return self._loaded[name]


def load(root: Path, name: str) -> PatchSet:
    """patchsets/<name>/ read and checked. `name` may come from a file (a ledger entry, `requires`):
    it is checked against the grammar of a patch set name before it becomes a path."""
    if "@" in name:  # NAME@VERSION: each part checked before it names a directory
        raise _not_current(root, *grammar.check_ident(name))
    grammar.check_name(name)
    directory = root / name
    path = directory / MANIFEST
    if not path.is_file():
        known = ", ".join(names(root)) or "none"
        close = did_you_mean(name, names(root))
        raise BadInput(
            f"unknown patch set {name!r} (known: {known})" + (f"; did you mean {close!r}?" if close else ""),
            f"create {directory}/{MANIFEST}, or run `patchkeeper list`",
        )
    _cap(path, MAX_TOML)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:  # UnicodeDecodeError, tomllib.TOMLDecodeError
        raise BadInput(f"{path}: malformed TOML: {exc}", "fix the file's syntax") from None
    problems = [_unknown(key) for key in doc if key not in KEYS]
    for key in ("name", "version", "package"):
        if not isinstance(doc.get(key), str) or not doc.get(key):
            problems.append(f"{key} must be a non-empty string")
    for key in ("name", "version", "description", "package", "package_version", "group"):
        value = doc.get(key)
        if isinstance(value, str) and (len(value) > MAX_TEXT or not value.isprintable()):
            problems.append(f"{key} must be one line of printable text under {MAX_TEXT} characters")
    version = doc.get("version")
    plain = isinstance(version, str) and len(version) <= MAX_VERSION and _plain_release(version)
    if isinstance(version, str) and version and version.isprintable() and not plain:
        from packaging.version import (  # lazy: only past the plain N.N.N case
            InvalidVersion,
            Version,
        )

        try:
            if len(version) > MAX_VERSION or version != version.strip():
                raise InvalidVersion(version)
            Version(version)
        except InvalidVersion:
            problems.append(
                f"version {version[:40]!r}{'…' if len(version) > 40 else ''} is not a PEP 440 "
                f"version of at most {MAX_VERSION} characters (e.g. 1.0.0)"
            )
    if doc.get("name") not in (None, name):
        problems.append(f"name {doc.get('name')!r} does not match its directory {name!r}")
    requires = doc.get("requires", [])
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        problems.append("requires must be a list of patch set names")
    else:
        problems += [p for p in map(grammar.name_problem, requires) if p]
    if isinstance(version, str) and version and not any("version" in p for p in problems):
        bad_version = grammar.version_problem(version)  # .history/<name>/<version>/ is a directory
        if bad_version:
            problems.append(bad_version)
    links = [p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_symlink()]
    if links:  # export and the digest would read what they point to, wherever that is
        problems.append(
            f"{', '.join(links[:3])} {'is a symlink' if len(links) == 1 else 'are symlinks'}; "
            "a patch set holds regular files"
        )
    spec = doc.get("package_version", "")
    if not isinstance(spec, str):
        problems.append(
            f'package_version must be a string, a PEP 440 specifier such as "==0.5.23" (not {spec!r})'
        )
        spec = ""
    if spec and pinned(spec) is None:  # an exact pin needs no PEP 440 parser (packaging is slow to import)
        from packaging.specifiers import (  # lazy: tens of ms to import, off the fast paths
            InvalidSpecifier,
            SpecifierSet,
        )

        try:
            SpecifierSet(spec)
        except InvalidSpecifier:
            problems.append(f"package_version {spec!r} is not a PEP 440 specifier")
    for key in ("description", "group"):
        if key in doc and not isinstance(doc[key], str):
            problems.append(f"{key} must be a string")
    table = doc.get("vars", {})
    defaults: dict[str, object] = {}
    types: dict[str, varspec.VarType] = {}
    if not isinstance(table, dict):
        problems.append("[vars] must be a table of name = default, or name = { type = ..., default = ... }")
        table = {}
    for key, entry in table.items():
        if not VAR_NAME.match(key):
            problems.append(f"[vars] {key!r} is not a variable name ([a-z_][a-z0-9_]*)")
            continue
        types[key], default, bad = varspec.declared(key, entry, "[vars]")
        problems += bad
        if default is not None:
            defaults[key] = default
    checked = doc.get("verify", {})
    floor = checked.get("min_accept_length") if isinstance(checked, dict) else None
    if not isinstance(checked, dict) or set(checked) - {"min_accept_length"}:
        problems.append("[verify] takes one key, min_accept_length")
    elif floor is not None and (
        isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 1 <= floor <= 64
    ):
        problems.append(
            "[verify] min_accept_length must be a number from 1 to 64 (tokens per target forward)"
        )
    roles = doc.get("files") or {}
    if not isinstance(roles, dict):
        problems.append('[files] must be a table of role = "file"')
        roles = {}
    files, sources = [], []
    for role, rel in roles.items():
        source = (directory / str(rel)).resolve()
        if not source.is_relative_to(directory.resolve()) or not source.is_file():
            problems.append(f"[files] {role} = {rel!r} is not a file inside {directory}")
        else:
            _cap(source, MAX_ROLE_FILE)
            files.append((role, source.read_bytes()))
            sources.append((role, str(rel)))
    if problems:
        raise BadInput(f"{path}: " + "; ".join(problems), "see patchset.toml in docs/configuration.md")
    patches = []
    declared = 0  # bytes the binary patches hold inflated, in all (gitbinary.MAX_TOTAL)
    for diff in sorted(directory.glob("*.patch")):
        grammar.check_file_entry(diff.name, str(directory))  # no control character, as export requires
        _cap(diff, MAX_PATCH)
        file_patches = gitdiff.parse(diff.read_bytes().decode("utf-8", "surrogateescape"), str(diff))
        for fp in file_patches:
            check_relative(fp.path, str(diff))
            if fp.source is not None:
                check_relative(fp.source, str(diff))
            if fp.binary is not None:
                declared += gitbinary.held(fp.binary, str(diff))
        gitbinary.refuse_over_total(declared, str(directory))
        patches.append((diff.name, file_patches))
    return PatchSet(
        name=name,
        version=doc["version"],
        description=doc.get("description", ""),
        package=doc["package"],
        package_version=spec,
        requires=tuple(requires),
        group=doc.get("group"),
        files=tuple(sorted(files)),
        patches=tuple(patches),
        digest=digest_dir(directory),
        sources=tuple(sources),
        defaults=tuple((k, value_text(v)) for k, v in defaults.items()),
        types=tuple(types.items()),
        min_accept_length=float(floor) if floor is not None else None,
    )


def _not_current(root: Path, name: str, version: str) -> BadInput:
    """NAME@VERSION given where a patch set's name goes: its current version by its name, or how to put
    back a version a save kept in patchsets/.history/NAME/VERSION/."""
    current = root / name / MANIFEST
    now = tomllib.loads(current.read_text(encoding="utf-8")).get("version") if current.is_file() else None
    if now == version:
        return BadInput(
            f"{name}@{version} is the current version of patch set {name!r}: a patch set is named without @",
            f"patchkeeper apply {name}",
        )
    kept = root / ".history" / name / version  # saving.HISTORY (saving imports this module)
    if not kept.joinpath(MANIFEST).is_file():
        return BadInput(
            f"patch set {name!r} has no version {version!r} here (current: {now or 'none'})",
            f"`patchkeeper list` shows each patch set's current and kept versions; name one without @: "
            f"patchkeeper apply {name}",
        )
    return BadInput(
        f"{name}@{version} is a kept version (patchsets/.history/{name}/{version}/); a verb takes a patch "
        f"set's current version, {name}@{now}",
        f"to apply {version}, put it back as the current version: `mv patchsets/{name} "
        f"patchsets/.history/{name}/{now} && cp -a patchsets/.history/{name}/{version} patchsets/{name}`, then "
        f"`patchkeeper apply {name}` (the same the other way puts {now} back)",
    )


def _unknown(key: str) -> str:
    close = difflib.get_close_matches(key, KEYS, n=1)
    return f"unknown key {key!r}" + (
        f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(KEYS)})"
    )


def _cap(path: Path, limit: int) -> None:
    size = path.stat().st_size
    if size > limit:
        cap = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB"
        raise BadInput(
            f"{path}: {size} bytes, over the {cap} a {path.suffix or 'role'} file may hold",
            "a patch set holds source patches and small role files; ship large files another way",
        )


def unsafe_modes(sets: list[PatchSet], bits: int = UNSAFE_MODE_BITS) -> list[str]:
    """`path mode` for every file a patch set would give a mode with one of `bits` (by default:
    world-writable)."""
    return [
        f"{fp.path} {fp.new_mode:o}"
        for ps in sets
        for _, fps in ps.patches
        for fp in fps
        if fp.new_mode is not None and fp.new_mode & bits
    ]


def digest_dir(directory: Path) -> str:
    """Identity of a patch set's content: names and bytes of every file, in name order."""
    files = (p for p in directory.rglob("*") if p.is_file())  # each read a piece at a time: any size
    return _digest((p.relative_to(directory).as_posix(), hash_file(str(p))) for p in files)


def digest_files(files: dict[str, bytes]) -> str:
    """digest_dir of the directory these files (relative name: bytes) would make, without writing them."""
    return _digest((rel, hash_bytes(data)) for rel, data in files.items())


def _digest(hashes: Iterable[tuple[str, str]]) -> str:
    """The digest of (relative name, digest of its bytes) pairs, in the order of the names' parts (the
    order of the paths themselves, as digest_dir always sorted them)."""
    parts = [f"{rel}\0{h}\n" for rel, h in sorted(hashes, key=lambda pair: pair[0].split("/"))]
    return hash_bytes("".join(parts).encode())


def check_relative(rel: str, origin: str) -> None:
    """A patch path must stay inside site-packages: relative, no '..', no empty parts."""
    parts = rel.split("/")
    if "\\" in rel:
        raise BadInput(
            f"{origin}: path {rel!r} holds a backslash (a Windows path separator?)",
            "patch paths are relative to site-packages with / between directories",
        )
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in rel:
        raise BadInput(
            f"{origin}: path {rel!r} escapes site-packages",
            "patch paths must be relative to site-packages, without '..'",
        )
    problem = grammar.path_problem(rel) or grammar.control_problem(rel)  # .git (git refuses it too), too long
    if problem:
        raise BadInput(f"{origin}: {problem}", "patch paths are plain relative paths inside site-packages")


_PIN = None


def pinned(spec: str) -> tuple[int, ...] | None:
    """The release of an exact pin like "==0.5.23" (trailing zeros dropped), None for anything else."""

    global _PIN
    _PIN = _PIN or re.compile(r"\s*==\s*v?(\d+(?:\.\d+)*)\s*")
    m = _PIN.fullmatch(spec)
    return _release(m.group(1)) if m else None


def fits(spec: str, version: str) -> bool:
    """Does `version` satisfy the PEP 440 specifier `spec` (pre-releases allowed)?"""
    pin = pinned(spec)
    if pin is not None and version.replace(".", "").isdigit():  # both plain releases: compare them
        return pin == _release(version)
    from packaging.specifiers import SpecifierSet  # lazy: tens of ms to import, off the fast paths

    return SpecifierSet(spec).contains(version, prereleases=True)


def _release(text: str) -> tuple[int, ...]:
    parts = [int(p) for p in text.lstrip("v").split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _plain_release(version: str) -> bool:
    """A release number like 1.0.0: valid PEP 440, no parser needed."""
    parts = version.split(".")
    return all(p.isdigit() and p.isascii() for p in parts)
