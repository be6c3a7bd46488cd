"""unidiff reads our diffs; each of its gaps that patchset/gitdiff.py fills is shown here: unidiff
alone misreads the input (or raises), ours reads it as git apply does (git itself asked where it
applies)."""

from __future__ import annotations

import base64
import hashlib
import io
import subprocess
import zlib
from pathlib import Path

import pytest
from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from patchkeeper.errors import BadInput
from patchkeeper.patchset import gitdiff, patching


def _unidiff(text: str) -> PatchSet:
    return PatchSet(io.StringIO(text))


def _git_apply(tmp_path: Path, files: dict[str, bytes], diff: str) -> dict[str, bytes] | None:
    """The files after `git apply` of the diff in a fresh directory, None when git refuses it."""
    work = tmp_path / "git"
    work.mkdir()
    for rel, data in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(data)
    (tmp_path / "d.patch").write_text(diff)
    if subprocess.run(["git", "apply", str(tmp_path / "d.patch")], cwd=work, capture_output=True).returncode:
        return None
    return {p.relative_to(work).as_posix(): p.read_bytes() for p in work.rglob("*") if p.is_file()}


NO_INDEX_SPACED = """diff --git b/pkg/new thing.py b/pkg/new thing.py
new file mode 100644
index 0000000..7d4290a
--- /dev/null
+++ b/pkg/new thing.py\t
@@ -0,0 +1 @@
+x = 1
"""


def test_gap_names_split_of_a_spaced_no_index_header(tmp_path):
    with pytest.raises(UnidiffParseError, match="Target without source"):
        _unidiff(NO_INDEX_SPACED)
    (fp,) = gitdiff.parse(NO_INDEX_SPACED, "d.patch")
    assert (fp.path, fp.kind) == ("pkg/new thing.py", "add")
    assert _git_apply(tmp_path, {}, NO_INDEX_SPACED) == {"pkg/new thing.py": b"x = 1\n"}


QUOTED = """diff --git "a/pkg/caf\\303\\251.py" "b/pkg/caf\\303\\251.py"
index 1111111..2222222 100644
--- "a/pkg/caf\\303\\251.py"
+++ "b/pkg/caf\\303\\251.py"
@@ -1 +1 @@
-a
+b
"""


def test_gap_names_c_quoted(tmp_path):
    assert _unidiff(QUOTED)[0].path == '"pkg/caf\\303\\251.py"'  # kept quoted and escaped
    (fp,) = gitdiff.parse(QUOTED, "d.patch")
    assert fp.path == "pkg/caf\u00e9.py"
    assert _git_apply(tmp_path, {fp.path: b"a\n"}, QUOTED) == {fp.path: b"b\n"}


COPY = """diff --git a/pkg/a.py b/pkg/b.py
similarity index 90%
copy from pkg/a.py
copy to pkg/b.py
--- a/pkg/a.py
+++ b/pkg/b.py
@@ -1,2 +1,2 @@
 keep
-a
+b
"""


def test_gap_kind_copy_is_no_rename(tmp_path):
    assert _unidiff(COPY)[0].is_rename  # unidiff has no copies: the source would be lost
    (fp,) = gitdiff.parse(COPY, "d.patch")
    assert (fp.kind, fp.source, fp.path) == ("copy", "pkg/a.py", "pkg/b.py")
    got = _git_apply(tmp_path, {"pkg/a.py": b"keep\na\n"}, COPY)
    assert got == {"pkg/a.py": b"keep\na\n", "pkg/b.py": b"keep\nb\n"}  # the source stays


EMPTY_FILE_FILLED = """diff --git a/pkg/empty.py b/pkg/empty.py
index e69de29..7d4290a 100644
--- a/pkg/empty.py
+++ b/pkg/empty.py
@@ -0,0 +1 @@
+x = 1
"""


def test_gap_kind_added_from_headers_not_hunk_ranges(tmp_path):
    assert _unidiff(EMPTY_FILE_FILLED)[0].is_added_file  # guessed from @@ -0,0: the file exists
    (fp,) = gitdiff.parse(EMPTY_FILE_FILLED, "d.patch")
    assert fp.kind == "modify"
    assert _git_apply(tmp_path, {"pkg/empty.py": b""}, EMPTY_FILE_FILLED) == {"pkg/empty.py": b"x = 1\n"}


def _literal_diff(data: bytes) -> str:
    packed = zlib.compress(data)
    lines = []
    for at in range(0, len(packed), 52):
        chunk = packed[at : at + 52]
        n = len(chunk)
        lines.append((chr(64 + n) if n <= 26 else chr(70 + n)) + base64.b85encode(chunk, pad=True).decode())
    new_id = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return (
        "diff --git a/pkg/x.bin b/pkg/x.bin\nnew file mode 100644\n"
        f"index {'0' * 40}..{new_id}\nGIT binary patch\nliteral {len(data)}\n"
        + "\n".join(lines)
        + "\n\nliteral 0\nHcmV?d00001\n\n"
    )


def test_gap_binary_payload(tmp_path):
    data = bytes(range(256)) * 4
    diff = _literal_diff(data)
    (pf,) = _unidiff(diff)
    assert pf.is_binary_file and len(pf) == 0  # flagged, the bytes nowhere
    (fp,) = gitdiff.parse(diff, "d.patch")
    assert patching.apply(fp, None, "d.patch").data == data
    assert _git_apply(tmp_path, {}, diff) == {"pkg/x.bin": data}


TWO_HUNKS = """diff --git a/f b/f
--- a/f
+++ b/f
@@ -1,3 +1,3 @@
 1
-2
+two
 3
@@ -7,3 +7,3 @@
 7
-8
+eight
 9
"""
BASE = "".join(f"{n}\n" for n in range(1, 12)).encode()


@pytest.mark.parametrize(
    "damaged, unidiff_hunks",
    [
        (TWO_HUNKS.replace("@@ -7", "\n@@ -7"), 2),  # an empty line between the hunks: taken as one more
        (TWO_HUNKS.replace("@@ -7,3 +7,3 @@", "@@ -7,3 +7,3 @"), 1),  # a malformed header: skipped as text
        (
            TWO_HUNKS.replace("+++ b/f\n", "+++ b/f\na note\n"),
            2,
        ),  # text before the first hunk: kept as header
    ],
)
def test_gap_hunks_git_refuses(tmp_path, damaged, unidiff_hunks):
    assert len(_unidiff(damaged)[0]) == unidiff_hunks  # read without a word
    assert _git_apply(tmp_path, {"f": BASE}, damaged) is None  # git refuses the whole diff
    with pytest.raises(BadInput, match="patch fragment without header|bad hunk header"):
        gitdiff.parse(damaged, "d.patch")


def test_gap_no_newline_mark_in_another_language(tmp_path):
    diff = TWO_HUNKS.replace("-8\n+eight\n 9\n", "-8\n+eight\n 9\n\\ Kein Zeilenumbruch am Dateiende.\n")
    base = BASE.replace(b"9\n10\n11\n", b"9")  # the file ends at 9, without a newline
    hunk = _unidiff(diff)[0][-1]
    assert [line.line_type for line in hunk][-1] == " "  # the mark read as mail text: the newline stays
    (fp,) = gitdiff.parse(diff, "d.patch")
    want = _git_apply(tmp_path, {"f": base}, diff)
    assert want is not None and patching.apply(fp, base, "d.patch").data == want["f"]
