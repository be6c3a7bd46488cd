"""printable.py: what is printed of recorded data is one line of UTF-8 a terminal shows as it is, and two
names that differ print apart: a control character and a byte of a file name that is not UTF-8 (held
as a surrogate escape) are each printed as their escape."""

from __future__ import annotations

import os
import random
import subprocess
import sys

from patchkeeper.printable import lines, one_line


def _names(count: int) -> list[bytes]:
    """A generated corpus of file names: every byte above 0x7f alone, then random names of bytes with
    UTF-8 runs among them. No backslash: one is printed as it is (escaping it would double every
    backslash a message quotes), so a name holding the four characters `\\xff` prints as one holding
    the byte; such a name is no file of a real package's."""
    rng = random.Random(40)
    alphabet = [b for b in range(1, 256) if b not in (0x2F, 0x5C)]  # no "/" in a name, no backslash
    names = [b"x" + bytes([b]) + b".py" for b in range(0x80, 0x100)]
    for _ in range(count):
        parts = [
            bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 4))
        ]
        parts.insert(rng.randint(0, len(parts)), rng.choice(["é", "λ", "数", "🙂"]).encode())
        names.append(b"".join(parts))
    return list(dict.fromkeys(names))


def test_names_that_differ_print_apart_as_utf8_without_control_characters():
    corpus = _names(3000)
    for show in (one_line, lines):
        shown = {}
        for raw in corpus:
            text = show(os.fsdecode(raw))
            data = text.encode("utf-8")  # strict: no lone surrogate reaches the terminal
            assert not any(c < 0x20 and c != 0x0A for c in data) and b"\x7f" not in data, (raw, text)
            assert "\ufffd" not in text, (raw, text)
            assert text not in shown, (raw, shown.get(text), text)  # two names, two texts
            shown[text] = raw
    for b in range(0x80, 0x100):
        assert one_line(os.fsdecode(b"x" + bytes([b]) + b".py")) == f"x\\x{b:02x}.py"  # the byte itself


def test_utf8_text_is_printed_as_it_is():
    for text in ("sglang/srt/数据.py", "ddtree@3.1.0", "café", "🙂 ok"):
        assert one_line(text) == text and lines(text + "\n" + text) == text + "\n" + text


def test_audit_prints_two_names_differing_in_a_byte_that_is_not_utf8_apart(baselined):
    """The real CLI on a real venv: two files added by hand, their names `bad` + one byte that is not
    UTF-8 (0xfe, 0xff): both findings print, escaped, and the output is UTF-8 a terminal shows as is."""
    srt = os.fsencode(baselined.site / "sglang" / "srt")
    for b in (b"\xfe", b"\xff"):
        with open(srt + b"/bad" + b + b".py", "wb") as f:
            f.write(b"x = 1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "patchkeeper", "--workspace", str(baselined.root), "audit"],
        capture_output=True,
    )
    assert proc.returncode == 1, proc.stderr  # drift
    out = proc.stdout.decode("utf-8")  # strict
    assert "sglang/srt/bad\\xfe.py" in out and "sglang/srt/bad\\xff.py" in out, out
    assert "\ufffd" not in out, out
