"""The wheels of the two releases a port goes between: from --wheel, the workspace's wheels directory,
or `pip download` for the target's interpreter."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from ..checks import wheels
from ..errors import BadInput, Refused
from ..host.disk import normalize_name
from ..patchset import patchset, portdir
from ..patchset.patchset import MANIFEST, PatchSet
from ..targets import open_target
from ..workspace import Workspace


def _old_version(ps: PatchSet, to: str, given: list[str]) -> str:
    """The release the patch set was made for: its exact pin, else the one other --wheel it fits."""
    if patchset.pinned(ps.package_version) is not None:
        old = ps.package_version.split("==", 1)[1].strip().lstrip("v")
    else:
        fit = [
            v
            for v in dict.fromkeys(given)
            if not wheels.same_version(v, to)
            and (not ps.package_version or patchset.fits(ps.package_version, v))
        ]
        if len(fit) != 1:
            raise BadInput(
                f"{ps.ident} is for {ps.package}{ps.package_version or ' (any version)'}: port needs to "
                "know the one release it was made for",
                f'pin it (package_version = "==X.Y.Z" in patchsets/{ps.name}/{MANIFEST}), '
                "or give that release's wheel with --wheel",
            )
        old = fit[0]
    if wheels.same_version(old, to):
        raise BadInput(f"{ps.ident} is already for {ps.package} {to}", "give --to another release")
    return old


@contextlib.contextmanager
def releases(
    ws: Workspace, ps: PatchSet, to: str, given: tuple[str, ...], target: str | None
) -> Iterator[tuple[wheels.Wheel, wheels.Wheel, dict[str, str]]]:
    """The old and the new release's wheels (and where each came from): --wheel, else the
    workspace's wheels directory, else `pip download` for the target's interpreter, as repair finds them."""
    with contextlib.ExitStack() as stack:
        opened = []
        for path in given:
            if not Path(path).is_file():
                raise BadInput(f"--wheel {path}: no such file", "give the path of a .whl file")
            opened.append(_fitting(stack.enter_context(wheels.Wheel(Path(path))), ps, f"--wheel {path}"))
        old = _old_version(ps, to, [w.version for w in opened])
        found: dict[str, tuple[wheels.Wheel, str]] = {}
        for w in opened:
            match = [v for v in (old, to) if wheels.same_version(w.version, v)]
            if not match:
                raise BadInput(
                    f"--wheel {w.path}: a wheel of {w.name} {w.version}, neither {old} (what {ps.ident} "
                    f"was made for) nor {to} (--to)",
                    "give the wheels of those two releases",
                )
            found.setdefault(match[0], (w, f"--wheel {w.path.name}"))
        tags: list[wheels.Tags] = []
        for version in (to, old):  # the new release first: an unknown version is refused before a download
            if version not in found:
                found[version] = _fetch(stack, ws, ps, version, target, tags)
        yield found[old][0], found[to][0], {"from": found[old][1], "to": found[to][1]}


def _fitting(w: wheels.Wheel, ps: PatchSet, where: str) -> wheels.Wheel:
    if normalize_name(w.name) != normalize_name(ps.package):
        raise BadInput(
            f"{where}: a wheel of {w.name or '?'}, not of {ps.package} (the package {ps.ident} patches)",
            f"give wheels of {ps.package}",
        )
    return w


def _fetch(
    stack: contextlib.ExitStack,
    ws: Workspace,
    ps: PatchSet,
    version: str,
    target: str | None,
    tags: list[wheels.Tags],
) -> tuple[wheels.Wheel, str]:
    where = f"the workspace's wheels directory {ws.wheels}"
    for path in wheels.in_directory(ws.wheels, ps.package, version):
        w = stack.enter_context(wheels.Wheel(path))
        if wheels.same_version(w.version, version):
            return _fitting(w, ps, path.name), f"{where}: {path.name}"
    config = ws.target(target)
    if not tags:  # the target's interpreter picks the wheel, as for repair; asked once
        t = open_target(config)
        try:
            tags.append(wheels.target_tags(t, wheels.where_to_put(ws.wheels, True)))
        finally:
            t.close()
    local_python = None if config.ssh else config.python
    for path in stack.enter_context(
        wheels.downloaded(tags[0], config.name, ps.package, version, ws.wheels, local_python, True)
    ):
        w = stack.enter_context(wheels.Wheel(path))
        if wheels.same_version(w.version, version):
            return _fitting(w, ps, path.name), f"pip download: {path.name}"
    raise Refused(
        f"pip download gave no wheel of {ps.package} {version}",
        f"download it yourself and {wheels.where_to_put(ws.wheels, True)}",
    )


def new_release(
    stack: contextlib.ExitStack, ws: Workspace, ps: PatchSet, pending: portdir.Pending
) -> wheels.Wheel:
    """The wheel of the release a stopped port goes to: the one it used, else found again as port finds it."""
    if pending.wheel and Path(pending.wheel).is_file():
        w = stack.enter_context(wheels.Wheel(Path(pending.wheel)))
        if wheels.same_version(w.version, pending.new):
            return _fitting(w, ps, pending.wheel)
    return _fetch(stack, ws, ps, pending.new, None, [])[0]
