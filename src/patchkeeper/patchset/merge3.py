"""Three-way merges: git merge-file's text of a file's merge, and the stretches (diff3 chunks) port classifies hunks by."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import BadInput
from .diffwrite import opcodes
from .patching import split_lines

STABLE, OURS, THEIRS, SAME, CONFLICT = "stable", "ours", "theirs", "same", "conflict"


@dataclass(frozen=True)
class Chunk:
    """Base lines [start, stop) and what each side has in their place."""

    start: int
    stop: int
    base: tuple[str, ...]
    ours: tuple[str, ...]
    theirs: tuple[str, ...]

    @property
    def kind(self) -> str:
        """stable (nobody changed it), ours or theirs (one side did), same (both, alike), conflict."""
        if self.ours == self.theirs:
            return STABLE if self.ours == self.base else SAME
        if self.ours == self.base:
            return THEIRS
        return OURS if self.theirs == self.base else CONFLICT

    def touches(self, start: int, stop: int) -> bool:
        """Does this chunk change lines of base [start, stop), or insert between two of them?"""
        if self.start == self.stop:
            return start < self.start < stop
        return self.start < stop and self.stop > start


def matching(a: Sequence[str], b: Sequence[str]) -> dict[int, int]:
    """Line i of `a` -> line j of `b`, for the lines a line diff keeps (the diff writer's matching)."""
    out: dict[int, int] = {}
    for tag, i1, i2, j1, _ in opcodes(list(a), list(b)):
        if tag == "equal":
            out.update((i1 + k, j1 + k) for k in range(i2 - i1))
    return out


def diff3(
    base: Sequence[str],
    ours: Sequence[str],
    theirs: Sequence[str],
    ours_map: dict[int, int] | None = None,
    theirs_map: dict[int, int] | None = None,
) -> list[Chunk]:
    """The chunks of a three-way merge, in order: a base line is stable where both sides keep it
    at the place the previous stable line leads to; between two stable runs lies one chunk whose
    sides are compared whole (the classic diff3 algorithm). The maps (line of base -> line of that
    side) may be given when a side's change is known exactly (a patch's hunks)."""
    a_map = matching(base, ours) if ours_map is None else ours_map
    b_map = matching(base, theirs) if theirs_map is None else theirs_map
    n = len(base)
    i = ja = jb = 0
    chunks: list[Chunk] = []
    while i < n or ja < len(ours) or jb < len(theirs):
        k = i
        while k < n and a_map.get(k) == ja + k - i and b_map.get(k) == jb + k - i:
            k += 1
        if k > i:
            run = tuple(base[i:k])
            chunks.append(Chunk(i, k, run, run, run))
            ja, jb, i = ja + k - i, jb + k - i, k
            continue
        stop = i
        while stop < n and not (stop in a_map and stop in b_map):
            stop += 1
        a_end = a_map[stop] if stop < n else len(ours)
        b_end = b_map[stop] if stop < n else len(theirs)
        chunks.append(Chunk(i, stop, tuple(base[i:stop]), tuple(ours[ja:a_end]), tuple(theirs[jb:b_end])))
        i, ja, jb = stop, a_end, b_end
    return chunks


def _block(lines: tuple[str, ...]) -> list[str]:
    """Lines to put between markers: the last one ended, so that a marker starts its own line."""
    out = list(lines)
    if out and not out[-1].endswith("\n"):
        out[-1] += "\n"
    return out


def whole_conflict(
    base: tuple[str, ...], ours: tuple[str, ...], theirs: tuple[str, ...], labels: tuple[str, str, str]
) -> str:
    """A whole file as one conflict between diff3 markers (a file both sides added, or one side
    deleted and the other changed: git leaves those to the tree level, merge-file has no form for them)."""
    return "".join(
        [
            f"<<<<<<< {labels[0]}\n",
            *_block(ours),
            f"||||||| {labels[1]}\n",
            *_block(base),
            "=======\n",
            *_block(theirs),
            f">>>>>>> {labels[2]}\n",
        ]
    )


def merge_file(base: bytes, ours: bytes, theirs: bytes, labels: tuple[str, str, str]) -> tuple[bytes, int]:
    """The merge as `git merge-file -p --diff3` writes it (labels: ours, base, theirs), and how many
    conflicts it has: git's own bytes, so a port resolves what `git merge` would leave to resolve."""
    with tempfile.TemporaryDirectory(prefix="pk-merge-") as tmp:
        paths = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            path = os.path.join(tmp, name)
            with open(path, "wb") as f:
                f.write(data)
            paths.append(path)
        try:
            proc = subprocess.run(
                [
                    "git",
                    "merge-file",
                    "-p",
                    "--diff3",
                    "-L",
                    labels[0],
                    "-L",
                    labels[1],
                    "-L",
                    labels[2],
                    *paths,
                ],
                capture_output=True,
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            raise BadInput(
                f"cannot run git merge-file: {exc.strerror or exc}",
                "install git (patchkeeper needs it, as GitPython does)",
            ) from None
    if not 0 <= proc.returncode <= 127:  # git's own failure (a binary file...): -1, seen as 255
        said = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise BadInput(
            f"git merge-file failed: {said[-1] if said else f'exit {proc.returncode}'}",
            "merge that file by hand, or leave it out of the patch set",
        )
    # the exit code counts conflicts up to 127; past that the markers are counted
    n = (
        proc.returncode
        if proc.returncode < 127
        else proc.stdout.count(b"\n<<<<<<< ") + proc.stdout.startswith(b"<<<<<<< ")
    )
    return proc.stdout, n


@dataclass(frozen=True)
class Conflict:
    """One conflict of a merge's text: what ours, base and theirs have there."""

    ours: tuple[str, ...]
    base: tuple[str, ...]
    theirs: tuple[str, ...]


def conflicts(text: str) -> list[Conflict]:
    """The conflicts of a merge written with diff3 markers, in order."""
    return [Conflict(*(tuple(split_lines(m.group(k))) for k in (1, 2, 3))) for m in _CONFLICT.finditer(text)]


def spans(
    found: list[Conflict], base: Sequence[str], ours: Sequence[str], ours_map: dict[int, int]
) -> list[tuple[int, int]]:
    """The lines of base [start, stop) each conflict stands in place of, found in order: by its base
    lines where it has some, else (both sides inserted there) by where its ours lines are."""
    out = []
    at_base = at_ours = 0
    back = sorted((j, i) for i, j in ours_map.items())
    for c in found:
        if c.base:
            start = _find(base, c.base, at_base)
            if start is None:
                continue
            out.append((start, start + len(c.base)))
            at_base = start + len(c.base)
        elif c.ours:
            p = _find(ours, c.ours, at_ours)
            if p is None:
                continue
            start = max((i + 1 for j, i in back if j < p), default=0)
            out.append((start, start))
            at_ours, at_base = p + len(c.ours), max(at_base, start)
    return out


def _find(lines: Sequence[str], run: tuple[str, ...], start: int) -> int | None:
    """Where `run` first stands in `lines` from `start` (a last line git ended before a marker matches its own)."""
    want = [line.removesuffix("\n") for line in run]
    for i in range(start, len(lines) - len(run) + 1):
        if [line.removesuffix("\n") for line in lines[i : i + len(run)]] == want:
            return i
    return None


MARKERS = ("<<<<<<< ", "||||||| ", ">>>>>>> ")
_CONFLICT = re.compile(
    r"^<<<<<<< [^\n]*\n(.*?)^\|\|\|\|\|\|\| [^\n]*\n(.*?)^=======\n(.*?)^>>>>>>> [^\n]*\n", re.M | re.S
)


def taking(text: str, side: str) -> str:
    """The merge with each conflict settled for one side ("ours" or "theirs"): what the file is
    where the merge is sure, the rest as that side has it."""
    return _CONFLICT.sub(lambda m: m.group(1 if side == "ours" else 3), text)


def marker_lines(text: str) -> list[int]:
    """1-based numbers of the lines that begin with a conflict marker (left unresolved)."""
    return [n for n, line in enumerate(text.split("\n"), 1) if line.startswith(MARKERS)]
