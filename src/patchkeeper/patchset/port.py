"""Carry a patch set to another release of its package: a three-way merge per file, an outcome per hunk.

For each file the patch set changes, base is the old release's file, ours what the patch set makes
of it, theirs the new release's file. Pure: releases are read through `Release` (a wheel), nothing
is written; the command decides what to do with the result."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..errors import BadInput, HunkFailed
from . import diffwrite, gitdiff, merge3, patching
from .patching import FilePatch, Hunk, split_lines
from .patchset import PatchSet

_ENC = ("utf-8", "surrogateescape")
CLEAN, MERGED, UPSTREAM, CONFLICT, GONE = "clean", "merged", "upstream", "conflict", "gone"
COLLISION = "collision"  # a file the patch set adds that the new release now ships, with other bytes
BLOCKING = (CONFLICT, COLLISION, GONE)  # a port with one of these writes no patch set
RENAME_RATIO = 0.6  # a file the new release added is the old one renamed when this alike (difflib ratio)
_RENAME_TRIES = 40


class Release(Protocol):
    """A release's files by their path in site-packages (wheels.Wheel is one)."""

    version: str

    def site_file(self, rel: str) -> tuple[bytes, int] | None: ...

    def site_names(self) -> set[str]: ...


@dataclass(frozen=True)
class HunkPort:
    """One hunk of the patch set and what became of it in the new release."""

    header: str  # as the patch set has it (@@ -a,b +c,d @@)
    outcome: str  # clean | merged | upstream | conflict | gone | collision
    offset: int | None = None  # clean: how many lines later (earlier: negative) it lands
    lines: tuple[str, ...] = ()  # the hunk as a diff shows it: " ", "-" or "+" and the line
    note: str = ""


@dataclass(frozen=True)
class FilePort:
    """One file of the patch set, carried to the new release."""

    path: str  # the file in the patch set (site-packages relative)
    patches: tuple[str, ...]  # the patch files that change it, in order
    kind: str  # modify | add | delete
    outcome: str
    hunks: tuple[HunkPort, ...]
    result: bytes | None  # the file as the ported set makes it (diff3 markers where it conflicts)
    release: bytes | None  # the new release's file (renamed_to's when it was renamed)
    release_mode: int | None
    new_mode: int | None  # the mode the patch set sets, None: it sets none
    renamed_to: str | None = None  # gone: the new release's file that looks like it, renamed
    conflicts: int = 0
    note: str = ""
    ours: bytes | None = None  # what the patch set makes of the old release's file

    @property
    def lands(self) -> str:
        """Where the change goes in the new release."""
        return self.renamed_to or self.path

    def change(self) -> diffwrite.Change:
        """The ported file against the new release, for the diff writer."""
        mode = self.new_mode or self.release_mode or 0o644
        return diffwrite.Change(
            self.lands,
            self.release,
            self.result,
            self.release_mode if self.release is not None else None,
            mode if self.result is not None else None,
        )


@dataclass(frozen=True)
class Port:
    """A patch set carried to a release: every file, and (when nothing blocks) the patches regenerated."""

    files: tuple[FilePort, ...]
    patches: tuple[tuple[str, bytes], ...] = ()  # (patch file name, its diff against the new release)
    dropped: tuple[str, ...] = ()  # patch files left with no change (all upstream, or removed)
    problems: tuple[str, ...] = ()  # the check of the regenerated patches against the new release
    checked: int = 0  # files the check applied the regenerated patches to

    @property
    def blocked(self) -> bool:
        return any(f.outcome in BLOCKING for f in self.files) or bool(self.problems)


def port(ps: PatchSet, old: Release, new: Release, labels: tuple[str, str, str]) -> Port:
    """Merge every file of `ps` (made for `old`) into `new`; labels name ours, base and theirs in markers."""
    touches: dict[str, list[tuple[str, FilePatch]]] = {}
    for origin, fps in ps.patches:
        for fp in fps:
            if fp.source is not None or fp.binary is not None:
                raise BadInput(
                    f"{ps.ident}: {origin} {'renames or copies' if fp.binary is None else 'is a binary patch of'} "
                    f"{fp.path}, which port does not merge yet",
                    "port the set's text patches alone, or make the set again for the new release",
                )
            touches.setdefault(fp.path, []).append((origin, fp))
    added = _Added(old, new)
    files = tuple(port_file(path, steps, old, new, labels, added) for path, steps in touches.items())
    if any(f.outcome in BLOCKING for f in files):
        return Port(files)
    patches, dropped = regenerate(files, [origin for origin, _ in ps.patches])
    problems, checked = check(patches, new, files)
    return Port(files, patches, dropped, tuple(problems), checked)


