"""Role-file templates: `{{ name }}` placeholders filled from a target's vars, then a patch set's defaults,
each value written with systemd's quoting for the place it lands in."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from ..errors import BadInput, Refused
from . import unitsyntax

# Only {{ name }}: systemd's own $VAR, ${VAR} and %-specifiers never match, so they pass through untouched.
PLACEHOLDER = re.compile(rb"\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}")


def names(data: bytes) -> list[str]:
    """The variables a template uses, in first-use order."""
    return list(dict.fromkeys(m.group(1).decode() for m in PLACEHOLDER.finditer(data)))


def render(data: bytes, values: dict[str, str], origin: str, hint: str) -> bytes:
    """The template with every placeholder replaced; a placeholder without a value is refused by name."""
    missing = [n for n in names(data) if n not in values]
    if missing:
        listed = ", ".join(f"{{{{ {n} }}}}" for n in missing)
        raise BadInput(f"{origin} uses {listed} but no value is set for {', '.join(missing)}", hint)
    fills = iter(_fills(data, values))
    return PLACEHOLDER.sub(lambda m: next(fills), data)


COMMAND_KEYS = frozenset(
    ("ExecStart", "ExecStartPre", "ExecStartPost", "ExecCondition", "ExecReload", "ExecStop", "ExecStopPost")
)  # systemd.service(5): command lines, where $VAR is expanded
WORD_KEYS = COMMAND_KEYS | {"Environment"}  # values split into words, quotes and escapes taken


def _fills(data: bytes, values: dict[str, str]) -> list[bytes]:
    """What each placeholder becomes, in order. In a `Key=value` line of a file with [Section] headers (a
    systemd unit): inside a command line or Environment= the value is one word with systemd's quoting
    (or escaped inside the quotes the template opened), `%` doubled, and `$` doubled in a command line;
    in another key `%` is doubled. Elsewhere (comments, files of other formats) it is written as is."""
    text = data.decode("utf-8", "surrogateescape")
    out = []
    for m in PLACEHOLDER.finditer(data):
        value = values[m.group(1).decode()]
        start = len(data[: m.start()].decode("utf-8", "surrogateescape"))
        out.append(_fill(text, start, value).encode("utf-8", "surrogateescape"))
    return out


def _continued(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _is_comment(line: str) -> bool:
    stripped = line.lstrip(unitsyntax.WHITESPACE)
    return bool(stripped) and stripped[0] in unitsyntax.COMMENTS


def _fill(text: str, start: int, value: str) -> str:
    line_start = text.rfind("\n", 0, start) + 1
    parts = [text[line_start:start]]  # the logical line up to the placeholder, as systemd joins it
    at = line_start
    while at > 0:
        previous = text.rfind("\n", 0, at - 1) + 1
        before = text[previous : at - 1]
        if _is_comment(before):  # skipped by systemd, also inside a continuation
            at = previous
            continue
        if not _continued(before):
            break
        parts.insert(0, before[:-1] + " ")
        line_start = at = previous
    head = PLACEHOLDER.sub(b"x", "".join(parts).encode("utf-8", "surrogateescape")).decode(
        "utf-8", "surrogateescape"
    )
    stripped = head.lstrip(unitsyntax.WHITESPACE)
    in_unit = re.search(r"(?m)^[ \t]*\[[^\]\n]*\][ \t]*$", text[:line_start]) is not None
    if not in_unit or not stripped or stripped[0] in unitsyntax.COMMENTS or "=" not in stripped:
        return value
    key, _, rest = stripped.partition("=")
    key = key.strip(unitsyntax.WHITESPACE)
    if key not in WORD_KEYS:
        return value.replace("%", "%%")
    quote = _open_quote(rest)
    dollar = key in COMMAND_KEYS
    return (
        unitsyntax.escape_in_quotes(value, quote, dollar) if quote else unitsyntax.quote_word(value, dollar)
    )


def _open_quote(value: str) -> str:
    """The quote character open at the end of `value` ("" for none), as systemd's word splitting sees it."""
    quote, i = "", 0
    while i < len(value):
        c = value[i]
        if c == "\\":
            i += 2
            continue
        if quote and c == quote:
            quote = ""
        elif not quote and c in "'\"":
            quote = c
        i += 1
    return quote


# ---- recording a rendered file back as its template ------------------------------------------
@dataclass(frozen=True)
class _Segment:
    """A stretch of the rendered bytes: literal template text, or one placeholder's value."""

    start: int  # offsets in the rendered bytes
    end: int
    source: bytes  # the template's bytes for it (the literal text, or "{{ name }}")
    name: str | None  # the placeholder's variable; None for literal text


