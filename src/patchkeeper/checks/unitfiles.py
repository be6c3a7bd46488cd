"""Which files systemd 252 reads for a unit on a target, as its loader finds them (src/shared/unit-file.c,
src/shared/dropin.c, src/basic/conf-files.c): the search path (the target's unit_path, a directory that is
another one's symlink dropped), the fragment under the unit's name or its template's, aliases (symlinks in
the search path) and linked unit files (symlinks out of it), masking by /dev/null or an empty file, then the
*.conf files of every drop-in directory of every name, a file name taken from the first directory that has it,
in name order. Proven against a live manager by tests/test_units_live.py."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..targets.base import Target

UNIT_TYPES = (
    "service",
    "socket",
    "device",
    "mount",
    "automount",
    "swap",
    "target",
    "path",
    "timer",
    "slice",
    "scope",
)
_MAX_HOPS = 64  # alias chains longer than this are refused, as unit_ids_map_get does (ELOOP)


@dataclass(frozen=True)
class UnitFiles:
    """What systemd reads for a unit: `files` (path, text) the fragment first then the drop-ins in the order
    applied; `masked` drop-ins not read (path, the same-named one read instead); `refused` says why systemd
    loads no command at all (the unit is masked); `unknown` why the files cannot tell what runs."""

    unit: str  # the unit's id: its own name, or an alias's target (with the instance for a template)
    names: tuple[str, ...]  # every name whose drop-in directories are read
    files: list[tuple[str, str]] = field(default_factory=list)
    masked: list[tuple[str, str]] = field(default_factory=list)
    refused: str | None = None
    unknown: str | None = None
    notes: tuple[str, ...] = ()  # entries systemd lists but reads nothing from (a directory named *.conf)


def dropin_dir_names(name: str) -> list[str]:
    """The drop-in directory names systemd looks for in each search directory, most specific first
    (src/shared/dropin.c): `<name>.d`, the template's for an instance, then each dash prefix
    (`a-b-.service.d`, `a-.service.d` for `a-b-c.service`). The type's own (`service.d`) comes after
    every search directory's."""
    out: list[str] = []
    stem, _, kind = name.rpartition(".")
    if not stem:
        return out
    out.append(name + ".d")
    prefix, at, instance = stem.partition("@")
    if at and instance:
        out.append(f"{prefix}@.{kind}.d")
    chopped = False
    while True:
        dash = prefix.rfind("-")
        if dash <= 0:
            return out
        if dash + 1 < len(prefix) or chopped:
            prefix = prefix[: dash + 1]
            break
        prefix, chopped = prefix[:dash], True  # a trailing dash: chop it and look again, once
    built = f"{prefix}@{instance}.{kind}" if at else f"{prefix}.{kind}"
    return out + dropin_dir_names(built)


def search_path(target: Target) -> list[str]:
    """The directories systemd reads the target's unit and drop-ins from, highest priority first: the
    target's unit_path, with the unit file's own directory first where the path lacks it."""
    unit = target.config.files["unit"]
    here = posixpath.dirname(unit)
    path = list(target.config.unit_path)
    return path if here in path else [here, *path]


def _template(name: str) -> str | None:
    """`a@.service` for the instance `a@b.service`; None for any other name."""
    stem, _, kind = name.rpartition(".")
    prefix, at, instance = stem.partition("@")
    return f"{prefix}@.{kind}" if at and instance else None


def _is_template(name: str) -> bool:
    return "@." in name


def _with_instance(name: str, instance: str) -> str:
    stem, _, kind = name.rpartition(".")
    return f"{stem.partition('@')[0]}@{instance}.{kind}"


