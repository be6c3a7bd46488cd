"""Read a diff into file patches the way `git apply` reads it: unidiff reads the files' headers and
hunks; this module fills unidiff's gaps (each in one function below, named `_gap_...`, and the git
header's in githeader.py; each with a test that shows unidiff alone misreading:
tests/test_gitdiff_gaps.py) with git's rules (apply.c:
find_header, the git header table, parse_fragment, parse_binary): git's extended headers (modes,
renames, copies, binary patches), quoted and spaced names, the traditional `---`/`+++` form; mail
text around is skipped. A parse is remembered under the text's digest (parse_cache.py)."""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING

from ..errors import BadInput
from . import gitbinary, githeader, parse_cache
from .patching import FilePatch, Hunk

if TYPE_CHECKING:
    from unidiff.patch import PatchedFile

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_BINARY_HEAD = re.compile(r"(literal|delta) (\d+)")
_INDEX = re.compile(r"([0-9a-f]+)\.\.([0-9a-f]+)(?: [0-7]+)?")
_REDO = githeader.REDO
_ULONG_MAX = (1 << 64) - 1


def parse(text: str, origin: str) -> tuple[FilePatch, ...]:
    """Every file patch of a diff as `git diff` (or `diff -u`, or `git format-patch`) writes it;
    BadInput naming `origin` when it is not one. Remembered by the text's digest: a 35 MB release
    diff is read by unidiff once."""
    return parse_cache.remembered(text, origin, _parse)


def _parse(text: str, origin: str) -> tuple[FilePatch, ...]:
    from unidiff.errors import UnidiffParseError  # lazy: with unidiff
    from unidiff.patch import PatchSet  # lazy: only where a diff is read, not on the fast paths

    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    else:
        _check_last_line(lines, origin)
    try:
        files = PatchSet(io.StringIO(_gap_text_for_unidiff(lines, origin)))
    except UnidiffParseError as exc:
        stray = str(exc).removeprefix("Unexpected hunk found: ").rstrip("\n")
        if stray != str(exc) and stray in lines:  # a hunk after text that ended its file's patch
            _fragment_without_header(lines, lines.index(stray), origin)
        raise BadInput(f"{origin}: not a unified diff: {exc}", _REDO) from None
    out: list[FilePatch] = []
    headers: set[int] = set()  # the index of each hunk header unidiff read
    reverse: list[tuple[gitbinary.BinaryPatch, str]] = []  # the reverse chunks, decoded below
    for pf in files:
        fp = _file_patch(pf, lines, origin, headers, reverse)
        if fp is not None:
            out.append(_checked(fp, origin))
    _gap_stray_fragments(lines, headers, origin)
    declared = sum(r.size for r, _ in reverse)
    declared += sum(gitbinary.held(fp.binary, origin) for fp in out if fp.binary is not None)
    gitbinary.refuse_over_total(declared, origin)
    for chunk, where in reverse:  # git reads the reverse chunk too: a damaged one refuses the patch
        gitbinary.decode(chunk, where)
    if not out and text.strip():
        raise BadInput(f"{origin}: no file changes found in the diff", "regenerate it with git diff")
    return tuple(out)


def _file_patch(
    pf: PatchedFile,
    lines: list[str],
    origin: str,
    headers: set[int],
    reverse: list[tuple[gitbinary.BinaryPatch, str]],
) -> FilePatch | None:
    """One file's patch as unidiff read it, its gaps filled (a binary patch's reverse chunk added to
    `reverse`); None for what git takes as mail text."""
    info = [line.rstrip("\n") for line in pf.patch_info or ()]
    at = (pf.diff_line_no or 1) - 1  # the `diff --git` line, or a traditional patch's `+++` line
    if not (info and info[0].startswith("diff --git ")):
        return _traditional(pf, lines, at - 1, origin, headers)
    _refuse_crlf(lines[at], at, origin)
    where = f"{origin}:{at + 1}"
    head, end = githeader.read(lines, at, where)
    old, new = githeader.names(lines[at][len("diff --git ") :], head, where)
    if old is None and new is None:
        raise BadInput(f"{where}: the git header names no file (`{lines[at][:80]}`)", _REDO)
    kind = githeader.kind(head)
    path = (old if kind == "delete" else new) or old or new
    assert path is not None
    source = old if kind in ("rename", "copy") else None
    if kind == "modify" and old is not None and new is not None and old != new:
        raise BadInput(f"{where}: the diff changes {old!r} into {new!r} without a rename header", _REDO)
    for key in ("old mode ", "new mode ", "deleted file mode ", "new file mode "):
        if key in head:
            githeader.mode(head[key], path, origin)
    new_mode = next(
        (githeader.mode(head[k], path, origin) for k in ("new mode ", "new file mode ") if k in head), None
    )
    binary = None
    hunks: tuple[Hunk, ...] = ()
    counts = (0, 0)
    if end < len(lines) and lines[end] == "GIT binary patch":
        binary, *backward = _gap_binary(lines, end + 1, head.get("index "), where)
        reverse += [(chunk, where) for chunk in backward]
    elif end < len(lines) and lines[end].startswith("Binary files ") and lines[end].endswith(" differ"):
        raise BadInput(
            f"{where}: {path} is a binary change without its bytes (a diff made without --binary)", _REDO
        )
    elif end < len(lines) and lines[end].startswith("@@ -") and not len(pf):
        raise BadInput(f"{where}: not a unified diff: bad hunk header {lines[end][:60]!r}", _REDO)
    else:
        hunks, counts = _hunks(pf, lines, where, origin, headers)
        if hunks and end not in headers:
            _gap_text_before_hunks(lines, end, origin)
    if not hunks and binary is None and kind == "modify" and head.get("old mode ") == head.get("new mode "):
        raise BadInput(  # git: "patch with only garbage": no hunk, no binary patch, nothing else changed
            f"{where}: the diff of {path} changes nothing (no hunk, no mode change)", _REDO
        )
    return FilePatch(path, kind, new_mode, hunks, source, binary, *counts)


