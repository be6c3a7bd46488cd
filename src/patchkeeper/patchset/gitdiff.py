"""Read a diff into file patches the way `git apply` reads it (apply.c: parse_chunk, the git header
table, parse_fragment, parse_binary): git's extended headers (modes, renames, copies, binary
patches), quoted and spaced names, and the traditional `---`/`+++` form; mail text around is skipped."""

from __future__ import annotations

import re

from ..errors import BadInput
from . import gitbinary
from .patching import FilePatch, Hunk, unquote

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_BINARY_HEAD = re.compile(r"(literal|delta) (\d+)")
_STAMP = re.compile(
    r"(1969-12-31|1970-01-01) ([0-2][0-9]):([0-5][0-9]):00(?:\.0+)? ([-+])([0-2][0-9]):?([0-5][0-9])"
)
_ULONG_MAX = (1 << 64) - 1
_FROM = ("rename from ", "rename old ", "copy from ")
_TO = ("rename to ", "rename new ", "copy to ")
_INDEX = re.compile(r"([0-9a-f]+)\.\.([0-9a-f]+)(?: [0-7]+)?")
_HEADERS = (
    "old mode ",
    "new mode ",
    "deleted file mode ",
    "new file mode ",
    "copy from ",
    "copy to ",
    "rename old ",
    "rename new ",
    "rename from ",
    "rename to ",
    "similarity index ",
    "dissimilarity index ",
    "index ",
    "--- ",
    "+++ ",
)  # apply.c's table; anything else ends the header
_REDO = "write the diff again with git diff (--binary for binary files)"