class _Added:
    """The files the new release has and the old one has not (read once, when a file is gone)."""

    def __init__(self, old: Release, new: Release) -> None:
        self.old, self.new = old, new
        self._names: list[str] | None = None

    def names(self) -> list[str]:
        if self._names is None:
            self._names = sorted(self.new.site_names() - self.old.site_names())
        return self._names


def port_file(
    path: str,
    steps: list[tuple[str, FilePatch]],
    old: Release,
    new: Release,
    labels: tuple[str, str, str],
    added: _Added,
) -> FilePort:
    got = old.site_file(path)
    base = got[0] if got else None
    ours = base
    for origin, fp in steps:
        try:
            ours = patching.apply(fp, ours, origin).data
        except HunkFailed as exc:
            raise BadInput(
                f"{exc.message}: the patch set does not fit its own release {old.version}",
                f"port starts from the release the patch set was made for; check it with "
                f"`patchkeeper check NAME --wheel` and the {old.version} wheel",
            ) from None
    theirs_got = new.site_file(path)
    theirs, theirs_mode = theirs_got if theirs_got else (None, None)
    new_mode = next((fp.new_mode for _, fp in reversed(steps) if fp.new_mode is not None), None)
    kind = "add" if base is None else "delete" if ours is None else "modify"
    names = tuple(dict.fromkeys(origin for origin, _ in steps))

    def done(
        outcome: str, hunks: tuple[HunkPort, ...], result: bytes | None, conflicts: int = 0, **more: Any
    ) -> FilePort:
        return FilePort(
            path,
            names,
            kind,
            outcome,
            hunks,
            result,
            more.pop("release", theirs),
            more.pop("release_mode", theirs_mode),
            new_mode,
            conflicts=conflicts,
            ours=ours,
            **more,
        )

    if kind == "add":
        assert ours is not None
        lines = tuple("+" + line.rstrip("\n") for line in split_lines(ours.decode(*_ENC)))
        if theirs is None:
            return done(CLEAN, (HunkPort("new file", CLEAN, 0, lines),), ours)
        if theirs == ours:
            return done(UPSTREAM, (HunkPort("new file", UPSTREAM, None, lines),), theirs)
        text, n = _whole(base, ours, theirs, labels)
        return done(
            COLLISION,
            (
                HunkPort(
                    "new file",
                    COLLISION,
                    None,
                    lines,
                    f"{new.version} ships a file of this name with other bytes",
                ),
            ),
            text,
            n,
        )
    assert base is not None
    if kind == "delete":
        lines = tuple("-" + line.rstrip("\n") for line in split_lines(base.decode(*_ENC)))
        if theirs is None:
            return done(UPSTREAM, (HunkPort("deleted file", UPSTREAM, None, lines),), None)
        if theirs == base:
            return done(CLEAN, (HunkPort("deleted file", CLEAN, 0, lines),), None)
        text, n = _whole(base, None, theirs, labels)
        return done(
            CONFLICT,
            (
                HunkPort(
                    "deleted file",
                    CONFLICT,
                    None,
                    lines,
                    f"{new.version} changed the file the patch set deletes",
                ),
            ),
            text,
            n,
        )
    assert ours is not None
    fp = steps[0][1] if len(steps) == 1 else _combined(path, base, ours)
    if theirs is None:
        renamed = _renamed(path, base, new, added)
        gone = tuple(HunkPort(h.header, GONE, None, _hunk_lines(h)) for h in fp.hunks)
        if renamed is None:
            return done(GONE, gone, None, note=f"{new.version} has no such file")
        moved = new.site_file(renamed)
        assert moved is not None
        result, n, _ = merge(base, fp, moved[0], labels, path)
        return done(
            GONE,
            gone,
            result,
            n,
            renamed_to=renamed,
            release=moved[0],
            release_mode=moved[1],
            note=f"{new.version} has no such file; it looks renamed to {renamed} (merged there "
            + ("with conflicts)" if n else "cleanly)"),
        )
    result, n, hunks = merge(base, fp, theirs, labels, path)
    return done(_file_outcome(hunks), hunks, result, n)