def _traditional(
    pf: PatchedFile, lines: list[str], at: int, origin: str, headers: set[int]
) -> FilePatch | None:
    """A `---`/`+++` patch without a git header (diff -u, diff -ruN): unidiff's hunks, the names and
    diff -N's epoch dates (a missing side) read here as git reads them."""
    if not len(pf):
        return None  # `---` and `+++` lines without a hunk: git takes them as mail text
    _refuse_crlf(lines[at], at, origin)
    where = f"{origin}:{at + 1}"
    old = githeader.side_name(lines[at][4:], where, traditional=True)
    new = githeader.side_name(lines[at + 1][4:], where, traditional=True)
    if old is not None and githeader.epoch(lines[at]):  # diff -N dates the missing side at the epoch
        old = None
    elif new is not None and githeader.epoch(lines[at + 1]):
        new = None
    kind = "add" if old is None else "delete" if new is None else "modify"
    path = new if new is not None else old
    if path is None:
        raise BadInput(f"{where}: both sides are /dev/null", _REDO)
    read, counted = _hunks(pf, lines, where, origin, headers)
    maybe_new = kind == "modify" and len(read) == 1 and not read[0].old_lines
    return FilePatch(path, kind, None, read, None, None, *counted, new_if_missing=maybe_new)


def _gap_text_before_hunks(lines: list[str], end: int, origin: str) -> None:
    """GAP: unidiff keeps text between a file's header and its first hunk as header lines. git ends
    the file's patch there (no hunk, a file patch of garbage): the hunk after is a fragment without
    header."""
    following = next(i for i in range(end, len(lines)) if lines[i].startswith("@@ -"))
    _fragment_without_header(lines, following, origin)


def _gap_text_for_unidiff(lines: list[str], origin: str) -> str:
    """GAP: unidiff splits `diff --git A B` at the last ` b/` (or, without prefixes, the last space)
    and then refuses a `+++` name other than the B it found ("Target without source"): `diff --git
    b/x y b/x y` (git diff --no-index) or a name holding ` b/` stop it. And it raises on git's header
    lines met outside a git header (`new file mode`, `GIT binary patch`, a lone `+++`, a
    no-newline mark after text), which git skips as mail text. The text it reads has each git
    header's names replaced by a placeholder and those lines by `x` (same lines, same numbers);
    githeader.py reads git's names from the lines as they are."""
    out = lines.copy()
    inside: set[int] = set()  # the lines of git headers, the line after them
    for i in [i for i, line in enumerate(lines) if line.startswith("diff --git ")]:
        out[i] = "diff --git a/f b/f"
        j = i + 1
        while j < len(lines) and lines[j].startswith(githeader.HEADERS):
            j += 1
        if j == i + 1:  # a `diff --git` line without header lines: refused as githeader.read refuses it
            githeader.read(lines, i, f"{origin}:{i + 1}")
        inside.update(range(i, j + 1))
        if j < len(lines) and not lines[j].startswith(
            ("@@ -", "GIT binary patch", "Binary files ", "diff --git ")
        ):
            out[j] = "Binary files a/f and b/f differ"  # ends the file for unidiff where git's header ended
        gone = any(line.startswith("deleted file mode ") for line in lines[i + 1 : j])
        for k in range(i + 1, j):
            if lines[k].startswith("--- "):
                out[k] = "--- a/f"
            elif lines[k].startswith("+++ "):
                out[k] = "+++ /dev/null" if gone else "+++ b/f"  # unidiff's target after `deleted file`
    for i in [i for i, line in enumerate(lines) if line.startswith(_OUTSIDE)]:
        line = lines[i]
        if i in inside:
            continue
        before = lines[i - 1] if i else "x"
        if line.startswith("\\") and (before[:1] in ("", " ", "+", "-", "\\") or before.startswith("@@ -")):
            continue  # a mark after a hunk line, as unidiff reads it
        out[i] = "x"
    return "\n".join(out) + "\n"