def parse(text: str, origin: str) -> tuple[FilePatch, ...]:
    """Every file patch of a diff as `git diff` (or `diff -u`, or `git format-patch`) writes it;
    BadInput naming `origin` when it is not one."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    elif lines[-1][:1] in ("+", "-", " ", "\\"):  # git reads no hunk line without its newline
        raise BadInput(f"{origin}: the diff ends inside a line ({lines[-1][:40]!r} has no newline)", _REDO)
    out: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            _refuse_crlf(line, i, origin)
            i = _git_patch(lines, i, origin, out)
        elif (
            line.startswith("--- ")
            and lines[i + 1 : i + 2]
            and lines[i + 1].startswith("+++ ")
            and lines[i + 2 : i + 3]
            and lines[i + 2].startswith("@@ -")
        ):
            _refuse_crlf(line, i, origin)
            i = _traditional_patch(lines, i, origin, out)
        elif line.startswith("@@ -") and _HUNK.match(line):
            raise BadInput(  # a hunk cut from its file's header: git refuses the whole diff (find_header)
                f"{origin}:{i + 1}: patch fragment without header: {line[:60]!r} (a note or an empty "
                "line between two hunks, or a hunk without its diff --git/---/+++ lines)",
                _REDO,
            )
        else:
            i += 1  # mail headers, the commit message, a signature: git skips them too
    if not out and text.strip():
        raise BadInput(f"{origin}: no file changes found in the diff", "regenerate it with git diff")
    return tuple(out)


def _git_patch(lines: list[str], i: int, origin: str, out: list[FilePatch]) -> int:
    """One `diff --git` section: its extended headers, then hunks or a binary patch."""
    where = f"{origin}:{i + 1}"
    names = _header_names(lines[i][len("diff --git ") :])
    head: dict[str, str] = {}
    i += 1
    while i < len(lines):
        line = lines[i]
        key = next((k for k in _HEADERS if line.startswith(k)), None)
        if key is None:
            break
        if key in head and head[key] != line[len(key) :] and key in ("--- ", "+++ ", *_FROM, *_TO):
            raise BadInput(f"{where}: the git header names two files in `{key.strip()}` lines", _REDO)
        head[key] = line[len(key) :]
        i += 1
    if not head and not (i < len(lines) and lines[i].startswith(("@@ -", "GIT binary patch"))):
        raise BadInput(  # git skips it, but keeps its names for the next header: refused, not guessed
            f"{where}: a `diff --git` line without the header lines git writes after it "
            f"(`{lines[i - 1][:80]}`)",
            _REDO,
        )
    old = new = None
    if names is not None:
        old, new = _strip(names[0], where), _strip(names[1], where)
    default = old if old == new else None
    for key in ("rename from ", "rename old ", "copy from "):
        if key in head:
            old = unquote(head[key])
    for key in ("rename to ", "rename new ", "copy to "):
        if key in head:
            new = unquote(head[key])
    for side, keys in (("--- ", _FROM), ("+++ ", _TO)):
        named = next((unquote(head[k]) for k in keys if k in head), None)
        if side not in head:
            continue
        name = _side(head[side], where)
        if named is None:
            old, new = (name or old, new) if side == "--- " else (old, name or new)
        elif name is not None and name != named:  # git: "inconsistent old/new filename"
            raise BadInput(
                f"{where}: the {side.strip()} name {name!r} is not the {keys[0].strip()} name {named!r}",
                _REDO,
            )
    if old is None and new is None:
        raise BadInput(f"{where}: the git header names no file (`{lines[i - len(head) - 1][:80]}`)", _REDO)
    for side, mode in (("--- ", "new file mode "), ("+++ ", "deleted file mode ")):
        if head.get(side, "").split("\t")[0] == "/dev/null" and mode not in head:
            raise BadInput(  # git reads it as the path dev/null then (gitdiff_verify_name)
                f"{where}: `{side}/dev/null` in a git header without `{mode.strip()}`", _REDO
            )
    if default is not None:  # git's default name (both sides the same): a new or deleted file's is it
        for side, mode in (("+++ ", "new file mode "), ("--- ", "deleted file mode ")):
            if mode in head and _names(head, side) and _side(head[side], where) != default:
                raise BadInput(f"{where}: the {side.strip()} name is not the `diff --git` line's", _REDO)
    named_old = _names(head, "--- ") or any(k in head for k in _FROM)
    named_new = _names(head, "+++ ") or any(k in head for k in _TO)
    if (named_old or named_new) and (
        (not named_new and "deleted file mode " not in head)
        or (not named_old and "new file mode " not in head)
    ):  # one side named, the other needed: git takes neither from the `diff --git` line then
        raise BadInput(
            f"{where}: the git header names only one side of the file (`---` or `+++` missing)", _REDO
        )
    copy = "copy from " in head
    rename = not copy and any(k in head for k in ("rename from ", "rename old "))
    added = "new file mode " in head or head.get("--- ") == "/dev/null"
    deleted = "deleted file mode " in head or head.get("+++ ") == "/dev/null"
    kind = "add" if added else "delete" if deleted else "copy" if copy else "rename" if rename else "modify"
    path = (old if kind == "delete" else new) or old or new
    assert path is not None
    source = old if kind in ("rename", "copy") else None
    if kind == "modify" and old is not None and new is not None and old != new:
        raise BadInput(f"{where}: the diff changes {old!r} into {new!r} without a rename header", _REDO)
    for key in ("old mode ", "new mode ", "deleted file mode ", "new file mode "):
        if key in head:
            _mode(head[key], path, origin)
    new_mode = next(
        (_mode(head[k], path, origin) for k in ("new mode ", "new file mode ") if k in head), None
    )
    binary = None
    hunks: tuple[Hunk, ...] = ()
    counts = (0, 0)
    if i < len(lines) and lines[i] == "GIT binary patch":
        binary, i = _binary(lines, i + 1, head.get("index "), where)
    elif i < len(lines) and lines[i].startswith("Binary files ") and lines[i].endswith(" differ"):
        raise BadInput(
            f"{where}: {path} is a binary change without its bytes (a diff made without --binary)", _REDO
        )
    elif i < len(lines) and lines[i].startswith("@@ -"):
        hunks, counts, i = _hunks(lines, i, where, origin)
    if not hunks and binary is None and kind == "modify" and head.get("old mode ") == head.get("new mode "):
        raise BadInput(  # git: "patch with only garbage": no hunk, no binary patch, nothing else changed
            f"{where}: the diff of {path} changes nothing (no hunk, no mode change)", _REDO
        )
    out.append(_checked(FilePatch(path, kind, new_mode, hunks, source, binary, *counts), origin))
    return i


def _names(head: dict[str, str], side: str) -> bool:
    """Does the header's ---/+++ line name a file (not /dev/null)?"""
    return side in head and head[side].split("\t")[0] != "/dev/null"


