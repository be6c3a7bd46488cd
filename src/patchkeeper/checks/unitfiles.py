"""Which files systemd reads for a unit on a target: its search path (the target's unit_path), the unit
file, and every drop-in directory in systemd's order with same-named files masked (src/shared/dropin.c)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from ..targets.base import Target


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


def unit_files(
    target: Target, override: Mapping[str, bytes | None] | None = None
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]] | str:
    """The files systemd reads for the target's unit, as (path, text): the unit file (the first of its
    name on the search path), then the *.conf files of every drop-in directory, a name taken from the
    highest-priority directory that has it, in name order; and the files so masked, as (path, the one
    read instead). `override` gives some paths' planned bytes (None: absent). A string says why they
    cannot be read."""
    roles = target.config.files
    unit = roles.get("unit")
    if unit is None:
        return "the target has no unit role file"
    override = override or {}
    name = posixpath.basename(unit)
    search = search_path(target)
    dirs = [posixpath.join(d, n) for d in search for n in dropin_dir_names(name)]
    dirs += [posixpath.join(d, name.rpartition(".")[2] + ".d") for d in search]
    fragments = [posixpath.join(d, name) for d in search]
    try:  # one call for which of them exist: each missing path is among its own missing directories
        missing = set(target.agent.missing_dirs([posixpath.join(p, "x") for p in dirs + fragments]))
    except Exception as exc:  # noqa: BLE001 - any failure to look is said, and the caller goes on
        return f"the unit's directories could not be looked at ({exc})"
    fragment = next(
        (p for p in fragments if (override[p] is not None if p in override else p not in missing)), unit
    )
    try:
        data = override[fragment] if fragment in override else target.agent.read(fragment)
    except FileNotFoundError:
        data = None
    except Exception as exc:  # noqa: BLE001
        return f"the unit file {fragment} could not be read ({exc})"
    if data is None:
        return f"the unit file {unit} is absent (systemd has no such unit)"
    planned: dict[str, set[str]] = {}
    for path in override:
        planned.setdefault(posixpath.dirname(path), set()).add(posixpath.basename(path))
    chosen: dict[str, str] = {}  # file name -> the path systemd reads it from
    masked: list[tuple[str, str]] = []
    for directory in dict.fromkeys(dirs):
        names: set[str] = set(planned.get(directory, ()))
        if directory not in missing:
            try:
                names.update(target.agent.listdir(directory))
            except Exception:  # noqa: BLE001 - not a directory, unreadable: systemd reads nothing there either
                pass
        for n in sorted(names):
            path = posixpath.join(directory, n)
            if not n.endswith(".conf") or n.startswith(".") or (path in override and override[path] is None):
                continue
            if n in chosen:
                masked.append((path, chosen[n]))
            else:
                chosen[n] = path
    files = [(fragment, data.decode("utf-8", "surrogateescape"))]
    for n in sorted(chosen):
        path = chosen[n]
        try:
            got = override[path] if path in override else target.agent.read(path)
        except (FileNotFoundError, IsADirectoryError):
            continue  # gone since the listing, or a directory: systemd takes regular files only
        except Exception as exc:  # noqa: BLE001
            return f"the drop-in {path} could not be read ({exc})"
        if got is not None:
            files.append((path, got.decode("utf-8", "surrogateescape")))
    return files, masked
