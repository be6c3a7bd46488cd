"""Read a diff into file patches the way `git apply` reads it: unidiff reads the files' headers and
hunks; this module fills unidiff's gaps (each in one function below, named `_gap_...`, each with a
test that shows unidiff alone misreading: tests/test_gitdiff_gaps.py) with git's rules (apply.c:
find_header, the git header table, parse_fragment, parse_binary): git's extended headers (modes,
renames, copies, binary patches), quoted and spaced names, the traditional `---`/`+++` form; mail
text around is skipped. A parse is remembered under the text's digest (parse_cache.py)."""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING

from ..errors import BadInput
from . import gitbinary, gitrules, parse_cache
from .patching import FilePatch, Hunk, unquote

if TYPE_CHECKING:
    from unidiff.patch import PatchedFile

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_BINARY_HEAD = re.compile(r"(literal|delta) (\d+)")
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
        gitrules.check_last_line(lines, origin)
    try:
        files = PatchSet(io.StringIO(_gap_git_names_for_unidiff(lines)))
    except UnidiffParseError as exc:
        stray = str(exc).removeprefix("Unexpected hunk found: ").rstrip("\n")
        if stray != str(exc) and stray in lines:  # a hunk after text that ended its file's patch
            _fragment_without_header(lines, lines.index(stray), origin)
        raise BadInput(f"{origin}: not a unified diff: {exc}", _REDO) from None
    out: list[FilePatch] = []
    headers: set[int] = set()  # the index of each hunk header unidiff read
    for pf in files:
        fp = _file_patch(pf, lines, origin, headers)
        if fp is not None:
            out.append(_checked(fp, origin))
    _gap_stray_fragments(lines, headers, origin)
    if not out and text.strip():
        raise BadInput(f"{origin}: no file changes found in the diff", "regenerate it with git diff")
    return tuple(out)


def _file_patch(pf: PatchedFile, lines: list[str], origin: str, headers: set[int]) -> FilePatch | None:
    """One file's patch as unidiff read it, its gaps filled; None for what git takes as mail text."""
    info = [line.rstrip("\n") for line in pf.patch_info or ()]
    git = bool(info) and info[0].startswith("diff --git ")
    at = (pf.diff_line_no or 1) - 1  # the `diff --git` line, or a traditional patch's `+++` line
    if not git:
        if not len(pf):
            return None  # `---` and `+++` lines without a hunk: git takes them as mail text
        at -= 1
        _refuse_crlf(lines[at], at, origin)
        old, new = _side(lines[at][4:], f"{origin}:{at + 1}"), _side(lines[at + 1][4:], f"{origin}:{at + 1}")
        if old is not None and gitrules.epoch(lines[at]):  # diff -N dates the missing side at the epoch
            old = None
        elif new is not None and gitrules.epoch(lines[at + 1]):
            new = None
        kind = "add" if old is None else "delete" if new is None else "modify"
        path = new if new is not None else old
        if path is None:
            raise BadInput(f"{origin}:{at + 1}: both sides are /dev/null", _REDO)
        read, counted = _hunks(pf, lines, f"{origin}:{at + 1}", origin, headers)
        return FilePatch(path, kind, None, read, None, None, *counted)
    _refuse_crlf(lines[at], at, origin)
    where = f"{origin}:{at + 1}"
    head: dict[str, str] = {}
    end = at + 1
    while end < len(lines):  # the extended headers, ---/+++ too (unidiff keeps these apart)
        key = next((k for k in _HEADERS if lines[end].startswith(k)), None)
        if key is None:
            break
        gitrules.repeated(head, key, lines[end][len(key) :], where)
        head[key] = lines[end][len(key) :]
        end += 1
    names = _header_names(lines[at][len("diff --git ") :])
    default = _strip(names[0], where) if names is not None and names[0][1:] == names[1][1:] else None
    sides: dict[str, str | None] = {k: _side(head[k], where) for k in ("--- ", "+++ ") if k in head}
    gitrules.check_header(head, default, sides, lines[end] if end < len(lines) else "", where)
    old, new = _gap_names(lines[at][len("diff --git ") :], head, where)
    if old is None and new is None:
        raise BadInput(f"{where}: the git header names no file (`{lines[at][:80]}`)", _REDO)
    kind = _gap_kind(head)
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
    if end < len(lines) and lines[end] == "GIT binary patch":
        binary = _gap_binary(lines, end + 1, head.get("index "), where)
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
    gitrules.check_changes(head, kind, not hunks and binary is None, path, where)
    return FilePatch(path, kind, new_mode, hunks, source, binary, *counts)


