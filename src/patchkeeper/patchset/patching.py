"""Parse git-style unified diffs into frozen values and apply them to bytes, strictly."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import BadInput, HunkFailed

_ENC = ("utf-8", "surrogateescape")
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_CRLF_HEADER = re.compile(r"^(?:diff --git |--- |\+\+\+ |@@ ).*\r$", re.M)


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
    kind: str  # "modify" | "add" | "delete"
    new_mode: int | None
    hunks: tuple[Hunk, ...]


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


def parse(text: str, origin: str) -> tuple[FilePatch, ...]:
    """Parse a unified diff as `git diff` writes it; raise BadInput naming `origin` if it is not one."""
    import unidiff  # lazy: needed only when a diff is parsed

    crlf = _CRLF_HEADER.search(text)
    if crlf:
        raise BadInput(f"{origin}: has CRLF (Windows) line endings, first on line "
                       f"{text.count(chr(10), 0, crlf.start()) + 1}: {crlf.group(0).strip()!r}",
                       "convert it to LF endings (e.g. dos2unix), or write it again with git diff")
    try:
        patch_set = unidiff.PatchSet(_quote_spaced_names(text))
    except unidiff.UnidiffParseError as exc:
        raise BadInput(f"{origin}: not a unified diff: {exc}", "regenerate it with git diff") from None
    if not patch_set and text.strip():
        raise BadInput(f"{origin}: no file changes found in the diff", "regenerate it with git diff")
    patches = []
    for pf in patch_set:
        if pf.is_binary_file:
            raise BadInput(f"{origin}: {pf.path} is a binary patch, which patchkeeper does not apply",
                           "ship the file whole instead")
        if pf.is_rename:
            raise BadInput(f"{origin}: {pf.path} is a rename", "express it as a delete and an add")
        # by the file names and git's headers: unidiff calls an edit of an empty file an add
        headers = [str(i) for i in pf.patch_info or ()]
        kind = ("add" if pf.source_file == "/dev/null" or any(h.startswith("new file mode ") for h in headers)
                else "delete" if pf.target_file == "/dev/null"
                or any(h.startswith("deleted file mode ") for h in headers)
                else "modify")
        path = _strip_prefix(pf.target_file if kind != "delete" else pf.source_file, origin)
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise BadInput(f"{origin}: the file name {shown!r} is not UTF-8, which patchkeeper cannot name "
                           "in its manifests", "rename the file to a UTF-8 name, or ship it another way") from None
        new_mode = None
        for info in headers:
            if info.startswith(("new mode ", "new file mode ")):
                try:
                    mode = int(info.split()[-1], 8)
                except ValueError:
                    mode = -1
                if mode < 0 or mode & 0o170000 != 0o100000:
                    raise BadInput(f"{origin}: {path} gets mode {info.split()[-1]}, not a regular file's (100644, 100755)",
                                   "patchkeeper manages regular files only; ship a file's content instead")
                new_mode = mode & 0o7777
        hunks = []
        for h in pf:
            old: list[str] = []
            new: list[str] = []
            last: list[list[str]] = []
            for line in h:
                if line.line_type == "\\":  # "\ No newline at end of file" ends the line before it
                    for side in last:
                        side[-1] = side[-1].removesuffix("\n")
                    continue
                value = line.value
                if line.line_type == " ":
                    old.append(value)
                    new.append(value)
                    last = [old, new]
                elif line.line_type == "-":
                    old.append(value)
                    last = [old]
                elif line.line_type == "+":
                    new.append(value)
                    last = [new]
            header = f"@@ -{h.source_start},{h.source_length} +{h.target_start},{h.target_length} @@"
            hunks.append(Hunk(header, h.source_start, tuple(old), tuple(new)))
        patches.append(FilePatch(path, kind, new_mode, tuple(hunks)))
    return tuple(patches)


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


def _quoted_head(text: str) -> tuple[str, str] | None:
    """A quoted name at the start of `text` and what follows it, or None."""
    if not text.startswith('"'):
        return None
    i = 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return text[:i + 1], text[i + 1:]
        else:
            i += 1
    return None


def _header_names(rest: str) -> tuple[str, str] | None:
    """The two names of `diff --git A B` (each as written: bare or quoted), where one holds a space."""
    first = _quoted_head(rest)
    if first is not None:
        second = first[1][1:]
        if not first[1].startswith(" ") or (second.startswith('"') and _quoted_head(second) is None):
            return None
        names = first[0], second
    elif len(rest) % 2 == 1 and rest[len(rest) // 2] == " " and rest[:2] == "a/":
        names = rest[:len(rest) // 2], rest[len(rest) // 2 + 1:]  # git's bare form: the same name twice
    else:
        return None
    return names if " " in unquote(names[0]) + unquote(names[1]) else None


def _spaceless(name: str) -> str:
    """A name quoted with its spaces as octal escapes (\\040), which git reads as it reads a space."""
    return quote(unquote(name), True).replace(" ", "\\040")


def _quote_spaced_names(text: str) -> str:
    """git writes a name with a space bare (`diff --git a/N b/N`, a tab after it on the ---/+++
    lines) or, quoted for another character, with the space as it is; unidiff splits such a header at
    the wrong space. The same names with their spaces escaped say the same to every reader."""
    if "diff --git " not in text or " " not in text:
        return text
    lines = text.split("\n")
    names: tuple[str, str] | None = None
    changed = False
    for i, line in enumerate(lines):
        if line.startswith("diff --git "):
            names = _header_names(line[len("diff --git "):])
            if names is not None:
                lines[i] = f"diff --git {_spaceless(names[0])} {_spaceless(names[1])}"
                changed = True
        elif names is not None and line.startswith(("--- ", "+++ ")):
            name = line[4:]
            quoted = _quoted_head(name)
            name = quoted[0] if quoted else name.rstrip("\t")
            if name in names:
                lines[i] = line[:4] + _spaceless(name)
        elif line.startswith("@@"):
            names = None
    return "\n".join(lines) if changed else text


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
        elif body[i + 1:i + 2] in _C_ESCAPES:
            out.append(_C_ESCAPES[body[i + 1]])
            i += 2
        elif body[i + 1:i + 4].isdigit() and len(body[i + 1:i + 4]) == 3:
            out.append(int(body[i + 1:i + 4], 8) & 0xFF)
            i += 4
        else:
            raise BadInput(f"bad escape in the quoted path {name}", "write the diff again with git diff")
    return out.decode("utf-8", "surrogateescape")


def _strip_prefix(name: str, origin: str) -> str:
    name = unquote(name)
    if name.startswith(("a/", "b/")):
        name = name[2:]
    else:
        raise BadInput(f"{origin}: path {name!r} lacks the a/ or b/ prefix of git diff",
                       "write diffs relative to site-packages with git diff")
    return name


def apply(patch: FilePatch, data: bytes | None, origin: str) -> Applied:
    """Apply one file's hunks to its current bytes (None when absent); exact lines, offsets allowed."""
    where = f"{origin}: {patch.path}"
    if patch.kind == "add":
        if data is not None:
            raise HunkFailed(f"{where}: the patch adds this file but it already exists",
                             "roll back first, or check which patch set created it")
        return Applied("".join(l for h in patch.hunks for l in h.new_lines).encode(*_ENC), ())
    if data is None:
        raise HunkFailed(f"{where}: the file does not exist", "check the package version")
    lines = split_lines(data.decode(*_ENC))
    if patch.kind == "delete":
        expected = [l for h in patch.hunks for l in h.old_lines]
        if lines != expected:
            raise HunkFailed(f"{where}: the file to delete differs from the patch's copy",
                             "the file was changed; check it against the patch")
        return Applied(None, ())
    out: list[str] = []
    pos = 0
    offsets = []
    for hunk, want, at in _placements(lines, patch.hunks):
        if at is None:
            raise HunkFailed(f"{where}: hunk {hunk.header} does not apply: {_mismatch(lines, hunk, want)}",
                             "the file differs from what the patch set was written against; "
                             "run `patchkeeper check` or rebuild the patch set")
        offsets.append(_offset(hunk, at))
        out.extend(lines[pos:at])
        out.extend(hunk.new_lines)
        pos = at + len(hunk.old_lines)
    out.extend(lines[pos:])
    return Applied("".join(out).encode(*_ENC), tuple(offsets))


