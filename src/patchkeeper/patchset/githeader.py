"""git's extended header of one file patch (apply.c: the git header table, git_header_name,
gitdiff_verify_name, has_epoch_timestamp): the names, the kind of change, the modes, and git's
refusals of a header that names its file wrongly. These are what unidiff does not read (it splits
`diff --git A B` at the last ` b/`, keeps quoted names quoted, tells no copy from a rename, guesses
added and deleted files from hunk ranges): gitdiff.py hands each git header to this module."""

from __future__ import annotations

import re

from ..errors import BadInput
from .gitquote import unquote

HEADERS = (
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
REDO = "write the diff again with git diff (--binary for binary files)"
_INDEX_MODE = re.compile(r"\s*[0-7]+\s*")  # an index line's mode, read as git's parse_mode_line reads it
_FROM = ("rename from ", "rename old ", "copy from ")
_TO = ("rename to ", "rename new ", "copy to ")
_STAMP = re.compile(
    r"(1969-12-31|1970-01-01) ([0-2][0-9]):([0-5][0-9]):00(?:\.0+)? ([-+])([0-2][0-9]):?([0-5][0-9])"
)


def read(lines: list[str], at: int, where: str) -> tuple[dict[str, str], int]:
    """The extended header lines after the `diff --git` line at `at` (---/+++ too), and the index of
    the first line after them; BadInput for a header git refuses or would read another way."""
    head: dict[str, str] = {}
    end = at + 1
    while end < len(lines):
        line = lines[end]
        key = next((k for k in HEADERS if line.startswith(k)), None)
        if key is None:
            break
        if key in head and head[key] != line[len(key) :] and key in ("--- ", "+++ ", *_FROM, *_TO):
            raise BadInput(f"{where}: the git header names two files in `{key.strip()}` lines", REDO)
        head[key] = line[len(key) :]
        if key == "index " and " " in head[key] and not _INDEX_MODE.fullmatch(head[key].partition(" ")[2]):
            raise BadInput(f"{where}: invalid mode in `{line[:60]}` (git: invalid mode)", REDO)
        end += 1
    if not head and not (end < len(lines) and lines[end].startswith(("@@ -", "GIT binary patch"))):
        raise BadInput(  # git skips it, but keeps its names for the next header: refused, not guessed
            f"{where}: a `diff --git` line without the header lines git writes after it (`{lines[at][:80]}`)",
            REDO,
        )
    return head, end


def names(rest: str, head: dict[str, str], where: str) -> tuple[str | None, str | None]:
    """The old and new names as git reads them: `diff --git A B` (bare, spaced or quoted), then
    rename/copy from/to, then ---/+++ (which must agree with them); prefixes stripped, /dev/null None."""
    pair = header_names(rest)
    old = new = None
    if pair is not None:
        old, new = strip(pair[0], where), strip(pair[1], where)
    default = old if old == new else None
    for key in _FROM:
        if key in head:
            old = unquote(head[key])
    for key in _TO:
        if key in head:
            new = unquote(head[key])
    for side, keys in (("--- ", _FROM), ("+++ ", _TO)):
        named = next((unquote(head[k]) for k in keys if k in head), None)
        if side not in head:
            continue
        name = side_name(head[side], where)
        if named is None:
            old, new = (name or old, new) if side == "--- " else (old, name or new)
        elif name is not None and name != named:  # git: "inconsistent old/new filename"
            raise BadInput(
                f"{where}: the {side.strip()} name {name!r} is not the {keys[0].strip()} name {named!r}",
                REDO,
            )
    for side, mode in (("--- ", "new file mode "), ("+++ ", "deleted file mode ")):
        if head.get(side, "").split("\t")[0] == "/dev/null" and mode not in head:
            raise BadInput(  # git reads it as the path dev/null then (gitdiff_verify_name)
                f"{where}: `{side}/dev/null` in a git header without `{mode.strip()}`", REDO
            )
    if default is not None:  # git's default name (both sides the same): a new or deleted file's is it
        for side, mode in (("+++ ", "new file mode "), ("--- ", "deleted file mode ")):
            if mode in head and _names(head, side) and side_name(head[side], where) != default:
                raise BadInput(f"{where}: the {side.strip()} name is not the `diff --git` line's", REDO)
    named_old = _names(head, "--- ") or any(k in head for k in _FROM)
    named_new = _names(head, "+++ ") or any(k in head for k in _TO)
    if (named_old or named_new) and (
        (not named_new and "deleted file mode " not in head)
        or (not named_old and "new file mode " not in head)
    ):  # one side named, the other needed: git takes neither from the `diff --git` line then
        raise BadInput(
            f"{where}: the git header names only one side of the file (`---` or `+++` missing)", REDO
        )
    return old, new


def kind(head: dict[str, str]) -> str:
    """add, delete, copy, rename or modify, as git's extended headers say (not from hunk ranges)."""
    copy = "copy from " in head
    rename = not copy and any(k in head for k in ("rename from ", "rename old "))
    added = "new file mode " in head or head.get("--- ") == "/dev/null"
    deleted = "deleted file mode " in head or head.get("+++ ") == "/dev/null"
    return "add" if added else "delete" if deleted else "copy" if copy else "rename" if rename else "modify"


def _names(head: dict[str, str], side: str) -> bool:
    """Does the header's ---/+++ line name a file (not /dev/null)?"""
    return side in head and head[side].split("\t")[0] != "/dev/null"


def epoch(line: str) -> bool:
    """Does a ---/+++ line's timestamp (after its last tab) say 1970-01-01 00:00:00 UTC, the date
    `diff -N` gives a missing file (apply.c: has_epoch_timestamp)?"""
    m = _STAMP.fullmatch(line.rpartition("\t")[2]) if "\t" in line else None
    if m is None:
        return False
    zone = int(m.group(5)) * 60 + int(m.group(6))
    zone = -zone if m.group(4) == "-" else zone
    epoch_hour = 24 if m.group(1) == "1969-12-31" else 0
    return int(m.group(2)) * 60 + int(m.group(3)) - zone == epoch_hour * 60


def mode(text: str, path: str, origin: str) -> int:
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


def side_name(text: str, where: str, traditional: bool = False) -> str | None:
    """The name of a ---/+++ line, prefix stripped (None for /dev/null). In a git header, up to the
    first tab (apply.c: gitdiff_verify_name). In a traditional patch, as git finds it there
    (find_name_traditional): before the timestamp that ends the line, after a tab or after spaces
    (whitespace damage), so a name may hold a tab or a space; without one, up to the first tab."""
    quoted = quoted_head(text)
    if quoted:
        name = quoted[0]
    else:
        stamp = _TIMESTAMP.search(text) if traditional else None
        name = text[: stamp.start()] if stamp else text.split("\t", 1)[0]
    return None if name == "/dev/null" else strip(name, where)


# A timestamp at the end of a ---/+++ line (apply.c: diff_timestamp_len): a date, then an optional time
# (fractional seconds too) and zone, after a tab or after spaces; the name ends where its match starts.
_TIMESTAMP = re.compile(
    r"(?:\t| +)(?:[0-9]{2})?[0-9]{2}-[0-9]{2}-[0-9]{2}"
    r"(?: [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?)?(?: [+-][0-9]{4}| [+-][0-9]{2}:[0-9]{2})?\Z"
)


def strip(name: str, where: str) -> str:
    plain = unquote(name)
    if not plain.startswith(("a/", "b/")):
        raise BadInput(
            f"{where}: path {plain!r} lacks the a/ or b/ prefix of git diff",
            "write diffs relative to site-packages with git diff",
        )
    return plain[2:]


def quoted_head(text: str) -> tuple[str, str] | None:
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


def header_names(rest: str) -> tuple[str, str] | None:
    """The two names of `diff --git A B` as written (bare or quoted), as git_header_name finds them:
    a bare pair with spaces is split where both sides name the same path below their prefixes."""
    first = quoted_head(rest)
    if first is not None:
        tail = first[1][1:] if first[1].startswith(" ") else None
        return (first[0], tail) if tail else None
    at = rest.find(' "')
    if at > 0 and rest.endswith('"') and quoted_head(rest[at + 1 :]) == (rest[at + 1 :], ""):
        return rest[:at], rest[at + 1 :]
    for at, c in enumerate(rest):
        if c == " ":
            a, b = rest[:at], rest[at + 1 :]
            if "/" in a and "/" in b and a.split("/", 1)[1] == b.split("/", 1)[1]:
                return a, b
    return None
