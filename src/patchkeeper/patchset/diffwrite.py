"""Write one file's change as git writes it (`diff --git`, modes, index, hunks, no-newline marks)."""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass

from .. import names
from ..errors import BadInput
from .gitquote import quote, split_lines

_ENC = ("utf-8", "surrogateescape")
_NO_NEWLINE = "\\ No newline at end of file\n"
_ZERO = "0000000"
BINARY_PROBE = 8000  # git calls a file binary when a NUL byte appears in its first 8000 bytes


@dataclass(frozen=True)
class Change:
    """One path's before and after; bytes None when absent, modes as permission bits (0o644)."""

    path: str
    old: bytes | None
    new: bytes | None
    old_mode: int | None = None
    new_mode: int | None = None


def is_binary(data: bytes | None) -> bool:
    return data is not None and b"\0" in data[:BINARY_PROBE]


def refuse_unrecordable(changes: list[Change], origin: str) -> None:
    """Refuse what a patch set cannot hold, before it is written: a binary file (record writes text
    diffs), a name with a control character (a patch set that names one is refused when loaded)."""
    binary = [c.path for c in changes if is_binary(c.old) or is_binary(c.new)]
    if binary:
        raise BadInput(
            f"{origin}: binary file(s) cannot be recorded as a patch: " + ", ".join(map(repr, binary)),
            "revert them, or ship such files another way",
        )
    named = [c.path for c in changes if names.control_problem(c.path)]
    if named:
        raise BadInput(
            f"{origin}: file(s) whose name holds a control character cannot be recorded: "
            + ", ".join(map(repr, named)),
            "rename them (no package's file name holds a tab or an escape), or revert them",
        )


def blob_id(data: bytes) -> str:
    """git's object name of a blob, abbreviated the way `git diff` prints it."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()[:7]


def _git_mode(mode: int) -> str:
    return f"{0o100000 | (mode & 0o7777):o}"


def _lines(data: bytes | None) -> list[str]:
    return split_lines(data.decode(*_ENC)) if data else []


def _range(start: int, stop: int) -> str:
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if length == 0 else start + 1},{length}"


def opcodes(a: list[str], b: list[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib opcodes over the whole files, matching only the region between common ends."""
    pre = 0
    limit = min(len(a), len(b))
    while pre < limit and a[pre] == b[pre]:
        pre += 1
    suf = 0
    while suf < limit - pre and a[len(a) - 1 - suf] == b[len(b) - 1 - suf]:
        suf += 1
    mid_a, mid_b = a[pre : len(a) - suf], b[pre : len(b) - suf]
    ops: list[tuple[str, int, int, int, int]] = []
    if pre:
        ops.append(("equal", 0, pre, 0, pre))
    if mid_a or mid_b:
        matcher = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            ops.append((tag, i1 + pre, i2 + pre, j1 + pre, j2 + pre))
    if suf:
        ops.append(("equal", len(a) - suf, len(a), len(b) - suf, len(b)))
    return ops


def _groups(
    ops: list[tuple[str, int, int, int, int]], context: int
) -> list[list[tuple[str, int, int, int, int]]]:
    """difflib's get_grouped_opcodes over precomputed opcodes: hunks with `context` lines around."""
    if not ops or all(op[0] == "equal" for op in ops):
        return []
    ops = list(ops)
    tag, i1, i2, j1, j2 = ops[0]
    if tag == "equal":
        ops[0] = tag, max(i1, i2 - context), i2, max(j1, j2 - context), j2
    tag, i1, i2, j1, j2 = ops[-1]
    if tag == "equal":
        ops[-1] = tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)
    groups, group = [], []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal" and i2 - i1 > 2 * context:
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            groups.append(group)
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        groups.append(group)
    return groups


def _emit(out: list[str], mark: str, line: str) -> None:
    if line.endswith("\n"):
        out.append(mark + line)
    else:
        out.append(mark + line + "\n" + _NO_NEWLINE)


def hunks(old: bytes | None, new: bytes | None, context: int = 3) -> str:
    a, b = _lines(old), _lines(new)
    out: list[str] = []
    for group in _groups(opcodes(a, b), context):
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for line in a[i1:i2]:
                    _emit(out, " ", line)
                continue
            for line in a[i1:i2]:
                _emit(out, "-", line)
            for line in b[j1:j2]:
                _emit(out, "+", line)
    return "".join(out)


def file_diff(change: Change, context: int = 3) -> bytes:
    """The `diff --git` section for one path; b"" when nothing differs."""
    c = change
    if c.old == c.new and (c.old is None or c.old_mode == c.new_mode):
        return b""
    a, b = quote("a/" + c.path), quote("b/" + c.path)  # as git writes them
    tab = "\t" if " " in c.path else ""  # git ends a name with a space with a tab on the ---/+++ lines
    head = [f"diff --git {a} {b}\n"]
    if c.old is None and c.new is not None:
        head.append(f"new file mode {_git_mode(c.new_mode or 0o644)}\n")
        head.append(f"index {_ZERO}..{blob_id(c.new)}\n")
    elif c.new is None and c.old is not None:
        head.append(f"deleted file mode {_git_mode(c.old_mode or 0o644)}\n")
        head.append(f"index {blob_id(c.old)}..{_ZERO}\n")
    elif c.old is not None and c.new is not None:  # (both absent: returned above)
        mode_changed = False
        if c.old_mode is not None and c.new_mode is not None and c.old_mode != c.new_mode:
            mode_changed = True
            head.append(f"old mode {_git_mode(c.old_mode)}\nnew mode {_git_mode(c.new_mode)}\n")
        if c.old != c.new:
            suffix = "" if mode_changed else f" {_git_mode(c.old_mode or 0o644)}"
            head.append(f"index {blob_id(c.old)}..{blob_id(c.new)}{suffix}\n")
    body = hunks(c.old, c.new, context) if c.old != c.new else ""
    if body:
        head.append(f"--- {'/dev/null' if c.old is None else a + tab}\n")
        head.append(f"+++ {'/dev/null' if c.new is None else b + tab}\n")
    return ("".join(head) + body).encode(*_ENC)


def diff(changes: list[Change], context: int = 3) -> bytes:
    """Every change, in path order, as one git-format patch."""
    return b"".join(file_diff(c, context) for c in sorted(changes, key=lambda c: c.path))
