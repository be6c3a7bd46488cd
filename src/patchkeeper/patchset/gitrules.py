"""git apply's rules for what a diff's headers may say, beyond reading them (apply.c:
parse_git_diff_header, gitdiff_verify_name, parse_chunk, has_epoch_timestamp): where git refuses a
header or reads it otherwise than its lines suggest, patchkeeper refuses or reads it the same way."""

from __future__ import annotations

import re

from ..errors import BadInput
from .patching import unquote

ULONG_MAX = (1 << 64) - 1  # git's strtoul saturates a line number there
FROM = ("rename from ", "rename old ", "copy from ")
TO = ("rename to ", "rename new ", "copy to ")
_REDO = "write the diff again with git diff (--binary for binary files)"
_HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_STAMP = re.compile(
    r"(1969-12-31|1970-01-01) ([0-2][0-9]):([0-5][0-9]):00(?:\.0+)? ([-+])([0-2][0-9]):?([0-5][0-9])"
)


def epoch(line: str) -> bool:
    """Does a ---/+++ line's timestamp (after its last tab) say 1970-01-01 00:00:00 UTC, the date
    `diff -N` gives a missing file (has_epoch_timestamp)? git then takes the patch as an addition or
    a deletion."""
    m = _STAMP.fullmatch(line.rpartition("\t")[2]) if "\t" in line else None
    if m is None:
        return False
    zone = int(m.group(5)) * 60 + int(m.group(6))
    zone = -zone if m.group(4) == "-" else zone
    epoch_hour = 24 if m.group(1) == "1969-12-31" else 0
    return int(m.group(2)) * 60 + int(m.group(3)) - zone == epoch_hour * 60


def repeated(head: dict[str, str], key: str, value: str, where: str) -> None:
    """A name header repeated with another name: git's "inconsistent old/new filename"."""
    if key in head and head[key] != value and key in ("--- ", "+++ ", *FROM, *TO):
        raise BadInput(f"{where}: the git header names two files in `{key.strip()}` lines", _REDO)


def check_header(
    head: dict[str, str], default: str | None, side_name: dict[str, str | None], following: str, where: str
) -> None:
    """The rules of a git header (its extended lines `head`, the `diff --git` line's name when both
    its sides agree, each ---/+++ line's name as read, the line after the header)."""
    if not head and not following.startswith(("@@ -", "GIT binary patch")):
        raise BadInput(  # git skips it but keeps its names for the next header: refused, not guessed
            f"{where}: a `diff --git` line without the header lines git writes after it", _REDO
        )
    for side, mode in (("--- ", "new file mode "), ("+++ ", "deleted file mode ")):
        if side in head and side_name[side] is None and mode not in head:
            raise BadInput(  # git reads it as the path dev/null then (gitdiff_verify_name)
                f"{where}: `{side}/dev/null` in a git header without `{mode.strip()}`", _REDO
            )
    if default is not None:  # git's default name: a new or deleted file's ---/+++ name must be it
        for side, mode in (("+++ ", "new file mode "), ("--- ", "deleted file mode ")):
            if mode in head and side_name.get(side) not in (None, default):
                raise BadInput(f"{where}: the {side.strip()} name is not the `diff --git` line's", _REDO)
    for side, keys in (("--- ", FROM), ("+++ ", TO)):
        named = next((unquote(head[k]) for k in keys if k in head), None)
        name = side_name.get(side)
        if named is not None and name is not None and name != named:  # "inconsistent filename"
            raise BadInput(
                f"{where}: the {side.strip()} name {name!r} is not the {keys[0].strip()} one", _REDO
            )
    named_old = side_name.get("--- ") is not None or any(k in head for k in FROM)
    named_new = side_name.get("+++ ") is not None or any(k in head for k in TO)
    if (named_old or named_new) and (
        (not named_new and "deleted file mode " not in head)
        or (not named_old and "new file mode " not in head)
    ):  # one side named, the other needed: git takes neither from the `diff --git` line then
        raise BadInput(
            f"{where}: the git header names only one side of the file (`---` or `+++` missing)", _REDO
        )


def check_changes(head: dict[str, str], kind: str, empty: bool, path: str, where: str) -> None:
    """A git header with no hunk, no binary patch and nothing else changed: "patch with only garbage"."""
    if empty and kind == "modify" and head.get("old mode ") == head.get("new mode "):
        raise BadInput(f"{where}: the diff of {path} changes nothing (no hunk, no mode change)", _REDO)


def check_last_line(lines: list[str], origin: str) -> None:
    """The text's last line when it has no newline: git reads no hunk line without one, so a hunk
    whose counts reach that line refuses the diff (parse_fragment)."""
    i = len(lines) - 1
    while i >= 0 and lines[i][:1] in ("+", "-", " ", "\\") and not lines[i].startswith(("--- ", "+++ ")):
        i -= 1  # back over what may be a hunk's lines to its header
    m = _HUNK.match(lines[i]) if i >= 0 else None
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