_OUTSIDE = ("new file mode ", "deleted file mode ", "GIT binary patch", "\\")


def _hunks(
    pf: PatchedFile, lines: list[str], where: str, origin: str, headers: set[int]
) -> tuple[tuple[Hunk, ...], tuple[int, int]]:
    """The file's hunks as unidiff read them (by their headers' line counts, as parse_fragment does)."""
    hunks = []
    added = removed = 0
    last = len(pf) - 1
    for n, uh in enumerate(pf):
        numbered = [line.diff_line_no for line in uh if line.diff_line_no is not None]
        header_at = numbered[0] - 2 if numbered else -1
        header = lines[header_at] if header_at >= 0 else "@@"
        _refuse_crlf(header, header_at, origin)
        headers.add(header_at)
        m = _HUNK.match(header)
        old: list[str] = []
        new: list[str] = []
        previous = "@"
        trailing = 0  # context lines since the last change, as parse_fragment counts them
        for line in uh:
            kind = line.line_type
            value = line.value if line.value.endswith("\n") else line.value + "\n"
            if kind == "+":
                new.append(value)
                trailing = 0
            elif kind == "-":
                old.append(value)
                trailing = 0
            elif kind == " ":
                old.append(value)
                new.append(value)
                trailing += 1
            elif kind == "\\":
                if not _no_newline_mark("\\" + line.value.rstrip("\n")):
                    raise BadInput(f"{where}: corrupt patch at {str(line).rstrip()[:40]!r}", _REDO)
                if old or new:  # right after the header it ends no line: git ignores it there
                    _no_newline(previous, old, new)
                continue
            elif n < last:  # GAP (see _gap_stray_fragments): an empty line, then this file's next hunk
                following = [x.diff_line_no for x in pf[n + 1] if x.diff_line_no is not None][:1] or [1]
                _fragment_without_header(lines, following[0] - 2, origin)
            else:
                continue  # an empty line after the file's last hunk: mail text
            previous = kind
        _gap_foreign_no_newline(lines, numbered, previous, old, new)
        plus, minus = sum(1 for x in uh if x.line_type == "+"), sum(1 for x in uh if x.line_type == "-")
        if plus == minus == 0:
            raise BadInput(f"{where}: corrupt patch: hunk {header[:40]} adds and removes no line", _REDO)
        added += plus
        removed += minus
        first, second = (m.group(1), m.group(3)) if m else (str(uh.source_start), str(uh.target_start))
        hunks.append(
            Hunk(
                f"@@ -{first},{len(old)} +{second},{len(new)} @@",
                min(int(first), _ULONG_MAX),  # git's strtoul saturates; where it looks is bounded
                tuple(old),
                tuple(new),
                min(int(second), _ULONG_MAX),
                trailing,
            )
        )
    return tuple(hunks), (added, removed)


def _gap_foreign_no_newline(
    lines: list[str], numbered: list[int], previous: str, old: list[str], new: list[str]
) -> None:
    """GAP: unidiff knows the no-newline mark only in English; git takes any line of at least 11
    characters starting with a backslash and a space right after a hunk (patch(1)'s translations)."""
    after = numbered[-1] if numbered else None  # 1-based number of the hunk's last line: the next one's index
    if after is None or after >= len(lines) or lines[after - 1].startswith("\\"):
        return
    if _no_newline_mark(lines[after]) and not lines[after].startswith("\\ No newline at end of file"):
        _no_newline(previous, old, new)


def _gap_stray_fragments(lines: list[str], headers: set[int], origin: str) -> None:
    """GAP: unidiff takes a hunk after an empty line as the file's next hunk, and skips a malformed
    `@@` line as text. git refuses both (find_header: "patch fragment without header"; parse_fragment:
    "corrupt patch"): a hunk header unidiff did not read as one refuses the whole diff."""
    for i in [i for i, line in enumerate(lines) if line.startswith("@@ -")]:
        if i in headers:
            continue
        line = lines[i]
        if _HUNK.match(line):
            _fragment_without_header(lines, i, origin)
        before = lines[i - 1][:1] if i else ""
        if before in (" ", "+", "-", "\\") or i - 1 in headers:
            raise BadInput(f"{origin}:{i + 1}: not a unified diff: bad hunk header {line[:60]!r}", _REDO)