class _Scan:
    """The search directories' entries (one agent call), with planned files (`override`) laid over them."""

    def __init__(
        self, target: Target, dirs: list[str], suffixes: list[str], override: Mapping[str, bytes | None]
    ):
        found = target.agent.dir_entries(dirs, suffixes)
        self.real: dict[str, str] = {}
        self.cached: dict[str, bool] = {}
        self.entries: dict[str, dict[str, list[Any]]] = {}
        for d in dirs:
            got = found.get(d)
            planned = {posixpath.basename(p): v for p, v in override.items() if posixpath.dirname(p) == d}
            if got is None and not planned:
                continue
            self.real[d] = got["real"] if got else d
            self.cached[d] = bool(got.get("cached", True)) if got else True
            rows = {row[0]: row for row in (got["entries"] if got else [])}
            for n, data in planned.items():
                if any(n.endswith(s) for s in suffixes) or not suffixes:
                    if data is None:
                        rows.pop(n, None)
                    else:
                        rows[n] = [n, "file", "file", posixpath.join(d, n), len(data)]
            self.entries[d] = dict(sorted(rows.items()))


def unit_files(target: Target, override: Mapping[str, bytes | None] | None = None) -> UnitFiles | str:
    """The files systemd reads for the target's unit (with `override`'s planned bytes for some paths, None:
    absent), or a string saying why they cannot be read."""
    roles = target.config.files
    unit = roles.get("unit")
    if unit is None:
        return "the target has no unit role file"
    override = dict(override or {})
    name = posixpath.basename(unit)
    kind = name.rpartition(".")[2]
    if kind not in UNIT_TYPES:
        return f"{name} is not a unit name systemd knows (its type must be one of {', '.join(UNIT_TYPES)})"
    try:
        scan = _Scan(target, search_path(target), [f".{kind}"], override)
    except Exception as exc:  # noqa: BLE001 - any failure to look is said, and the caller goes on
        return f"the unit's directories could not be looked at ({exc})"
    search: list[str] = []  # systemd drops a directory that is another one already on the path (merged /usr)
    for d, real in scan.real.items():
        if real not in (scan.real[s] for s in search):
            search.append(d)
    reals = {scan.real[d] for d in search}
    ids: dict[
        str, tuple[str, str]
    ] = {}  # name -> ("path", where) | ("alias", name) ; the first directory wins
    for d in search:
        for n, (_, how, _final, real, _size) in scan.entries[d].items():
            if n in ids or n.startswith("."):
                continue
            path = posixpath.join(d, n)
            if how != "link":
                ids[n] = ("path", path)
            elif posixpath.dirname(real) in reals:
                if posixpath.basename(real) == n:
                    continue  # a self-alias: no effect
                if posixpath.basename(real).rpartition(".")[2] != kind:
                    continue  # not a valid alias: systemd warns and ignores it
                ids[n] = ("alias", posixpath.basename(real))
            else:
                ids[n] = ("path", path)  # a linked unit file (or a mask): the link, read through

    def resolve(n: str) -> str | None:
        for _ in range(_MAX_HOPS):
            got = ids.get(n)
            if got is None:
                return None
            if got[0] == "path":
                return got[1]
            n = got[1]
        return None

    names_of: dict[str, list[str]] = {}
    for src in ids:
        dst = resolve(src)
        if dst is None:
            continue
        row = _entry(scan, dst)
        if row is None or _is_mask(row):
            continue
        if _is_template(_basename_of(scan, dst)) and _template(src) is not None:
            continue  # an instance's symlink to its template is no alias
        names_of.setdefault(_basename_of(scan, dst), []).append(src)
    instance = name.rpartition(".")[0].partition("@")[2]
    fragment = resolve(name)
    names: list[str] = [name]
    if fragment is not None:
        for t in names_of.get(_basename_of(scan, fragment), []):
            names.append(_with_instance(t, instance) if instance and _is_template(t) else t)
    elif _template(name):
        fragment = resolve(_template(name) or "")
        if fragment is not None:
            for t in names_of.get(_basename_of(scan, fragment), []):
                inst = _with_instance(t, instance)
                other = resolve(inst)
                if other is not None and _basename_of(scan, other) != _basename_of(scan, fragment):
                    continue
                names.append(inst)
    names = list(dict.fromkeys(names))
    if fragment is None:
        return f"the unit file {unit} is absent: systemd has no such unit {name} on its search path"
    entry = _entry(scan, fragment)
    base = _basename_of(scan, fragment)
    own = _with_instance(base, instance) if instance and _is_template(base) else base
    unit_id = own if own.rpartition(".")[2] == kind else name
    if entry is not None and _is_mask(entry):
        how = "a symlink to /dev/null" if entry[3] == "/dev/null" else "an empty file"
        return UnitFiles(
            unit_id, tuple(names), [(fragment, "")], refused=f"the unit is masked: {fragment} is {how}"
        )
    if entry is not None and entry[2] != "file":
        return UnitFiles(
            unit_id, tuple(names), unknown=f"the unit file {fragment} is not a regular file ({entry[2]})"
        )
    return _read(target, scan, search, fragment, unit_id, names, kind, override)


