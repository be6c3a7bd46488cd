"""File patches as values, applied to bytes strictly (exact lines, offsets allowed)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from ..errors import BadInput, HunkFailed
from . import gitbinary
from .gitbinary import BinaryPatch
from .gitquote import quote as quote, split_lines as split_lines, unquote as unquote  # re-exported

_ENC = ("utf-8", "surrogateescape")


@dataclass(frozen=True)
class Hunk:
    """One hunk of a file patch: where it starts, and its lines before and after."""

    header: str
    source_start: int
    old_lines: tuple[str, ...]  # context and removed lines, with their line endings
    new_lines: tuple[str, ...]  # context and added lines
    new_start: int | None = None  # the new side's first line (None: as source_start)
    trailing: int | None = None  # context lines after the last change (None: counted from the lines)


@dataclass(frozen=True)
class FilePatch:
    """The change one diff makes to one site-packages-relative path."""

    path: str
    kind: (
        str  # "modify" | "add" | "delete" | "rename" | "copy" (of `source`, with the hunks or binary applied)
    )
    new_mode: int | None
    hunks: tuple[Hunk, ...]
    source: str | None = None  # a rename's or copy's origin
    binary: BinaryPatch | None = None  # git's binary patch, in place of hunks
    added: int = 0  # lines, for the diffstat
    removed: int = 0
    # a traditional patch (no git header, neither side /dev/null nor dated at the epoch) of one hunk
    # with no old line: git applies it to the file, or creates the file where it is missing (apply.c:
    # is_new stays unknown until check_preimage finds no file)
    new_if_missing: bool = False


@dataclass(frozen=True)
class Applied:
    """A file patch applied to some bytes: the result (None: it did not fit) and how far each hunk moved."""

    data: bytes | None
    offsets: tuple[int, ...]  # how far each hunk moved from where its header put it


def apply(patch: FilePatch, data: bytes | None, origin: str) -> Applied:
    """Apply one file's hunks (or binary patch) to its current bytes (None when absent; a rename's
    or copy's: its source's bytes), each hunk placed as `git apply` places it (see `_fit`)."""
    where = f"{origin}: {patch.path}"
    if patch.kind == "add" and data is not None:
        raise HunkFailed(
            f"{where}: the patch adds this file but it already exists",
            "roll back first, or check which patch set created it",
        )
    if patch.kind != "add" and data is None and not patch.new_if_missing:
        raise HunkFailed(
            f"{where if patch.source is None else f'{origin}: {patch.source}'}: the file does not exist",
            "check the package version",
        )
    if patch.binary is not None:
        if patch.kind == "delete":
            assert data is not None
            gitbinary.decode(patch.binary, where)  # git inflates it too: a damaged one is refused
            gitbinary.check_old(patch.binary, data, where)
            return Applied(None, ())
        return Applied(gitbinary.apply(patch.binary, data, where), ())
    if not patch.hunks and patch.kind != "delete":  # a mode change, a pure rename or copy, an empty file
        return Applied(data if data is not None else b"", ())
    lines = split_lines((data or b"").decode(*_ENC))
    placed = _place(lines, patch.hunks)
    for hunk, at in zip(patch.hunks, placed.at):
        if at is None:
            raise HunkFailed(
                f"{where}: hunk {hunk.header} does not apply: {_mismatch(placed.lines, hunk, _start(hunk, len(placed.lines)))}",
                "the file differs from what the patch set was written against; "
                "run `patchkeeper check` or rebuild the patch set",
            )
    if patch.kind == "delete":
        if placed.lines:
            raise HunkFailed(
                f"{where}: the file to delete differs from the patch's copy (the patch leaves "
                f"{len(placed.lines)} line(s) of it)",
                "the file was changed; check it against the patch",
            )
        return Applied(None, ())
    return Applied("".join(placed.lines).encode(*_ENC), placed.offsets)


@dataclass
class _Placed:
    lines: list[str]  # the file with every hunk that fits applied
    at: list[int | None]  # where each hunk landed in the file as it was then, None: nowhere
    offsets: tuple[int, ...]  # how far each hunk that landed moved from its header's old line


def _place(lines: list[str], hunks: tuple[Hunk, ...]) -> _Placed:
    """Apply the hunks in order to `lines`, each where `_fit` finds it; a hunk that fits nowhere is
    left out (at None) and the rest go on."""
    lines = list(lines)
    patched = [False] * len(lines)  # lines a hunk wrote: no later hunk matches them (git's LINE_PATCHED)
    at_list: list[int | None] = []
    moves: list[tuple[int, int]] = []  # (where a hunk landed, lines it added less those it removed)
    offsets = []
    for hunk in hunks:
        at = _fit(lines, patched, hunk)
        at_list.append(at)
        if at is None:
            continue
        n = len(hunk.old_lines)
        lines[at : at + n] = hunk.new_lines
        patched[at : at + n] = [True] * len(hunk.new_lines)
        base_at = at - sum(d for a, d in moves if a <= at)  # the line of the file before any hunk
        moves.append((at, len(hunk.new_lines) - n))
        offsets.append(base_at - (hunk.source_start - 1 if hunk.old_lines else hunk.source_start))
    return _Placed(lines, at_list, tuple(offsets))


def _c_int(value: int) -> int:
    """A line number as git's apply.c holds it in an int (its unsigned long truncated)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _anchors(hunk: Hunk) -> tuple[bool, bool]:
    """(must match at the start, must match at the end): git anchors a hunk whose old side starts at
    line 0 or 1 at the start of the file, and one without trailing context at its end (apply.c,
    apply_one_fragment, without --unidiff-zero, which patchkeeper does not take)."""
    return hunk.source_start <= 1, _trailing(hunk) == 0


