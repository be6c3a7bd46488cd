"""File patches as values, applied to bytes strictly (exact lines, offsets allowed); git's path quoting."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import BadInput, HunkFailed
from . import gitbinary
from .gitbinary import BinaryPatch

_ENC = ("utf-8", "surrogateescape")
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


@dataclass(frozen=True)
class Hunk:
    """One hunk of a file patch: where it starts, and its lines before and after."""

    header: str
    source_start: int
    old_lines: tuple[str, ...]  # context and removed lines, with their line endings
    new_lines: tuple[str, ...]  # context and added lines


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


@dataclass(frozen=True)
class Applied:
    """A file patch applied to some bytes: the result (None: it did not fit) and how far each hunk moved."""

    data: bytes | None
    offsets: tuple[int, ...]  # how far each hunk moved from where its header put it


def split_lines(text: str) -> list[str]:
    """Split on newline only, keeping endings (str.splitlines also splits on \\f and \\r)."""
    lines = text.split("\n")
    out = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def quote(name: str, always: bool = False) -> str:
    """A path as git writes it (quote_c_style): in double quotes with C escapes and octal bytes when
    it holds a quote, a backslash, a control or a non-ASCII character (or `always`), else bare."""
    raw = name.encode("utf-8", "surrogateescape")
    if not always and not any(b < 0x20 or b >= 0x7F or b in (0x22, 0x5C) for b in raw):
        return name
    escapes = {v: k for k, v in _C_ESCAPES.items()}
    out = []
    for b in raw:
        if b in escapes:
            out.append("\\" + escapes[b])
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\{b:03o}")
        else:
            out.append(chr(b))
    return '"' + "".join(out) + '"'


def unquote(name: str) -> str:
    """A path as git writes it: bare, or in double quotes with C escapes (\\", \\\\, \\t, \\n, octal
    bytes) when it holds a quote, a backslash, a control or non-ASCII character."""
    if not (len(name) >= 2 and name[0] == name[-1] == '"'):
        return name
    out = bytearray()
    body, i = name[1:-1], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode("utf-8", "surrogateescape")
            i += 1
        elif body[i + 1 : i + 2] in _C_ESCAPES:
            out.append(_C_ESCAPES[body[i + 1]])
            i += 2
        elif body[i + 1 : i + 4].isdigit() and len(body[i + 1 : i + 4]) == 3:
            out.append(int(body[i + 1 : i + 4], 8) & 0xFF)
            i += 4
        else:
            raise BadInput(f"bad escape in the quoted path {name}", "write the diff again with git diff")
    return out.decode("utf-8", "surrogateescape")


def apply(patch: FilePatch, data: bytes | None, origin: str) -> Applied:
    """Apply one file's hunks (or binary patch) to its current bytes (None when absent; a rename's
    or copy's: its source's bytes); exact lines, offsets allowed."""
    where = f"{origin}: {patch.path}"
    if patch.kind == "add":
        if data is not None:
            raise HunkFailed(
                f"{where}: the patch adds this file but it already exists",
                "roll back first, or check which patch set created it",
            )
        if patch.binary is not None:
            return Applied(gitbinary.apply(patch.binary, None, where), ())
        return Applied("".join(l for h in patch.hunks for l in h.new_lines).encode(*_ENC), ())
    if data is None:
        raise HunkFailed(
            f"{where if patch.source is None else f'{origin}: {patch.source}'}: the file does not exist",
            "check the package version",
        )
    if patch.binary is not None:
        if patch.kind == "delete":
            gitbinary.check_old(patch.binary, data, where)
            return Applied(None, ())
        return Applied(gitbinary.apply(patch.binary, data, where), ())
    if not patch.hunks and patch.kind != "delete":  # a mode change, a pure rename or copy
        return Applied(data, ())
    lines = split_lines(data.decode(*_ENC))
    if patch.kind == "delete":
        expected = [l for h in patch.hunks for l in h.old_lines]
        if lines != expected:
            raise HunkFailed(
                f"{where}: the file to delete differs from the patch's copy",
                "the file was changed; check it against the patch",
            )
        return Applied(None, ())
    out: list[str] = []
    pos = 0
    offsets = []
    for hunk, want, at in _placements(lines, patch.hunks):
        if at is None:
            raise HunkFailed(
                f"{where}: hunk {hunk.header} does not apply: {_mismatch(lines, hunk, want)}",
                "the file differs from what the patch set was written against; "
                "run `patchkeeper check` or rebuild the patch set",
            )
        offsets.append(_offset(hunk, at))
        out.extend(lines[pos:at])
        out.extend(hunk.new_lines)
        pos = at + len(hunk.old_lines)
    out.extend(lines[pos:])
    return Applied("".join(out).encode(*_ENC), tuple(offsets))


def _placements(lines: list[str], hunks: tuple[Hunk, ...]) -> Iterator[tuple[Hunk, int, int | None]]:
    """(hunk, where its header puts it, where it lands or None), hunk by hunk, as patch places them:
    in order, each at or after the previous one's end, the nearest exact match to where it should be."""
    pos = shift = 0
    for hunk in hunks:
        want = max(hunk.source_start - 1 + shift, pos) if hunk.old_lines else hunk.source_start + shift
        at = _locate(lines, hunk.old_lines, want, pos)
        yield hunk, want, at
        if at is not None:
            shift = at - (hunk.source_start - 1) if hunk.old_lines else shift
            pos = at + len(hunk.old_lines)