def _fragment_without_header(lines: list[str], i: int, origin: str) -> None:
    raise BadInput(
        f"{origin}:{i + 1}: patch fragment without header: {lines[i][:60]!r} (a note or an empty "
        "line between two hunks, or a hunk without its diff --git/---/+++ lines)",
        _REDO,
    )


def _refuse_crlf(line: str, i: int, where: str) -> None:
    """A header line ending in a CR: the diff went through Windows line endings, which no reader takes."""
    if line.endswith("\r"):
        raise BadInput(
            f"{where}: has CRLF (Windows) line endings, first on line {i + 1}: {line.strip()!r}",
            "convert it to LF endings (e.g. dos2unix), or write it again with git diff",
        )


def _no_newline_mark(line: str) -> bool:
    """`\\ No newline at end of file`, in any language: git takes a line starting with a backslash and
    a space, at least 11 characters long (apply.c, parse_fragment)."""
    return line.startswith("\\ ") and len(line) >= 11


def _no_newline(previous: str, old: list[str], new: list[str]) -> None:
    """`\\ No newline at end of file` ends the line before it without its newline."""
    sides = [old, new] if previous[:1] in (" ", "") else [old] if previous[:1] == "-" else [new]
    for side in sides:
        side[-1] = side[-1].removesuffix("\n")


_HUNK_COUNTS = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _check_last_line(lines: list[str], origin: str) -> None:
    """The text's last line when it has no newline: git reads no hunk line without one, so a hunk
    whose counts reach that line refuses the diff (apply.c's parse_fragment); text after a hunk's end
    is mail text."""
    i = len(lines) - 1
    while i >= 0 and lines[i][:1] in ("+", "-", " ", "\\") and not lines[i].startswith(("--- ", "+++ ")):
        i -= 1  # back over what may be a hunk's lines to its header
    m = _HUNK_COUNTS.match(lines[i]) if i >= 0 else None
    if m is None:
        return
    old, new = int(m.group(1) or 1), int(m.group(2) or 1)
    for j in range(i + 1, len(lines)):
        if old <= 0 and new <= 0:
            return  # the hunk ended before the last line: that line is text after it
        mark = lines[j][:1]
        old -= mark in (" ", "-")
        new -= mark in (" ", "+")
    raise BadInput(f"{origin}: the diff ends inside a line ({lines[-1][:40]!r} has no newline)", _REDO)


def _gap_binary(lines: list[str], i: int, index: str | None, where: str) -> list[gitbinary.BinaryPatch]:
    """GAP: unidiff marks a binary file but keeps no payload. `GIT binary patch`: the forward chunk
    (kept, decoded when applied), then the reverse one (decoded by _parse, once the sizes of all
    are known to fit), each ended by an empty line."""
    m = _INDEX.fullmatch(index or "")
    if m is None or len(m.group(1)) != 40 or len(m.group(2)) != 40:
        raise BadInput(
            f"{where}: a binary patch needs git's full index line (git diff --binary writes it)", _REDO
        )
    chunks: list[gitbinary.BinaryPatch] = []
    while i < len(lines) and len(chunks) < 2:
        head = _BINARY_HEAD.fullmatch(lines[i])
        if head is None:
            break
        start = i + 1
        try:
            i = lines.index("", start)  # the lines are checked as they are decoded, when applied
        except ValueError:
            i = len(lines)
        chunks.append(
            gitbinary.BinaryPatch(
                head.group(1), int(head.group(2)), tuple(lines[start:i]), m.group(1), m.group(2)
            )
        )
        i += 1  # the empty line
    if not chunks:
        raise BadInput(f"{where}: `GIT binary patch` without a literal or delta chunk", _REDO)
    return chunks


def _checked(fp: FilePatch, origin: str) -> FilePatch:
    for name in (fp.path, fp.source or ""):
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            shown = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise BadInput(
                f"{origin}: the file name {shown!r} is not UTF-8, which patchkeeper cannot name "
                "in its manifests",
                "rename the file to a UTF-8 name, or ship it another way",
            ) from None
    return fp


def diffstat(patches: tuple[FilePatch, ...]) -> list[tuple[str, int, int]]:
    """(path, lines added, lines removed) for each file patch."""
    return [(fp.path, fp.added, fp.removed) for fp in patches]


def sections(data: bytes) -> list[bytes]:
    """A git diff cut before each `diff --git` line (the text before the first stays with it);
    joined again they are the diff."""
    starts = [0] + [m.start() + 1 for m in re.finditer(rb"\ndiff --git ", data)]
    return [data[a:b] for a, b in zip(starts, starts[1:] + [len(data)]) if b > a]
