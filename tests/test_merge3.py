"""merge3: the diff3 merge port uses, chunk by chunk, with git merge-file --diff3 as the oracle for its text."""

from __future__ import annotations

import subprocess

import pytest

from patchkeeper.patchset import merge3
from patchkeeper.patchset.patching import split_lines

LABELS = ("ours", "base", "theirs")
BASE = "".join(f"line {n}\n" for n in range(1, 13))


def edit(text: str, **lines: str | None) -> str:
    """`text` with line N replaced (l3="x\n"), removed (l3=None) or given lines after it (a3="y\n")."""
    out = []
    for n, line in enumerate(split_lines(text), 1):
        if f"l{n}" in lines:
            line = lines[f"l{n}"] or ""
        out.append(line + (lines.get(f"a{n}") or ""))
    return "".join(out)


def git_merge(tmp_path, base: str, ours: str, theirs: str) -> tuple[str, int]:
    for name, text in (("ours", ours), ("base", base), ("theirs", theirs)):
        (tmp_path / name).write_text(text)
    proc = subprocess.run(["git", "merge-file", "-p", "--diff3", "-L", "ours", "-L", "base", "-L", "theirs",
                           "ours", "base", "theirs"], cwd=tmp_path, capture_output=True, text=True)
    return proc.stdout, proc.returncode


def merge(base: str, ours: str, theirs: str) -> tuple[list[merge3.Chunk], str, int]:
    chunks = merge3.diff3(split_lines(base), split_lines(ours), split_lines(theirs))
    return (chunks, *merge3.merged(chunks, LABELS))


CASES = {
    # ours, theirs, the kinds of the chunks that are not stable, conflicts
    "apart": (edit(BASE, l3="ours 3\n"), edit(BASE, l6="theirs 6\n"), ["ours", "theirs"], 0),
    "adjacent": (edit(BASE, l3="ours 3\n"), edit(BASE, l4="theirs 4\n"), ["conflict"], 1),
    "alike": (edit(BASE, l5="both 5\n"), edit(BASE, l5="both 5\n"), ["same"], 0),
    "insert at one place": (edit(BASE, a7="ours\n"), edit(BASE, a7="theirs\n"), ["conflict"], 1),
    "theirs removed what ours edits": (edit(BASE, l8="ours 8\n"), edit(BASE, l7=None, l8=None, l9=None),
                                       ["conflict"], 1),
    "ours context changed by theirs": (edit(BASE, a4="ours\n"), edit(BASE, l6="theirs 6\n"), ["ours", "theirs"], 0),
    "at the ends": (edit(BASE, l1="ours 1\n", a12="ours end\n"), edit(BASE, l12="theirs 12\n"),
                    ["ours", "conflict"], 1),
}


@pytest.mark.parametrize("case", CASES)
def test_diff3_chunks_and_text_as_git_merge_file_writes_them(case, tmp_path):
    ours, theirs, kinds, conflicts = CASES[case]
    chunks, text, n = merge(BASE, ours, theirs)
    assert [c.kind for c in chunks if c.kind != merge3.STABLE] == kinds and n == conflicts
    assert (text, n) == git_merge(tmp_path, BASE, ours, theirs)
    assert "".join(line for c in chunks for line in c.base) == BASE  # every base line in exactly one chunk


def test_a_conflict_on_a_last_line_without_newline_keeps_the_markers_on_their_own_lines(tmp_path):
    base = "a\nb\nc"
    _, text, n = merge(base, "a\nb\nours", "a\nb\ntheirs")
    assert n == 1 and text == ("a\nb\n<<<<<<< ours\nours\n||||||| base\nc\n=======\ntheirs\n>>>>>>> theirs\n")
    assert (text, n) == git_merge(tmp_path, base, "a\nb\nours", "a\nb\ntheirs")
    assert merge3.marker_lines(text) == [3, 5, 9]
    assert merge3.taking(text, "theirs") == "a\nb\ntheirs\n" and merge3.taking(text, "ours") == "a\nb\nours\n"


def test_touches_counts_an_insertion_only_inside_a_span():
    insertion = merge3.Chunk(5, 5, (), ("x\n",), (), 5)
    assert insertion.touches(3, 8) and not insertion.touches(5, 8) and not insertion.touches(2, 5)
    change = merge3.Chunk(5, 6, ("a\n",), ("b\n",), ("a\n",), 5)
    assert change.touches(5, 6) and change.touches(0, 6) and not change.touches(6, 9)