def _start(hunk: Hunk, size: int) -> int:
    """Where git starts looking for a hunk: the first line for one anchored at the start, the line
    that leaves its old lines at the end for one anchored at the end, else its new side's line;
    past the end (a huge or negative number) the end."""
    begin, end = _anchors(hunk)
    if begin:
        line = 0
    elif end:
        line = size - len(hunk.old_lines)
    else:
        new_start = hunk.new_start if hunk.new_start is not None else hunk.source_start
        line = _c_int(new_start - 1) if new_start else 0
    return size if line < 0 or line > size else line


def _fit(lines: list[str], patched: list[bool], hunk: Hunk) -> int | None:
    """Where the hunk's old lines are, as git's find_pos finds them: from `_start`, one line forward,
    one back, two forward, ... over the whole file; its old lines must be there exactly (no fuzz),
    none of them written by an earlier hunk, and at the start or end where it is anchored there."""
    old = list(hunk.old_lines)
    n, size = len(old), len(lines)
    begin, end = _anchors(hunk)
    line = _start(hunk, size)

    def fits(at: int) -> bool:
        if at + n > size or (end and at + n != size) or (begin and at != 0):
            return False
        if lines[at : at + n - 1] != old[:-1] or any(patched[at : at + n]):
            return False
        return not n or lines[at + n - 1] == old[-1] or (not end and _prefix(old[-1], lines[at + n - 1]))

    if begin or end:  # one place only: the search would find it there or nowhere
        return line if fits(line) else None
    back = forward = line
    at, i = line, 0
    while True:
        if fits(at):
            return at
        while True:
            if back == 0 and forward == size:
                return None
            if i & 1:
                if back == 0:
                    i += 1
                    continue
                back -= 1
                at = back
            else:
                if forward == size:
                    i += 1
                    continue
                forward += 1
                at = forward
            break
        i += 1


def _prefix(last: str, line: str) -> bool:
    """git compares a hunk's old lines with the file byte for byte over the hunk's own length (and
    line hashes that skip white space): an old last line without its newline matches a file line
    that goes on with white space only, which the hunk's new lines then replace whole."""
    return not last.endswith("\n") and line.startswith(last) and not line[len(last) :].strip(" \t\n\v\f\r")


