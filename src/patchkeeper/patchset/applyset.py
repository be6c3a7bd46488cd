"""One patch file's file patches applied together, as `git apply` applies one patch (apply.c:
check_patch_list, previous_patch, check_to_create, write_out_results)."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass

from ..errors import BadInput, HunkFailed
from . import patching
from .patching import FilePatch, HunkCheck

_GONE = object()  # a path an earlier file patch of this patch deleted or renamed away (PATH_WAS_DELETED)


@dataclass(frozen=True)
class Outcome:
    """One file patch's result: its bytes and mode (data None: deleted), or why it does not apply."""

    patch: FilePatch
    data: bytes | None
    mode: int | None
    hunks: tuple[HunkCheck, ...]  # a trial's report of each hunk
    error: HunkFailed | BadInput | None = None


def results(
    fps: tuple[FilePatch, ...],
    files: MutableMapping[str, bytes | None],
    modes: MutableMapping[str, int],
    origin: str,
    trial: bool,
) -> Iterator[Outcome]:
    """Each file patch of one patch applied, in order, to `files` as they were before the patch:
    a rename or copy reads its source from there; any other file patch reads what an earlier file
    patch of this patch made of its path (an error if one deleted or renamed it away). A path it adds
    must not exist, unless an earlier file patch deletes or renames it away. In a trial each hunk is
    checked (`patching.check`) and reported, a failing file patch left out; else the first failure
    raises. Then `files` and `modes` are updated as git writes the results: every deleted and renamed
    source removed first, then every result written in order."""
    leaving = {_old_name(fp) for fp in fps if fp.kind in ("delete", "rename")}
    made: dict[str, object] = {}  # path -> the (data, mode) an earlier file patch left there, or _GONE
    out: list[Outcome] = []
    for fp in fps:
        outcome = _one(fp, files, modes, made, leaving, origin, trial)
        yield outcome
        if outcome.error is not None or any(h.offset is None for h in outcome.hunks):
            continue
        out.append(outcome)
        if fp.kind != "delete":
            made[fp.path] = (outcome.data, outcome.mode)
        if fp.kind in ("delete", "rename"):
            made[_old_name(fp)] = _GONE
    for o in out:
        if o.patch.kind in ("delete", "rename"):
            files[_old_name(o.patch)] = None
    for o in out:
        if o.patch.kind != "delete":
            files[o.patch.path] = o.data
            if o.mode is not None:
                modes[o.patch.path] = o.mode


def _old_name(fp: FilePatch) -> str:
    return fp.source if fp.source is not None else fp.path


def _one(
    fp: FilePatch,
    files: MutableMapping[str, bytes | None],
    modes: MutableMapping[str, int],
    made: dict[str, object],
    leaving: set[str],
    origin: str,
    trial: bool,
) -> Outcome:
    where = f"{origin}: {fp.path}"
    old = _old_name(fp)
    data: bytes | None
    if fp.kind == "add":
        data, mode = None, None
    elif fp.kind in ("rename", "copy") or old not in made:  # git's patches of renames do not depend on order
        data, mode = files.get(old), modes.get(old, 0o644)
    elif made[old] is _GONE:
        return _failed(
            fp,
            HunkFailed(
                f"{origin}: {old}: has been renamed or deleted by an earlier file patch of this patch",
                "check the order of the diff's files",
            ),
            trial,
        )
    else:
        data, mode = made[old]  # type: ignore[misc]
    if fp.kind in ("add", "rename", "copy") and files.get(fp.path) is not None:
        if fp.path not in leaving and made.get(fp.path) is not _GONE:
            what = "adds" if fp.kind == "add" else f"{fp.kind}s {fp.source} to"
            return _failed(
                fp,
                HunkFailed(
                    f"{where}: the patch {what} this path, but it already exists",
                    "roll back first, or check which patch set created it",
                ),
                trial,
            )
    new_mode = fp.new_mode if fp.new_mode is not None else 0o644 if fp.kind == "add" else mode
    if trial:
        hunks = patching.check(fp, data)
        if any(h.offset is None for h in hunks):
            return Outcome(fp, None, None, hunks)
    try:
        result = patching.apply(fp, data, origin).data
    except (HunkFailed, BadInput) as exc:
        return _failed(fp, exc, trial)
    return Outcome(fp, result, new_mode, hunks if trial else ())


def _failed(fp: FilePatch, exc: HunkFailed | BadInput, trial: bool) -> Outcome:
    if not trial:
        raise exc
    return Outcome(fp, None, None, (HunkCheck(fp.kind, None, exc.message.rpartition(": ")[2]),), exc)
