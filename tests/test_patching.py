"""Strict application of unified diffs: offsets, missing final newlines, adds, deletes, modes."""

from __future__ import annotations

import pytest

from patchkeeper.patchset import gitdiff, patching
from patchkeeper.errors import BadInput, HunkFailed

DIFF = """diff --git a/pkg/a.py b/pkg/a.py
index 1111111..2222222 100644
--- a/pkg/a.py
+++ b/pkg/a.py
@@ -2,3 +2,3 @@
 two
-three
+THREE
 four
\\ No newline at end of file
diff --git a/pkg/run.sh b/pkg/run.sh
old mode 100644
new mode 100755
diff --git a/pkg/new.py b/pkg/new.py
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/pkg/new.py
@@ -0,0 +1,2 @@
+x = 1
+y = 2
\\ No newline at end of file
diff --git a/pkg/gone.py b/pkg/gone.py
deleted file mode 100644
index 4444444..0000000
--- a/pkg/gone.py
+++ /dev/null
@@ -1 +0,0 @@
-bye
"""


def test_parse_kinds_and_modes():
    a, run, new, gone = gitdiff.parse(DIFF, "t.patch")
    assert (a.path, a.kind) == ("pkg/a.py", "modify")
    assert (run.kind, run.new_mode, run.hunks) == ("modify", 0o755, ())
    assert (new.kind, new.new_mode) == ("add", 0o644)
    assert gone.kind == "delete"


def test_apply_exact_at_offset_and_without_final_newline():
    a, _, new, gone = gitdiff.parse(DIFF, "t.patch")
    assert patching.apply(a, b"one\ntwo\nthree\nfour", "t").data == b"one\ntwo\nTHREE\nfour"
    shifted = patching.apply(a, b"zero\nnew\none\ntwo\nthree\nfour", "t")
    assert shifted.data == b"zero\nnew\none\ntwo\nTHREE\nfour" and shifted.offsets == (2,)
    assert patching.apply(new, None, "t").data == b"x = 1\ny = 2"
    assert patching.apply(gone, b"bye\n", "t").data is None


def test_form_feed_and_carriage_returns_are_not_line_breaks():
    a, *_ = gitdiff.parse(DIFF, "t.patch")
    with pytest.raises(HunkFailed):
        patching.apply(a, b"one\ntwo\x0cthree\nfour", "t")
    assert patching.split_lines("a\x0cb\r\nc") == ["a\x0cb\r\n", "c"]


def test_failures_name_the_hunk_and_the_first_mismatching_line():
    a, _, new, gone = gitdiff.parse(DIFF, "t.patch")
    with pytest.raises(HunkFailed, match=r"@@ -2,3 \+2,3 @@ does not apply: line 3: expected 'three', found 'tree'"):
        patching.apply(a, b"one\ntwo\ntree\nfour", "t")
    with pytest.raises(HunkFailed, match="already exists"):
        patching.apply(new, b"", "t")
    with pytest.raises(HunkFailed, match="differs"):
        patching.apply(gone, b"hello\n", "t")


def test_bad_diffs_are_bad_input():
    with pytest.raises(BadInput, match="lacks the a/ or b/ prefix"):
        gitdiff.parse("--- x.py\n+++ x.py\n@@ -1 +1 @@\n-a\n+b\n", "t.patch")
    with pytest.raises(BadInput, match="not a unified diff"):
        gitdiff.parse("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n-a\n", "t.patch")