def _offset(hunk: Hunk, at: int) -> int:
    return at - (hunk.source_start - 1 if hunk.old_lines else hunk.source_start)


def _locate(lines: list[str], old: tuple[str, ...], want: int, floor: int) -> int | None:
    n = len(old)
    limit = len(lines) - n
    for distance in range(0, max(limit, 0) + abs(want) + 2):
        for at in (want - distance, want + distance) if distance else (want,):
            if floor <= at <= limit and tuple(lines[at : at + n]) == old:
                return at
        if want - distance < floor and want + distance > limit:
            break
    return None


def _mismatch(lines: list[str], hunk: Hunk, want: int) -> str:
    for i, expected in enumerate(hunk.old_lines):
        found = lines[want + i] if 0 <= want + i < len(lines) else "<end of file>"
        if found != expected:
            return f"line {want + i + 1}: expected {expected.rstrip()!r}, found {found.rstrip()!r}"
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
    if patch.kind == "add":
        ok = data is None
        return (HunkCheck("new file", 0 if ok else None, "" if ok else "the file already exists"),)
    if data is None:
        return (HunkCheck("file", None, "the file does not exist"),)
    if patch.binary is not None:
        try:
            apply(patch, data, "")
        except (HunkFailed, BadInput) as exc:
            return (HunkCheck("binary", None, exc.message.rpartition(": ")[2]),)
        return (HunkCheck("binary", 0),)
    lines = split_lines(data.decode(*_ENC))
    if patch.kind == "delete":
        expected = tuple(l for h in patch.hunks for l in h.old_lines)
        ok = tuple(lines) == expected
        return (
            HunkCheck(
                "deleted file",
                0 if ok else None,
                "" if ok else "the file to delete differs from the patch's copy",
                expected,
                tuple(lines),
                1,
            ),
        )
    out = []
    for hunk, want, at in _placements(lines, patch.hunks):
        if at is None:
            n = len(hunk.old_lines)
            out.append(
                HunkCheck(
                    hunk.header,
                    None,
                    _mismatch(lines, hunk, want),
                    hunk.old_lines,
                    tuple(lines[max(want, 0) : max(want, 0) + n]),
                    max(want, 0) + 1,
                )
            )
        else:
            out.append(HunkCheck(hunk.header, _offset(hunk, at)))
    return tuple(out)