def _trailing(hunk: Hunk) -> int:
    if hunk.trailing is not None:
        return hunk.trailing
    n = 0
    for a, b in zip(reversed(hunk.old_lines), reversed(hunk.new_lines)):
        if a != b:
            break
        n += 1
    return n


def _mismatch(lines: list[str], hunk: Hunk, want: int) -> str:
    for i, expected in enumerate(hunk.old_lines):
        found = lines[want + i] if 0 <= want + i < len(lines) else "<end of file>"
        if found != expected:
            return f"line {want + i + 1}: expected {expected.rstrip()!r}, found {found.rstrip()!r}"
    begin, end = _anchors(hunk)
    if begin and want != 0:
        return "the hunk has no context before it and must match at the start of the file"
    if end:
        return "the hunk has no context after it and must match at the end of the file"
    return "context lines do not match"


@dataclass(frozen=True)
class HunkCheck:
    """How one hunk fares against a file: where it lands (offset), or why it does not."""

    header: str
    offset: int | None  # None: the hunk does not apply
    problem: str = ""
    expected: tuple[str, ...] = ()  # the lines the hunk needs ...
    found: tuple[str, ...] = ()  # ... and what is there instead, from where it should start
    found_at: int = 0  # 1-based line of found[0]


def check(patch: FilePatch, data: bytes | None) -> tuple[HunkCheck, ...]:
    """Like `apply`, but try every hunk and report each, instead of stopping at the first failure."""
    if patch.kind == "add" and data is not None:
        return (HunkCheck("new file", None, "the file already exists"),)
    if patch.kind != "add" and data is None and not patch.new_if_missing:
        return (HunkCheck("file", None, "the file does not exist"),)
    if patch.binary is not None:
        try:
            apply(patch, data, "")
        except (HunkFailed, BadInput) as exc:
            return (HunkCheck("binary", None, exc.message.rpartition(": ")[2]),)
        return (HunkCheck("binary", 0),)
    lines = split_lines((data or b"").decode(*_ENC))
    placed = _place(lines, patch.hunks)
    out = []
    offsets = iter(placed.offsets)
    for hunk, at in zip(patch.hunks, placed.at):
        if at is None:
            want = _start(hunk, len(lines))
            n = len(hunk.old_lines)
            out.append(
                HunkCheck(
                    hunk.header,
                    None,
                    _mismatch(lines, hunk, want),
                    hunk.old_lines,
                    tuple(lines[want : want + n]),
                    want + 1,
                )
            )
        else:
            out.append(HunkCheck(hunk.header, next(offsets)))
    if patch.kind == "delete" and all(h.offset is not None for h in out) and placed.lines:
        out.append(
            HunkCheck(
                "deleted file",
                None,
                "the file to delete differs from the patch's copy",
                (),
                tuple(placed.lines),
                1,
            )
        )
    if patch.kind == "add" and not out:
        out.append(HunkCheck("new file", 0))
    return tuple(out) or (HunkCheck(patch.kind, 0),)


def shape_clashes(written: Iterable[str], names: Collection[str]) -> dict[str, str]:
    """path -> why a file cannot be placed there in a release of files `names` (a wheel's, with '/'
    between directories): a directory of the release at that path, or a file of it where a directory
    on the way must be. What `check` finds on a target by asking it (transaction.obstacles), for a wheel."""
    files = set(names)
    dirs = {name[:at] for name in files for at in range(len(name)) if name[at] == "/"}
    out = {}
    for path in written:
        if path in dirs:
            out[path] = "is a directory in the release, where the patch sets put a file"
            continue
        parent = next((p for p in _parents(path) if p in files), None)
        if parent is not None:
            out[path] = f"is below {parent}, a file in the release"
    return out


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