def _placements(lines: list[str], hunks: tuple[Hunk, ...]):
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
            if floor <= at <= limit and tuple(lines[at:at + n]) == old:
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
    lines = split_lines(data.decode(*_ENC))
    if patch.kind == "delete":
        expected = tuple(l for h in patch.hunks for l in h.old_lines)
        ok = tuple(lines) == expected
        return (HunkCheck("deleted file", 0 if ok else None, "" if ok else
                          "the file to delete differs from the patch's copy", expected, tuple(lines), 1),)
    out = []
    for hunk, want, at in _placements(lines, patch.hunks):
        if at is None:
            n = len(hunk.old_lines)
            out.append(HunkCheck(hunk.header, None, _mismatch(lines, hunk, want), hunk.old_lines,
                                 tuple(lines[max(want, 0):max(want, 0) + n]), max(want, 0) + 1))
        else:
            out.append(HunkCheck(hunk.header, _offset(hunk, at)))
    return tuple(out)


def diffstat(text: str) -> list[tuple[str, int, int]]:
    """(path as written, lines added, lines removed) for each file of a diff."""
    import unidiff  # lazy: needed only when a diff is parsed

    out = []
    for pf in unidiff.PatchSet(_quote_spaced_names(text)):
        name = pf.target_file if pf.target_file != "/dev/null" else pf.source_file
        out.append((unquote(name), pf.added, pf.removed))
    return out