def _traditional_patch(lines: list[str], i: int, origin: str, out: list[FilePatch]) -> int:
    where = f"{origin}:{i + 1}"
    old, new = _side(lines[i][4:], where), _side(lines[i + 1][4:], where)
    if old is not None and _epoch(lines[i]):  # diff -N dates the missing side at the epoch
        old = None
    elif new is not None and _epoch(lines[i + 1]):
        new = None
    kind = "add" if old is None else "delete" if new is None else "modify"
    path = new if new is not None else old
    if path is None:
        raise BadInput(f"{where}: both sides are /dev/null", _REDO)
    hunks, counts, i = _hunks(lines, i + 2, where, origin)
    out.append(_checked(FilePatch(path, kind, None, hunks, None, None, *counts), origin))
    return i


def _epoch(line: str) -> bool:
    """Does a ---/+++ line's timestamp (after its last tab) say 1970-01-01 00:00:00 UTC, the date
    `diff -N` gives a missing file (apply.c: has_epoch_timestamp)?"""
    m = _STAMP.fullmatch(line.rpartition("\t")[2]) if "\t" in line else None
    if m is None:
        return False
    zone = int(m.group(5)) * 60 + int(m.group(6))
    zone = -zone if m.group(4) == "-" else zone
    epoch_hour = 24 if m.group(1) == "1969-12-31" else 0
    return int(m.group(2)) * 60 + int(m.group(3)) - zone == epoch_hour * 60


def _hunks(
    lines: list[str], i: int, where: str, origin: str
) -> tuple[tuple[Hunk, ...], tuple[int, int], int]:
    """The hunks from line i on, each read by its header's line counts, as parse_fragment does."""
    hunks = []
    added = removed = 0
    end = len(lines)
    while i < end and lines[i].startswith("@@ -"):
        header = lines[i]
        _refuse_crlf(header, i, origin)
        m = _HUNK.match(header)
        if m is None:
            raise BadInput(f"{where}: not a unified diff: bad hunk header {header[:60]!r}", _REDO)
        start = min(int(m.group(1)), _ULONG_MAX)  # git's strtoul saturates; where it looks is bounded
        left = int(m.group(2)) if m.group(2) is not None else 1
        right = int(m.group(4)) if m.group(4) is not None else 1
        old: list[str] = []
        new: list[str] = []
        trailing = 0  # context lines since the last change, as parse_fragment counts them
        hunk_added, hunk_removed = added, removed
        i += 1
        while left > 0 or right > 0:
            if i >= end:
                raise BadInput(
                    f"{where}: not a unified diff: hunk {header.split(' @@')[0]} @@ ends early "
                    "(at the end of the diff)",
                    _REDO,
                )
            line = lines[i]
            mark = line[:1]
            if mark == "+":
                new.append(line[1:] + "\n")
                right -= 1
                added += 1
                trailing = 0
            elif mark == "-":
                old.append(line[1:] + "\n")
                left -= 1
                removed += 1
                trailing = 0
            elif mark == " " or not line:  # an empty line: an empty context line, as git reads it
                value = line[1:] + "\n"
                old.append(value)
                new.append(value)
                left -= 1
                right -= 1
                trailing += 1
            elif _no_newline_mark(line):
                if old or new:  # right after the header it ends no line: git ignores it there
                    _no_newline(lines[i - 1], old, new)
            else:
                raise BadInput(
                    f"{where}: not a unified diff: hunk {header.split(' @@')[0]} @@ ends early "
                    f"(at {line[:40]!r})",
                    _REDO,
                )
            i += 1
        if left < 0 or right < 0:
            raise BadInput(
                f"{where}: not a unified diff: hunk {header[:40]} holds more lines than it counts", _REDO
            )
        if i < len(lines) and _no_newline_mark(lines[i]):
            _no_newline(lines[i - 1], old, new)
            i += 1
        if added == hunk_added and removed == hunk_removed:
            raise BadInput(f"{where}: corrupt patch: hunk {header[:40]} adds and removes no line", _REDO)
        hunks.append(
            Hunk(
                f"@@ -{m.group(1)},{len(old)} +{m.group(3)},{len(new)} @@",
                start,
                tuple(old),
                tuple(new),
                min(int(m.group(3)), _ULONG_MAX),
                trailing,
            )
        )
    return tuple(hunks), (added, removed), i


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