def _gap_text_before_hunks(lines: list[str], end: int, origin: str) -> None:
    """GAP: unidiff keeps text between a file's header and its first hunk as header lines. git ends
    the file's patch there (no hunk, a file patch of garbage): the hunk after is a fragment without
    header."""
    following = next(i for i in range(end, len(lines)) if lines[i].startswith("@@ -"))
    _fragment_without_header(lines, following, origin)


def _gap_git_names_for_unidiff(lines: list[str]) -> str:
    """GAP: unidiff splits `diff --git A B` at the last ` b/` (or, without prefixes, the last space)
    and then refuses a `+++` name other than the B it found ("Target without source"): `diff --git
    b/x y b/x y` (git diff --no-index) or a name holding ` b/` stop it. The text it reads has each git
    header's names replaced by a placeholder (same lines, same numbers); _gap_names reads git's."""
    out = lines.copy()
    for i in [i for i, line in enumerate(lines) if line.startswith("diff --git ")]:
        out[i] = "diff --git a/f b/f"
        j = i + 1
        while j < len(lines) and lines[j].startswith(_HEADERS):
            j += 1
        gone = any(line.startswith("deleted file mode ") for line in lines[i + 1 : j])
        for k in range(i + 1, j):
            if lines[k].startswith("--- "):
                out[k] = "--- a/f"
            elif lines[k].startswith("+++ "):
                out[k] = "+++ /dev/null" if gone else "+++ b/f"  # unidiff's target after `deleted file`
    return "\n".join(out) + "\n"


def _gap_names(rest: str, head: dict[str, str], where: str) -> tuple[str | None, str | None]:
    """GAP: unidiff splits `diff --git a/x b/y` at the last ` b/` (a name holding ` b/` is cut wrong),
    keeps C-quoted names quoted, and reads no `rename from`/`copy from` names. The names as git's
    git_header_name and the header table give them, prefixes stripped, /dev/null as None."""
    names = _header_names(rest)
    old = new = None
    if names is not None:
        old, new = _strip(names[0], where), _strip(names[1], where)
    for key in ("rename from ", "rename old ", "copy from "):
        if key in head:
            old = unquote(head[key])
    for key in ("rename to ", "rename new ", "copy to "):
        if key in head:
            new = unquote(head[key])
    if "--- " in head and not ("rename from " in head or "rename old " in head or "copy from " in head):
        old = _side(head["--- "], where) or old
    if "+++ " in head and not ("rename to " in head or "rename new " in head or "copy to " in head):
        new = _side(head["+++ "], where) or new
    return old, new


def _gap_kind(head: dict[str, str]) -> str:
    """GAP: unidiff guesses added and deleted files from hunk ranges (`@@ -0,0` is an addition to it, a
    file emptied to one line is not) and tells no copy from a rename. git's extended headers say."""
    copy = "copy from " in head
    rename = not copy and any(k in head for k in ("rename from ", "rename old "))
    added = "new file mode " in head or head.get("--- ") == "/dev/null"
    deleted = "deleted file mode " in head or head.get("+++ ") == "/dev/null"
    return "add" if added else "delete" if deleted else "copy" if copy else "rename" if rename else "modify"


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
        old: list[str] = []
        new: list[str] = []
        previous = "@"
        trailing = 0  # context lines after the last change, as parse_fragment counts them
        for line in uh:
            kind = line.line_type
            trailing = trailing + 1 if kind == " " else 0 if kind in ("+", "-") else trailing
            value = line.value if line.value.endswith("\n") else line.value + "\n"
            if kind == "+":
                new.append(value)
            elif kind == "-":
                old.append(value)
            elif kind == " ":
                old.append(value)
                new.append(value)
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
        hunks.append(
            Hunk(
                f"@@ -{uh.source_start},{len(old)} +{uh.target_start},{len(new)} @@",
                min(uh.source_start, gitrules.ULONG_MAX),
                tuple(old),
                tuple(new),
                min(uh.target_start, gitrules.ULONG_MAX),
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


def _gap_binary(lines: list[str], i: int, index: str | None, where: str) -> gitbinary.BinaryPatch:
    """GAP: unidiff marks a binary file but keeps no payload. `GIT binary patch`: the forward chunk
    (kept, decoded when applied), then the reverse one (decoded to check it, then dropped), each ended
    by an empty line."""
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
    for reverse in chunks[1:]:  # git reads the reverse chunk too (parse_binary): a damaged one refuses
        gitbinary.decode(reverse, where)
    return chunks[0]


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
