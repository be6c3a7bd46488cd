"""systemd's unit file syntax as systemd 252 reads it (src/shared/conf-parser.c, src/basic/extract-word.c,
src/basic/escape.c, config_parse_exec): lines, continuations, comments, sections, words, escapes and quoting."""

from __future__ import annotations

from dataclasses import dataclass

BOM = "\ufeff"
LONG_LINE_MAX = 1 << 20  # read_line()'s limit: a longer line (or continued line) ends the file's reading
WHITESPACE = " \t\n\r"  # systemd's WHITESPACE: str.strip() would also take \v, \f and Unicode spaces
COMMENTS = "#;"
_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "s": " ",
}
_HEX = "0123456789abcdefABCDEF"


@dataclass(frozen=True)
class Setting:
    """One `Key=value` line of a section, as systemd hands it to the key's parser."""

    section: str
    key: str
    value: str
    line: int  # the physical line the logical line ends on, as systemd numbers it


@dataclass(frozen=True)
class Parsed:
    """A unit file's settings; `fatal` says why systemd refuses to load the file (an invalid section header)."""

    settings: tuple[Setting, ...]
    warnings: tuple[str, ...] = ()
    fatal: str | None = None


def physical_lines(text: str) -> list[str]:
    """The lines as systemd's read_line() cuts them: at \\n, \\r\\n, a lone \\r, or a NUL."""
    out, start, i = [], 0, 0
    while i < len(text):
        c = text[i]
        if c in "\n\r\0":
            out.append(text[start:i])
            i += 2 if c == "\r" and text[i + 1 : i + 2] == "\n" else 1
            start = i
            continue
        i += 1
    if start < len(text):
        out.append(text[start:])
    return out