def _entry(scan: _Scan, path: str) -> list[Any] | None:
    return scan.entries.get(posixpath.dirname(path), {}).get(posixpath.basename(path))


def _basename_of(scan: _Scan, path: str) -> str:
    """The name a fragment has for systemd: a linked unit file's target's name."""
    entry = _entry(scan, path)
    return (
        posixpath.basename(entry[3]) if entry is not None and entry[1] == "link" else posixpath.basename(path)
    )


def _is_mask(entry: list[Any]) -> bool:
    """/dev/null (or any character device systemd's null_or_empty takes: /dev/null's) or an empty regular file."""
    return bool(entry[3] == "/dev/null" or (entry[2] == "file" and entry[4] == 0))


def _read(
    target: Target,
    scan: _Scan,
    search: list[str],
    fragment: str,
    unit_id: str,
    names: list[str],
    kind: str,
    override: Mapping[str, bytes | None],
) -> UnitFiles | str:
    dirs: list[str] = []
    for n in names:
        for d in search:
            dirs += [posixpath.join(d, x) for x in dropin_dir_names(n)]
    dirs += [posixpath.join(d, f"{kind}.d") for d in search]
    dirs = list(dict.fromkeys(dirs))
    try:
        found = _Scan(target, dirs, [".conf"], override)
    except Exception as exc:  # noqa: BLE001
        return f"the unit's drop-in directories could not be looked at ({exc})"
    chosen: dict[str, tuple[str, list[Any]]] = {}  # file name -> (the path systemd reads, its entry)
    masked: list[tuple[str, str]] = []
    seen_real: set[str] = set()
    for d in dirs:
        if d not in found.entries or not found.cached[d] or found.real[d] in seen_real:
            continue  # not in the manager's path cache (unitdirs), or reached twice: canonical, it adds nothing
        seen_real.add(found.real[d])
        for n, row in found.entries[d].items():
            if n.startswith("."):
                continue
            path = posixpath.join(d, n)
            if n in chosen:
                masked.append((posixpath.join(d, n), chosen[n][0]))
            else:
                chosen[n] = (path, row)
    try:
        data = override[fragment] if fragment in override else target.agent.read(fragment, regular=True)
    except Exception as exc:  # noqa: BLE001
        return f"the unit file {fragment} could not be read ({exc})"
    files = [(fragment, (data or b"").decode("utf-8", "surrogateescape"))]
    notes: list[str] = []
    for n in sorted(chosen):
        path, row = chosen[n]
        final = row[2]
        if final == "fifo":
            return UnitFiles(
                unit_id,
                tuple(names),
                files,
                masked,
                unknown=f"the drop-in {path} is a FIFO: systemd 252 opens it to read and waits for a writer "
                "(its whole manager with it); patchkeeper does not open it",
            )
        if final == "dir":
            notes.append(f"{path} is a directory: systemd lists it and reads nothing from it")
            continue
        if row[3] == "/dev/null":
            files.append((path, ""))
            continue
        if final != "file":
            return UnitFiles(
                unit_id,
                tuple(names),
                files,
                masked,
                unknown=f"the drop-in {path} is not a regular file ({final})",
            )
        try:
            got = override[path] if path in override else target.agent.read(path, regular=True)
        except FileNotFoundError:
            continue  # gone since the listing
        except Exception as exc:  # noqa: BLE001
            return f"the drop-in {path} could not be read ({exc})"
        if got is not None:
            files.append((path, got.decode("utf-8", "surrogateescape")))
    return UnitFiles(unit_id, tuple(names), files, masked, notes=tuple(notes))
