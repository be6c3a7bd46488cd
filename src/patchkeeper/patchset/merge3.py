"""A three-way merge of lines (diff3): stretches of a base file and what two sides made of each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .diffwrite import opcodes

STABLE, OURS, THEIRS, SAME, CONFLICT = "stable", "ours", "theirs", "same", "conflict"


@dataclass(frozen=True)
class Chunk:
    """Base lines [start, stop) and what each side has in their place; theirs_at: where theirs begin."""

    start: int
    stop: int
    base: tuple[str, ...]
    ours: tuple[str, ...]
    theirs: tuple[str, ...]
    theirs_at: int

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


def diff3(base: Sequence[str], ours: Sequence[str], theirs: Sequence[str],
          ours_map: dict[int, int] | None = None, theirs_map: dict[int, int] | None = None) -> list[Chunk]:
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
            chunks.append(Chunk(i, k, run, run, run, jb))
            ja, jb, i = ja + k - i, jb + k - i, k
            continue
        stop = i
        while stop < n and not (stop in a_map and stop in b_map):
            stop += 1
        a_end = a_map[stop] if stop < n else len(ours)
        b_end = b_map[stop] if stop < n else len(theirs)
        chunks.append(Chunk(i, stop, tuple(base[i:stop]), tuple(ours[ja:a_end]), tuple(theirs[jb:b_end]), jb))
        i, ja, jb = stop, a_end, b_end
    return chunks


def _block(lines: tuple[str, ...]) -> list[str]:
    """Lines to put between markers: the last one ended, so that a marker starts its own line."""
    out = list(lines)
    if out and not out[-1].endswith("\n"):
        out[-1] += "\n"
    return out


def merged(chunks: list[Chunk], labels: tuple[str, str, str]) -> tuple[str, int]:
    """The merge's text, each conflict written between diff3 markers (git merge-file --diff3's
    form; labels: ours, base, theirs), and how many conflicts there are."""
    out: list[str] = []
    conflicts = 0
    for c in chunks:
        kind = c.kind
        if kind == CONFLICT:
            conflicts += 1
            out += [f"<<<<<<< {labels[0]}\n", *_block(c.ours), f"||||||| {labels[1]}\n", *_block(c.base),
                    "=======\n", *_block(c.theirs), f">>>>>>> {labels[2]}\n"]
        else:
            out += c.theirs if kind == THEIRS else c.ours
    return "".join(out), conflicts


MARKERS = ("<<<<<<< ", "||||||| ", ">>>>>>> ")
_CONFLICT = re.compile(r"^<<<<<<< [^\n]*\n(.*?)^\|\|\|\|\|\|\| [^\n]*\n.*?^=======\n(.*?)^>>>>>>> [^\n]*\n", re.M | re.S)


def taking(text: str, side: str) -> str:
    """The merge with each conflict settled for one side ("ours" or "theirs"): what the file is
    where the merge is sure, the rest as that side has it."""
    return _CONFLICT.sub(lambda m: m.group(1 if side == "ours" else 2), text)


def marker_lines(text: str) -> list[int]:
    """1-based numbers of the lines that begin with a conflict marker (left unresolved)."""
    return [n for n, line in enumerate(text.split("\n"), 1) if line.startswith(MARKERS)]