def _ends_escaped(line: str) -> bool:
    """A line is continued when it ends in an odd run of backslashes (the last one escapes the newline)."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def parse(text: str) -> Parsed:
    """The settings of a unit file: a UTF-8 byte order mark dropped; a line whose first non-blank is # or ;
    skipped, also inside a continuation; a line ending in an unescaped backslash joined to the next with a
    space in its place (a backslash followed by spaces is no continuation); keys and values stripped."""
    settings: list[Setting] = []
    warnings: list[str] = []
    section: str | None = None
    continuation: str | None = None
    bom_seen = False

    def handle(raw: str, number: int) -> str | None:
        nonlocal section
        line = raw.strip(WHITESPACE)
        if not line or line[0] in COMMENTS:
            return None
        if any("\udc80" <= c <= "\udcff" for c in line):  # bytes that are not UTF-8 (decoded surrogateescape)
            return f"line {number}: not valid UTF-8"  # systemd 252 stops reading the file there (EINVAL)
        if line[0] == "[":
            if line[-1] != "]":
                return f"line {number}: invalid section header {line!r}"
            section = line[1:-1]
            return None
        if section is None:
            warnings.append(f"line {number}: assignment outside of a section, ignoring")
            return None
        key, eq, value = line.partition("=")
        if not eq:
            warnings.append(f"line {number}: missing '=', ignoring line")
            return None
        settings.append(Setting(section, key.strip(WHITESPACE), value.strip(WHITESPACE), number))
        return None

    number = 0
    for number, raw in enumerate(physical_lines(text), 1):
        if len(raw) > LONG_LINE_MAX or len(continuation or "") + len(raw) > LONG_LINE_MAX:
            return Parsed(
                tuple(settings), tuple(warnings), f"line {number}: longer than {LONG_LINE_MAX} bytes"
            )
        first = raw.lstrip(WHITESPACE)
        if first and first[0] in COMMENTS:
            continue
        if not bom_seen and raw.startswith(BOM):
            raw, bom_seen = raw[1:], True
        line = raw if continuation is None else continuation + raw
        if _ends_escaped(line):
            continuation = line[:-1] + " "
            continue
        continuation = None
        fatal = handle(line, number)
        if fatal:
            return Parsed(tuple(settings), tuple(warnings), fatal)
    if continuation is not None:
        fatal = handle(continuation, number)
        if fatal:
            return Parsed(tuple(settings), tuple(warnings), fatal)
    return Parsed(tuple(settings), tuple(warnings))


# ---- words ------------------------------------------------------------------------------------------
class BadWord(ValueError):
    """A word systemd cannot extract: unbalanced quotes, or (strictly) an unknown escape."""


def _unescape_one(s: str, i: int) -> tuple[str, int] | None:
    """The character the escape at s[i] (after the backslash) stands for and how many characters it
    takes (escape.c's cunescape_one, NUL refused); None for an unknown escape."""
    c = s[i : i + 1]
    if c in _SIMPLE_ESCAPES and c:
        return _SIMPLE_ESCAPES[c], 1
    digits = {"x": 2, "u": 4, "U": 8}.get(c)
    if digits:
        hexa = s[i + 1 : i + 1 + digits]
        if len(hexa) != digits or any(h not in _HEX for h in hexa):
            return None
        code = int(hexa, 16)
        if code == 0 or (c == "U" and (code > 0x10FFFF or 0xD800 <= code <= 0xDFFF)):
            return None
        return (_byte(code) if c == "x" else chr(code)), digits + 1
    if c and c in "01234567":
        octal = s[i : i + 3]
        if len(octal) != 3 or any(o not in "01234567" for o in octal):
            return None
        code = int(octal, 8)
        if code == 0 or code > 255:
            return None
        return _byte(code), 3
    return None


def _byte(code: int) -> str:
    """A raw byte of \\x or octal: kept as a byte (a surrogate escape above 0x7f) until the word is done."""
    return chr(code) if code < 0x80 else chr(0xDC00 + code)


def _extract(s: str, i: int, relax: bool) -> tuple[str | None, int]:
    """The next whitespace-separated word from s[i:] with quotes removed and C escapes resolved
    (extract_first_word with EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE, and EXTRACT_UNESCAPE_RELAX when
    `relax`: an unknown escape is kept as written); (None, end) when no word is left."""
    n = len(s)
    while i < n and s[i] in WHITESPACE:
        i += 1
    if i >= n:
        return None, n
    out: list[str] = []
    quote = ""
    backslash = False
    while True:
        c = s[i] if i < n else ""
        if backslash:
            if not c:
                if relax and not quote:
                    out.append("\\")
                    break
                raise BadWord("a backslash ends it" if not quote else "unbalanced quoting")
            found = _unescape_one(s, i)
            if found is not None:
                out.append(found[0])
                i += found[1]
            elif relax:
                out += ["\\", c]
                i += 1
            else:
                raise BadWord(f"unknown escape \\{c}")
            backslash = False
        elif quote:
            if not c:
                raise BadWord("unbalanced quoting")
            if c == quote:
                quote = ""
            elif c == "\\":
                backslash = True
            else:
                out.append(c)
            i += 1
        else:
            if not c:
                break
            if c in "'\"":
                quote = c
            elif c == "\\":
                backslash = True
            elif c in WHITESPACE:
                while i < n and s[i] in WHITESPACE:
                    i += 1
                break
            else:
                out.append(c)
            i += 1
    word = "".join(out)
    return word.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape"), i


def extract_word(s: str, i: int, warnings: list[str]) -> tuple[str | None, int]:
    """One word as systemd's extract_first_word_and_warn takes it: strictly, else with unknown escapes
    kept as written (and a warning); BadWord for unbalanced quoting."""
    try:
        return _extract(s, i, relax=False)
    except BadWord:
        word, end = _extract(s, i, relax=True)  # raises BadWord again on unbalanced quoting
        warnings.append(f"ignoring unknown escape sequences: {word!r}")
        return word, end


def next_word_strict(value: str, i: int) -> tuple[str | None, int]:
    """The next word as extract_first_word takes it without relaxing: BadWord on an unknown escape."""
    return _extract(value, i, relax=False)


def words(value: str, strict: bool = False) -> list[str]:
    """Every word of a value (Environment= takes them strictly: BadWord on an unknown escape)."""
    out: list[str] = []
    ignored: list[str] = []
    i = 0
    while True:
        word, i = _extract(value, i, relax=False) if strict else extract_word(value, i, ignored)
        if word is None:
            return out
        out.append(word)


# ---- writing a value ------------------------------------------------------------------------------
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=:,./@")


def quote_word(value: str, expands_dollar: bool) -> str:
    """`value` written so that systemd reads it back as one word, exactly: %-specifiers doubled, $
    doubled where the key expands variables, and double quotes with backslash escapes where needed."""
    text = value.replace("%", "%%")
    if expands_dollar:
        text = text.replace("$", "$$")
    if value and set(value) <= _PLAIN:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def escape_in_quotes(value: str, quote: str, expands_dollar: bool) -> str:
    """`value` written inside a quoted word the template already opened with `quote`."""
    text = value.replace("%", "%%").replace("\\", "\\\\").replace(quote, "\\" + quote)
    return text.replace("$", "$$") if expands_dollar else text
