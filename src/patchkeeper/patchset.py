"""Read patchsets/<name>/ into frozen values; never writes."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from . import patching, templates
from .host.disk import hash_bytes
from .errors import BadInput

MANIFEST = "patchset.toml"


@dataclass(frozen=True)
class PatchSet:
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

    @property
    def ident(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def paths(self) -> tuple[str, ...]:
        """Every site-packages path the patch set touches, in first-touched order."""
        return tuple(dict.fromkeys(fp.path for _, fps in self.patches for fp in fps))

    @property
    def variables(self) -> tuple[str, ...]:
        """Every variable its role files use, in first-use order."""
        return tuple(dict.fromkeys(n for _, data in self.files for n in templates.names(data)))

    def bind(self, target_vars: dict[str, str], target: str) -> "PatchSet":
        """The patch set with its role files rendered for a target (its vars, then the [vars] defaults).

        A placeholder that has neither is refused (BadInput) by variable and file, before anything changes."""
        values = {**dict(self.defaults), **target_vars}
        hint = (f"set it in [targets.{target}.vars] of patchkeeper.toml, "
                f"or give it a default in [vars] of patchsets/{self.name}/{MANIFEST}")
        where = dict(self.sources)
        files = tuple((role, templates.render(data, values, f"patchsets/{self.name}/{where.get(role, role)} "
                                              f"(role {role} of {self.ident})", hint))
                      for role, data in self.files)
        used = tuple((n, values[n]) for n in self.variables)
        return replace(self, files=files, values=used)

    def summary(self) -> dict:
        return {"name": self.name, "version": self.version, "digest": self.digest,
                "description": self.description, "package": self.package,
                "package_version": self.package_version, "requires": list(self.requires),
                "group": self.group, "paths": list(self.paths), "roles": [r for r, _ in self.files],
                "variables": {n: dict(self.defaults).get(n) for n in self.variables}}


def names(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / MANIFEST).is_file() and not p.name.startswith("."))


def load(root: Path, name: str) -> PatchSet:
    directory = root / name
    path = directory / MANIFEST
    if not path.is_file():
        known = ", ".join(names(root)) or "none"
        raise BadInput(f"unknown patch set {name!r} (known: {known})",
                       f"create {directory}/{MANIFEST}, or run `patchkeeper list`")
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"{path}: malformed TOML: {exc}", "fix the file's syntax") from None
    problems = []
    for key in ("name", "version", "package"):
        if not isinstance(doc.get(key), str) or not doc.get(key):
            problems.append(f"{key} must be a non-empty string")
    if doc.get("name") not in (None, name):
        problems.append(f"name {doc.get('name')!r} does not match its directory {name!r}")
    requires = doc.get("requires", [])
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        problems.append("requires must be a list of patch set names")
    spec = doc.get("package_version", "")
    if spec:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            SpecifierSet(spec)
        except InvalidSpecifier:
            problems.append(f"package_version {spec!r} is not a PEP 440 specifier")
    for key in ("description", "group"):
        if key in doc and not isinstance(doc[key], str):
            problems.append(f"{key} must be a string")
    defaults = doc.get("vars", {})
    problems += templates.check_values(defaults, "[vars]")
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
            files.append((role, source.read_bytes()))
            sources.append((role, str(rel)))
    if problems:
        raise BadInput(f"{path}: " + "; ".join(problems), "see the README for patchset.toml keys")
    patches = []
    for diff in sorted(directory.glob("*.patch")):
        parsed = patching.parse(diff.read_bytes().decode("utf-8", "surrogateescape"), str(diff))
        for fp in parsed:
            check_relative(fp.path, str(diff))
        patches.append((diff.name, parsed))
    return PatchSet(
        name=name, version=doc["version"], description=doc.get("description", ""),
        package=doc["package"], package_version=spec, requires=tuple(requires),
        group=doc.get("group"), files=tuple(sorted(files)), patches=tuple(patches),
        digest=digest_dir(directory),
        sources=tuple(sources),
        defaults=tuple((k, templates.value_text(v)) for k, v in defaults.items()) if isinstance(defaults, dict) else (),
    )


def digest_dir(directory: Path) -> str:
    """Identity of a patch set's content: names and bytes of every file, in name order."""
    parts = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        parts.append(f"{rel}\0{hash_bytes(path.read_bytes())}\n")
    return hash_bytes("".join(parts).encode())


def check_relative(rel: str, origin: str) -> None:
    """A patch path must stay inside site-packages: relative, no '..', no empty parts."""
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in rel or "\0" in rel:
        raise BadInput(f"{origin}: path {rel!r} escapes site-packages",
                       "patch paths must be relative to site-packages, without '..'")