def _file_outcome(hunks: Sequence[HunkPort]) -> str:
    outcomes = {h.outcome for h in hunks}
    if not outcomes:  # patch files that undo each other: nothing to carry
        return CLEAN
    if len(outcomes) == 1:
        return outcomes.pop()
    return next((o for o in (CONFLICT, COLLISION, GONE) if o in outcomes), MERGED)


def _combined(path: str, base: bytes, ours: bytes) -> FilePatch:
    """A file several patch files change: their sum, as one file patch written against base."""
    text = diffwrite.file_diff(diffwrite.Change(path, base, ours, 0o644, 0o644)).decode(*_ENC)
    return gitdiff.parse(text, path)[0] if text else FilePatch(path, "modify", None, ())


def _whole(
    base: bytes | None, ours: bytes | None, theirs: bytes, labels: tuple[str, str, str]
) -> tuple[bytes, int]:
    """The whole file as one conflict (an added file that collides, a deleted file changed)."""

    def lines(data: bytes | None) -> tuple[str, ...]:
        return tuple(split_lines(data.decode(*_ENC))) if data else ()

    return merge3.whole_conflict(lines(base), lines(ours), lines(theirs), labels).encode(*_ENC), 1


def merge(
    base: bytes, fp: FilePatch, theirs: bytes, labels: tuple[str, str, str], origin: str
) -> tuple[bytes, int, tuple[HunkPort, ...]]:
    """Three-way merge of one file: (its bytes as git merge-file writes them, diff3 markers where it
    conflicts; how many conflicts; each hunk's outcome). A hunk conflicts where git's merge does; the
    other outcomes come from diff3's chunks, ours matched to base exactly by fp's hunks."""
    b_lines = split_lines(base.decode(*_ENC))
    t_lines = split_lines(theirs.decode(*_ENC))
    applied = patching.apply(fp, base, origin)
    o_lines, o_map, spans = _ours(b_lines, fp.hunks, applied.offsets)
    assert applied.data is not None  # a modified file
    data, conflicts = merge3.merge_file(base, applied.data, theirs, labels)
    found = merge3.spans(merge3.conflicts(data.decode(*_ENC)), b_lines, o_lines, o_map) if conflicts else []
    chunks = merge3.diff3(b_lines, o_lines, t_lines, o_map)
    hunks = tuple(_classify(h, span, chunks, found, fp, theirs) for h, span in zip(fp.hunks, spans))
    if conflicts and not any(h.outcome == CONFLICT for h in hunks):  # not placed: every hunk is in question
        hunks = tuple(
            replace(h, outcome=CONFLICT, offset=None, note="git's merge conflicts in this file")
            for h in hunks
        )
    return data, conflicts, hunks


def _ours(
    base: list[str], hunks: tuple[Hunk, ...], offsets: tuple[int, ...]
) -> tuple[list[str], dict[int, int], list[tuple[int, int]]]:
    """Base with the hunks applied where they land, which base line is which of the result, and
    each hunk's span of base lines."""
    out: list[str] = []
    kept: dict[int, int] = {}
    spans = []
    pos = 0
    for hunk, offset in zip(hunks, offsets):
        at = hunk.source_start - 1 + offset if hunk.old_lines else hunk.source_start + offset
        for k in range(pos, at):
            kept[k] = len(out)
            out.append(base[k])
        matcher = difflib.SequenceMatcher(None, hunk.old_lines, hunk.new_lines, autojunk=False)
        for a, b, size in matcher.get_matching_blocks():
            kept.update((at + a + t, len(out) + b + t) for t in range(size))
        out.extend(hunk.new_lines)
        spans.append((at, at + len(hunk.old_lines)))
        pos = at + len(hunk.old_lines)
    for k in range(pos, len(base)):
        kept[k] = len(out)
        out.append(base[k])
    return out, kept, spans


def _classify(
    hunk: Hunk,
    span: tuple[int, int],
    chunks: list[merge3.Chunk],
    conflicts: list[tuple[int, int]],
    fp: FilePatch,
    theirs: bytes,
) -> HunkPort:
    start, stop = span
    lines = _hunk_lines(hunk)
    if any(a <= stop and b >= start for a, b in conflicts):
        return HunkPort(hunk.header, CONFLICT, None, lines, "the new release changed these lines otherwise")
    mine = {c.kind for c in chunks if c.ours != c.base and c.start <= stop and c.stop >= start}
    if mine == {merge3.SAME}:
        return HunkPort(hunk.header, UPSTREAM, None, lines, "the new release has this change")
    partly = "; part of it the new release makes itself" if merge3.SAME in mine else ""
    if merge3.CONFLICT in mine or any(c.theirs != c.base and c.touches(start, stop) for c in chunks):
        return HunkPort(hunk.header, MERGED, None, lines, "the new release changed its context" + partly)
    offset = patching.check(FilePatch(fp.path, "modify", None, (hunk,)), theirs)[0].offset
    if offset is None:  # its context is intact but found elsewhere first: the merge placed it
        return HunkPort(hunk.header, MERGED, None, lines, "placed by the merge" + partly)
    return HunkPort(hunk.header, CLEAN, offset, lines, partly.lstrip("; "))


