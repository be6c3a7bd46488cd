"""git's quoted names (patchset/gitquote.py) read as git reads them: every escape git writes decodes to
git's bytes, every malformed one is a BadInput (exit 2 on the command line), never a ValueError."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from patchkeeper.errors import BadInput
from patchkeeper.patchset.gitquote import quote, unquote

# The pieces of a quoted name's body: plain characters (ASCII, non-ASCII, a Unicode digit that
# str.isdigit takes), every C escape git writes, octal bytes (no NUL, '.' or '/', which would change the
# path's shape rather than test the escape), and the malformed escapes: a digit 8 or 9, a first digit
# over 3, a letter git does not know, a Unicode digit, too few digits (the body ends there).
_PLAIN = st.sampled_from(list("abcXYZ019 -_") + ["é", "ß", "漢", "٠", "١"])
_C = st.sampled_from(["\\a", "\\b", "\\t", "\\n", "\\v", "\\f", "\\r", '\\"', "\\\\"])
_OCT = st.integers(1, 0o377).filter(lambda b: b not in (0o56, 0o57)).map(lambda b: f"\\{b:03o}")
_BAD = st.sampled_from(
    [
        "\\089",
        "\\008",
        "\\9",
        "\\400",
        "\\777",
        "\\x41",
        "\\e",
        "\\?",
        "\\0٠1",
        "\\٠١٢",
        "\\0",
        "\\01",
        "\\3",
        "\\37",
    ]
)
_BODY = st.lists(st.one_of(_PLAIN, _C, _OCT), max_size=8)


@st.composite
def quoted_names(draw: st.DrawFn) -> str:
    """A quoted name as a diff would hold it: a good body, then maybe a bad escape and what follows it
    (nothing: the escape is cut short by the closing quote)."""
    body = "".join(draw(_BODY))
    if draw(st.booleans()):
        body += draw(_BAD) + draw(st.sampled_from(["", "y", "/z.py", "\\n"]))
    return f'"a/sglang/x{body}"'


def _git_reads(name: str, tmp: Path) -> bytes | None:
    """The path `git apply --numstat` reads from a diff naming `name` (quoted), None when git refuses it."""
    new = '"b/' + name[3:]
    patch = f"diff --git {name} {new}\nnew file mode 100644\n--- /dev/null\n+++ {new}\n@@ -0,0 +1 @@\n+x\n"
    (tmp / "p.patch").write_text(patch, encoding="utf-8", errors="surrogateescape")
    proc = subprocess.run(["git", "apply", "--numstat", "-z", "p.patch"], cwd=tmp, capture_output=True)
    if proc.returncode:
        return None
    fields = proc.stdout.split(b"\t", 2)
    return b"a/" + fields[2].rstrip(b"\0")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=quoted_names())
def test_unquote_reads_what_git_reads(name):
    """On generated names (every escape form, truncated and malformed escapes, non-ASCII bytes) unquote
    agrees with git itself: the same bytes, or a BadInput where git cannot unquote the name. There git
    (apply.c find_name) reads the name bare, quotes and backslashes included: a path with a backslash,
    which patchkeeper refuses in any patch (names.path_problem)."""
    with tempfile.TemporaryDirectory() as tmp:
        git = _git_reads(name, Path(tmp))
    try:
        ours: bytes | None = unquote(name).encode("utf-8", "surrogateescape")
    except BadInput as exc:  # any other exception fails the test
        assert "hint" not in exc.message and "\n" not in exc.message
        assert exc.hint
        ours = None
    if ours is None:
        assert git is None or (b"\\" in git and git.endswith(b'"')), (name, git)
    else:
        assert ours == git, (name, ours, git)


@given(raw=st.binary(min_size=1, max_size=24))
def test_quote_then_unquote_gives_the_bytes_back(raw):
    name = raw.decode("utf-8", "surrogateescape")
    assert unquote(quote(name, always=True)).encode("utf-8", "surrogateescape") == raw


@pytest.mark.parametrize("escape", ["\\089", "\\400", "\\٠١٢", "\\0"])
def test_a_bad_escape_is_refused_by_check_apply_and_import(env, escape):
    """The reviewer's case: `"a/sglang/\\089x"` crashed check, apply and import with a ValueError."""
    name = f"sglang/{escape}x"
    patch = (
        f'diff --git "a/{name}" "b/{name}"\nnew file mode 100644\n--- /dev/null\n+++ "b/{name}"\n'
        "@@ -0,0 +1 @@\n+x\n"
    )
    d = env.root / "patchsets" / "atk"
    d.mkdir()
    (d / "patchset.toml").write_text('name = "atk"\nversion = "1.0.0"\npackage = "sglang"\n')
    (d / "0001.patch").write_text(patch)
    (env.root / "in.patch").write_text(patch)
    before = env.snapshot()
    for args in (("check", "atk"), ("apply", "atk"), ("import", "imp", str(env.root / "in.patch"))):
        proc = env.pk(*args, check=2)
        assert proc.stderr.startswith("patchkeeper: error:") and "bad escape" in proc.stderr, proc.stderr
        assert len(proc.stderr.splitlines()) == 2 and "hint:" in proc.stderr  # one line, and its hint
    assert env.snapshot() == before
    assert not (env.root / "patchsets" / "imp").exists()
