"""Strict application of unified diffs: offsets, missing final newlines, adds, deletes, modes."""

from __future__ import annotations

import pytest

from patchkeeper.errors import BadInput, HunkFailed
from patchkeeper.patchset import gitdiff, patching

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
    with pytest.raises(
        HunkFailed, match=r"@@ -2,3 \+2,3 @@ does not apply: line 3: expected 'three', found 'tree'"
    ):
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


HEADER_FORMS = """From 1234 Mon Sep 17 00:00:00 2001
Subject: [PATCH] forms git apply takes

a commit message line
---
diff --git b/pkg/new thing.py b/pkg/new thing.py
new file mode 100644
index 0000000..7d4290a
--- /dev/null
+++ b/pkg/new thing.py\t
@@ -0,0 +1 @@
+x = 1
diff --git a/pkg/run.sh b/pkg/run.sh
old mode 100644
new mode 100755
diff --git "a/pkg/caf\\303\\251.py" "b/pkg/caf\\303\\251.py"
index 1111111..2222222 100644
--- "a/pkg/caf\\303\\251.py"
+++ "b/pkg/caf\\303\\251.py"
@@ -1,2 +1,2 @@
-a

+b
--- a/pkg/plain.py\t2026-12-01 10:00:00.000000000 +0000
+++ b/pkg/plain.py\t2026-12-02 10:00:00.000000000 +0000
@@ -1,2 +1,2 @@
 keep
-old
+new
-- 
2.39.5
"""


def test_the_header_forms_git_apply_takes_give_git_apply_s_bytes(tmp_path):
    """`diff --git b/N b/N` with a space (git diff --no-index), a mode change alone, quoted names, an
    empty context line, a traditional diff -u with timestamps, mail text and a signature around."""
    import subprocess

    text = HEADER_FORMS
    start = {"pkg/run.sh": b"echo\n", "pkg/caf\u00e9.py": b"a\n\n", "pkg/plain.py": b"keep\nold\n"}
    for rel, data in start.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    (tmp_path / "forms.patch").write_text(text)
    subprocess.run(["git", "apply", "forms.patch"], cwd=tmp_path, check=True)
    fps = {fp.path: fp for fp in gitdiff.parse(text, "forms.patch")}
    assert [(fp.kind, fp.new_mode) for fp in fps.values()] == [
        ("add", 0o644),
        ("modify", 0o755),
        ("modify", None),
        ("modify", None),
    ]
    assert (
        patching.apply(fps["pkg/new thing.py"], None, "t").data
        == (tmp_path / "pkg/new thing.py").read_bytes()
    )
    assert (tmp_path / "pkg/run.sh").stat().st_mode & 0o777 == fps["pkg/run.sh"].new_mode
    for rel, data in start.items():
        assert patching.apply(fps[rel], data, "t").data == (tmp_path / rel).read_bytes()


def test_a_binary_diff_without_its_bytes_is_refused_naming_the_fix():
    text = "diff --git a/pkg/x.so b/pkg/x.so\nindex 1111111..2222222 100644\nBinary files a/pkg/x.so and b/pkg/x.so differ\n"
    with pytest.raises(BadInput, match=r"binary change without its bytes \(a diff made without --binary\)"):
        gitdiff.parse(text, "t.patch")