def _hunk_lines(hunk: Hunk) -> tuple[str, ...]:
    out: list[str] = []
    matcher = difflib.SequenceMatcher(None, hunk.old_lines, hunk.new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out += [" " + line for line in hunk.old_lines[i1:i2]]
        else:
            out += ["-" + line for line in hunk.old_lines[i1:i2]] + [
                "+" + line for line in hunk.new_lines[j1:j2]
            ]
    return tuple(line.rstrip("\n") for line in out)


def _renamed(path: str, base: bytes, new: Release, added: _Added) -> str | None:
    """The file the new release added that is most like `base` (same name elsewhere first, then
    the same directory), if alike enough to call it `path` renamed."""
    directory, _, name = path.rpartition("/")
    suffix = name.rpartition(".")[2]
    names = [p for p in added.names() if not p.startswith("/") and ".." not in p.split("/")]
    tries = [p for p in names if p.rpartition("/")[2] == name] + [
        p for p in names if p.rpartition("/")[0] == directory and p.endswith("." + suffix)
    ]
    a = split_lines(base.decode(*_ENC))
    best: tuple[float, str] | None = None
    for candidate in list(dict.fromkeys(tries))[:_RENAME_TRIES]:
        got = new.site_file(candidate)
        if got is None:
            continue
        m = difflib.SequenceMatcher(None, a, split_lines(got[0].decode(*_ENC)), autojunk=False)
        if m.real_quick_ratio() >= RENAME_RATIO and m.quick_ratio() >= RENAME_RATIO:
            ratio = m.ratio()
            if ratio >= RENAME_RATIO and (best is None or ratio > best[0]):
                best = (ratio, candidate)
    return best[1] if best else None


def regenerate(
    files: Sequence[FilePort], order: Sequence[str]
) -> tuple[tuple[tuple[str, bytes], ...], tuple[str, ...]]:
    """The patch files of the ported set, written against the new release by the diff writer: a
    file's change goes into the last patch file that changed it. Also the patch files left empty."""
    changes: dict[str, list[diffwrite.Change]] = {name: [] for name in order}
    for f in files:
        changes[f.patches[-1]].append(f.change())
    written = tuple((name, diffwrite.diff(c)) for name, c in changes.items())
    return tuple((n, d) for n, d in written if d), tuple(n for n, d in written if not d)


def check(
    patches: Sequence[tuple[str, bytes]], new: Release, files: Sequence[FilePort]
) -> tuple[list[str], int]:
    """What is wrong with the regenerated patches: one that does not apply to the new release or
    does not give the merged bytes, a Python file that does not compile; and how many files they make."""
    problems = []
    made: dict[str, bytes | None] = {}
    for name, diff in patches:
        for fp in gitdiff.parse(diff.decode(*_ENC), name):
            got = new.site_file(fp.path)
            current = made[fp.path] if fp.path in made else (got[0] if got else None)
            try:
                made[fp.path] = patching.apply(fp, current, name).data
            except HunkFailed as exc:
                problems.append(exc.message)
    clashes = patching.shape_clashes([p for p, data in made.items() if data is not None], new.site_names())
    problems += [f"{path} {why}" for path, why in clashes.items()]  # apply would refuse it, so port does
    wanted = {f.lands: f.result for f in files}
    for path, data in made.items():
        if data != wanted.get(path):
            problems.append(f"{path}: the regenerated patch does not give the merged file")
        elif data is not None and path.endswith(".py"):
            try:
                compile(data, path, "exec", dont_inherit=True)
            except (SyntaxError, ValueError) as exc:
                line = getattr(exc, "lineno", None)
                problems.append(
                    f"{path}{f':{line}' if line else ''}: does not compile after the merge: "
                    f"{getattr(exc, 'msg', exc)}"
                )
    return problems, len(made)