@dataclass(frozen=True)
class Recorded:
    """A role file as a template again: the bytes to keep in the patch set, and the values of
    variables found written out in text the user added (kept as written, so the caller can say so)."""

    data: bytes
    literal: tuple[str, ...] = ()  # variables whose value appears in added text


def _segments(template: bytes, values: dict[str, str]) -> tuple[bytes, list[_Segment]]:
    """The rendering, cut into the template's literal stretches and placeholders."""
    pieces: list[tuple[bytes, bytes, str | None]] = []  # (rendered, template source, variable)
    pos = 0
    for m, filled in zip(PLACEHOLDER.finditer(template), _fills(template, values)):
        name = m.group(1).decode()
        pieces += [(template[pos : m.start()], template[pos : m.start()], None), (filled, m.group(0), name)]
        pos = m.end()
    pieces.append((template[pos:], template[pos:], None))
    segments, at = [], 0
    for rendered, source, name in pieces:
        segments.append(_Segment(at, at + len(rendered), source, name))
        at += len(rendered)
    return b"".join(rendered for rendered, _, _ in pieces), segments


def record(template: bytes, values: dict[str, str], now: bytes, origin: str, hint: str) -> Recorded:
    """The template that renders to `now` with these values: unchanged when `now` is its rendering;
    else with the edits made to its literal text, every placeholder kept. An edit that changes or
    cuts a placeholder's value is refused (it would keep one target's value for every target)."""

    render(template, values, origin, hint)  # a placeholder without a value is refused by name
    rendered, segments = _segments(template, values)
    if rendered == now:
        return Recorded(template)
    out: list[bytes] = []
    literal: set[str] = set()

    def line_of(offset: int) -> int:
        return rendered.count(b"\n", 0, offset) + 1

    def refuse(seg: _Segment) -> Refused:
        value = values[seg.name or ""]
        return Refused(
            f"{origin}: the edit on line {line_of(seg.start)} changes the value of "
            f"{{{{ {seg.name} }}}} ({value!r}), which the template fills in for each target",
            hint,
        )

    def take(tag: str, a1: int, a2: int, added: bytes) -> None:
        """Rendered bytes [a1, a2) become `added` (tag != equal) or stay (equal)."""
        for seg in segments:
            if seg.name is None or seg.start == seg.end:
                # an empty value: its placeholder stays, unless it is inside deleted text
                if seg.name is not None and a1 <= seg.start < a2 and not (tag == "delete" and seg.start > a1):
                    out.append(seg.source)
                elif tag == "equal" and seg.start < a2 and seg.end > a1:
                    out.append(seg.source[max(a1, seg.start) - seg.start : min(a2, seg.end) - seg.start])
                continue
            if seg.end <= a1 or seg.start >= a2:
                continue
            inside = a1 <= seg.start and seg.end <= a2
            if tag == "equal" and inside:
                out.append(seg.source)
            elif not (tag == "delete" and inside):  # a value cut or changed; a deleted one is gone on purpose
                raise refuse(seg)
        if added:
            out.append(added)
            literal.update(
                n
                for n, v in values.items()
                if v
                and re.search(rb"(?<![A-Za-z0-9_])" + re.escape(v.encode()) + rb"(?![A-Za-z0-9_])", added)
            )

    old_lines, new_lines = rendered.splitlines(keepends=True), now.splitlines(keepends=True)
    a_at = [0]
    for line in old_lines:
        a_at.append(a_at[-1] + len(line))
    b_at = [0]
    for line in new_lines:
        b_at.append(b_at[-1] + len(line))
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
        None, old_lines, new_lines, autojunk=False
    ).get_opcodes():
        a1, a2, b1, b2 = a_at[i1], a_at[i2], b_at[j1], b_at[j2]
        if tag != "replace":
            take(tag, a1, a2, b"" if tag == "equal" else now[b1:b2])
            continue
        fine = difflib.SequenceMatcher(None, rendered[a1:a2], now[b1:b2], autojunk=False)
        for sub, k1, k2, l1, l2 in fine.get_opcodes():
            take(sub, a1 + k1, a1 + k2, b"" if sub == "equal" else now[b1 + l1 : b1 + l2])
    out.extend(
        seg.source for seg in segments if seg.name is not None and seg.start == seg.end == len(rendered)
    )
    data = b"".join(out)
    if render(data, values, origin, hint) != now:  # never keep a template that does not give back the file
        raise Refused(f"{origin}: the edited file cannot be written back as its template", hint)
    return Recorded(data, tuple(sorted(literal)))
