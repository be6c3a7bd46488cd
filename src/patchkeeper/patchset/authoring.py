"""Write patchsets/<name>/ whole, under the version rules (bump to change content); saving.py puts it in place."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from .. import names
from ..errors import BadInput, Refused
from . import patchset, saving
from .patchset import MANIFEST, PatchSet
from .varspec import VarType

FIRST_VERSION = "1.0.0"


@dataclass(frozen=True)
class Draft:
    """A patch set to write. None metadata is taken from the existing patch set of that name."""

    name: str
    package: str
    patches: tuple[tuple[str, bytes], ...]  # (file name, diff bytes)
    roles: tuple[tuple[str, str, bytes], ...] = ()  # (role, file name, bytes)
    description: str | None = None
    package_version: str | None = None
    requires: tuple[str, ...] | None = None
    group: str | None = None
    extra_files: tuple[tuple[str, bytes], ...] = ()  # files written verbatim (import of an export)
    defaults: tuple[tuple[str, str], ...] | None = None  # [vars]: defaults of the role-file templates
    types: tuple[tuple[str, VarType], ...] | None = None  # [vars]: the variables' declared types


@dataclass(frozen=True)
class Saved:
    """A patch set version as saving it left it: its identity, digest and what became of it."""

    ident: str
    digest: str
    status: str  # created | updated | unchanged
    previous: str | None = None  # the version it replaced
    kept: str | None = None  # where that version is kept, relative to patchsets/ (.history/NAME/VERSION)


def check_name(name: str) -> None:
    names.check_name(name)


def bump(version: str, part: str) -> str:
    from packaging.version import InvalidVersion, Version  # lazy: tens of ms to import, off the fast paths

    try:
        release = list(Version(version).release) + [0, 0]
    except InvalidVersion:
        raise BadInput(
            f"version {version!r} is not a PEP 440 version; cannot bump it",
            "set version in patchset.toml by hand",
        ) from None
    major, minor, micro = release[:3]
    return {
        "major": f"{major + 1}.0.0",
        "minor": f"{major}.{minor + 1}.0",
        "patch": f"{major}.{minor}.{micro + 1}",
    }[part]


def role_file_name(role: str, source_path: str, taken: set[str]) -> str:
    """The name a role file gets in the patch set: its own base name, unless that would clash."""
    base = source_path.rsplit("/", 1)[-1]
    if base in taken or base == MANIFEST or base.endswith(".patch") or base.startswith("."):
        base = f"role-{role}"
    return base


def _toml_str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def render_toml(d: Draft, version: str) -> bytes:
    lines = [
        f"name = {_toml_str(d.name)}",
        f"version = {_toml_str(version)}",
        f"description = {_toml_str(d.description or '')}",
        f"package = {_toml_str(d.package)}",
        f"package_version = {_toml_str(d.package_version or '')}",
        f"requires = [{', '.join(_toml_str(r) for r in d.requires or ())}]",
    ]
    if d.group:
        lines.append(f"group = {_toml_str(d.group)}")
    if d.roles:
        lines += ["", "[files]"] + [f"{role} = {_toml_str(fname)}" for role, fname, _ in d.roles]
    defaults, types = dict(d.defaults or ()), dict(d.types or ())
    if defaults or types:
        lines += ["", "[vars]"] + [
            _var_line(key, types.get(key), defaults.get(key)) for key in {**types, **defaults}
        ]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _var_line(key: str, vartype: VarType | None, default: str | None) -> str:
    """One [vars] entry: `key = "default"` for plain text, else a table with its type."""
    if (vartype is None or vartype == VarType()) and default is not None:
        return f"{key} = {_toml_str(default)}"
    vartype = vartype or VarType()
    parts = [f"type = {_toml_str(vartype.kind)}"] + [
        f"{bound} = {value}"
        for bound, value in (("min", vartype.low), ("max", vartype.high))
        if value is not None
    ]
    if default is not None:
        parts.append(f"default = {default}" if vartype.kind == "int" else f"default = {_toml_str(default)}")
    return f"{key} = {{ {', '.join(parts)} }}"


def set_keys(text: str, values: dict[str, str]) -> str:
    """patchset.toml with top-level string keys set, everything else ([vars], [files], comments) kept."""
    lines = text.splitlines(keepends=True)
    top = next((i for i, line in enumerate(lines) if line.lstrip().startswith("[")), len(lines))
    head, rest = "".join(lines[:top]), "".join(lines[top:])
    for key, value in values.items():
        string = _toml_str(value)
        line = re.compile(
            rf'^({key}\s*=\s*)(?:"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|[^#\n]*?)(\s*(?:#.*)?)$', re.M
        )
        if line.search(head):
            head = line.sub(lambda m: m.group(1) + string + m.group(2), head, count=1)  # noqa: B023
        else:
            head = head.rstrip("\n") + f"\n{key} = {string}\n" + ("\n" if rest else "")
    out = head + rest
    try:
        doc = tomllib.loads(out)
    except tomllib.TOMLDecodeError:
        doc = {}
    if any(doc.get(key) != value for key, value in values.items()):
        raise BadInput(f"cannot set {', '.join(values)} in {MANIFEST}", "set them by hand, then run again")
    return out


def contents(d: Draft, version: str) -> dict[str, bytes]:
    if d.extra_files:
        return dict(d.extra_files)
    out = {MANIFEST: render_toml(d, version)}
    out.update({fname: data for _, fname, data in d.roles})
    out.update(dict(d.patches))
    return out


def inherit(d: Draft, existing: PatchSet | None) -> Draft:
    """Fill the metadata the draft leaves open from the existing patch set, else defaults."""
    if existing is None:
        return replace(
            d,
            description=d.description or "",
            package_version=d.package_version or "",
            requires=d.requires or (),
        )
    return replace(
        d,
        description=d.description if d.description is not None else existing.description,
        package_version=d.package_version if d.package_version is not None else existing.package_version,
        requires=d.requires if d.requires is not None else existing.requires,
        group=d.group if d.group is not None else existing.group,
        defaults=d.defaults if d.defaults is not None else existing.defaults or None,
        types=d.types if d.types is not None else existing.types or None,
    )


def save(
    root: Path,
    d: Draft,
    bump_part: str | None = None,
    version: str | None = None,
    version_option: str = "--bump patch|minor|major",
) -> Saved:
    """Write the draft as patchsets/<name>/. Changed content needs a higher version (bump or given:
    `version_option` names how the verb gives one, for the hints)."""
    from packaging.version import InvalidVersion, Version  # lazy: tens of ms to import, off the fast paths

    check_name(d.name)
    if version is not None:
        try:
            Version(version)
        except InvalidVersion:
            raise BadInput(f"version {version!r} is not a PEP 440 version", "use e.g. 1.2.0") from None
    with saving.locked(root):  # one save at a time: what is there is read, compared and replaced alone
        existing = patchset.load(root, d.name) if (root / d.name / MANIFEST).is_file() else None
        d = inherit(d, existing)
        same_version = version or (existing.version if existing else FIRST_VERSION)
        return _save(root, d, existing, same_version, bump_part, version, version_option)


def _save(
    root: Path,
    d: Draft,
    existing: PatchSet | None,
    same_version: str,
    bump_part: str | None,
    version: str | None,
    version_option: str,
) -> Saved:
    from packaging.version import Version  # lazy: tens of ms to import, off the fast paths

    tmp = saving.new_dir(root, d.name, uuid.uuid4().hex[:8])
    try:
        saving.write_dir(tmp, contents(d, same_version))
        digest = patchset.digest_dir(tmp)
        if existing is not None and digest == existing.digest:
            return Saved(existing.ident, digest, "unchanged")
        if existing is not None:
            if version is not None:
                new_version = version
            elif bump_part is not None:
                new_version = bump(existing.version, bump_part)
            else:
                raise Refused(
                    f"patch set {existing.ident} exists with other content; recording changed content "
                    "under an unchanged version is refused",
                    f"pass {version_option}",
                )
            if Version(new_version) <= Version(existing.version):
                raise Refused(
                    f"version {new_version} is not above {existing.ident}'s",
                    f"give a higher version: {version_option}",
                )
            if new_version != same_version:
                shutil.rmtree(tmp)
                saving.write_dir(tmp, contents(d, new_version))
                digest = patchset.digest_dir(tmp)
            kept = saving.put(root, d.name, tmp, existing.version)
            return Saved(f"{d.name}@{new_version}", digest, "updated", existing.version, kept)
        saving.put(root, d.name, tmp, None)
        return Saved(f"{d.name}@{same_version}", digest, "created")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