def _binary(lines: list[str], i: int, index: str | None, where: str) -> tuple[gitbinary.BinaryPatch, int]:
    """`GIT binary patch`: the forward chunk (kept), then the reverse one (decoded to check it, as
    git's parse_binary does, then dropped), each ended by an empty line."""
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
    for reverse in chunks[1:]:  # git reads the reverse chunk too: a damaged one refuses the patch
        gitbinary.decode(reverse, where)
    return chunks[0], i


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


def _mode(text: str, path: str, origin: str) -> int:
    try:
        mode = int(text.strip(), 8)
    except ValueError:
        mode = -1
    if mode < 0 or mode & 0o170000 != 0o100000:
        raise BadInput(
            f"{origin}: {path} gets mode {text.strip()}, not a regular file's (100644, 100755)",
            "patchkeeper manages regular files only; ship a file's content instead",
        )
    return mode & 0o7777


def _side(text: str, where: str) -> str | None:
    """The name of a ---/+++ line, prefix stripped (None for /dev/null); a tab and what follows
    (a timestamp, or git's mark of a name with a space) is not part of it."""
    quoted = _quoted_head(text)
    name = quoted[0] if quoted else text.split("\t", 1)[0]
    return None if name == "/dev/null" else _strip(name, where)


def _strip(name: str, where: str) -> str:
    plain = unquote(name)
    if not plain.startswith(("a/", "b/")):
        raise BadInput(
            f"{where}: path {plain!r} lacks the a/ or b/ prefix of git diff",
            "write diffs relative to site-packages with git diff",
        )
    return plain[2:]


def _quoted_head(text: str) -> tuple[str, str] | None:
    """A quoted name at the start of `text` and what follows it, or None."""
    if not text.startswith('"'):
        return None
    i = 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return text[: i + 1], text[i + 1 :]
        else:
            i += 1
    return None


def _header_names(rest: str) -> tuple[str, str] | None:
    """The two names of `diff --git A B` as written (bare or quoted), as git_header_name finds them:
    a bare pair with spaces is split where both sides name the same path below their prefixes."""
    first = _quoted_head(rest)
    if first is not None:
        tail = first[1][1:] if first[1].startswith(" ") else None
        return (first[0], tail) if tail else None
    at = rest.find(' "')
    if at > 0 and rest.endswith('"') and _quoted_head(rest[at + 1 :]) == (rest[at + 1 :], ""):
        return rest[:at], rest[at + 1 :]
    for at, c in enumerate(rest):
        if c == " ":
            a, b = rest[:at], rest[at + 1 :]
            if "/" in a and "/" in b and a.split("/", 1)[1] == b.split("/", 1)[1]:
                return a, b
    return None


def diffstat(patches: tuple[FilePatch, ...]) -> list[tuple[str, int, int]]:
    """(path, lines added, lines removed) for each file patch."""
    return [(fp.path, fp.added, fp.removed) for fp in patches]


def sections(data: bytes) -> list[bytes]:
    """A git diff cut before each `diff --git` line (the text before the first stays with it);
    joined again they are the diff."""
    starts = [0] + [m.start() + 1 for m in re.finditer(rb"\ndiff --git ", data)]
    return [data[a:b] for a, b in zip(starts, starts[1:] + [len(data)]) if b > a]
