"""merge3: git merge-file's text and conflicts, diff3's chunks (port's hunk outcomes), and where each conflict stands."""

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
    proc = subprocess.run(
        [
            "git",
            "merge-file",
            "-p",
            "--diff3",
            "-L",
            "ours",
            "-L",
            "base",
            "-L",
            "theirs",
            "ours",
            "base",
            "theirs",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    return proc.stdout, proc.returncode


def merge(base: str, ours: str, theirs: str) -> tuple[list[merge3.Chunk], str, int]:
    chunks = merge3.diff3(split_lines(base), split_lines(ours), split_lines(theirs))
    data, n = merge3.merge_file(base.encode(), ours.encode(), theirs.encode(), LABELS)
    return chunks, data.decode(), n


CASES = {
    # ours, theirs, the kinds of the chunks that are not stable, conflicts
    "apart": (edit(BASE, l3="ours 3\n"), edit(BASE, l6="theirs 6\n"), ["ours", "theirs"], 0),
    "adjacent": (edit(BASE, l3="ours 3\n"), edit(BASE, l4="theirs 4\n"), ["conflict"], 1),
    "alike": (edit(BASE, l5="both 5\n"), edit(BASE, l5="both 5\n"), ["same"], 0),
    "insert at one place": (edit(BASE, a7="ours\n"), edit(BASE, a7="theirs\n"), ["conflict"], 1),
    "theirs removed what ours edits": (
        edit(BASE, l8="ours 8\n"),
        edit(BASE, l7=None, l8=None, l9=None),
        ["conflict"],
        1,
    ),
    "ours context changed by theirs": (
        edit(BASE, a4="ours\n"),
        edit(BASE, l6="theirs 6\n"),
        ["ours", "theirs"],
        0,
    ),
    "at the ends": (
        edit(BASE, l1="ours 1\n", a12="ours end\n"),
        edit(BASE, l12="theirs 12\n"),
        ["ours", "conflict"],
        1,
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_diff3_chunks_and_the_text_git_merge_file_writes(case, tmp_path):
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
    insertion = merge3.Chunk(5, 5, (), ("x\n",), ())
    assert insertion.touches(3, 8) and not insertion.touches(5, 8) and not insertion.touches(2, 5)
    change = merge3.Chunk(5, 6, ("a\n",), ("b\n",), ("a\n",))
    assert change.touches(5, 6) and change.touches(0, 6) and not change.touches(6, 9)


def test_the_text_is_git_s_where_diff3_of_a_line_diff_puts_the_conflict_around_other_lines(tmp_path):
    """Blank lines that either side could keep: git's xdiff leaves them out of the conflict, where
    diff3 over difflib's matching (patchkeeper's merge until it took git's bytes) took them all in."""
    base, ours, theirs = "b\n\n\n\n\n", "c\n\n\nd\n", "\n\n"
    _, text, n = merge(base, ours, theirs)
    assert (text, n) == git_merge(tmp_path, base, ours, theirs)
    assert text == "<<<<<<< ours\nc\n||||||| base\nb\n\n\n=======\n>>>>>>> theirs\n\n\nd\n"


def test_more_than_127_conflicts_are_counted_from_the_markers():
    base = "".join(f"{k}\n\n\n" for k in range(140))
    ours = base.replace("\n\n\n", "o\n\n\n")
    theirs = base.replace("\n\n\n", "t\n\n\n")
    text, n = merge3.merge_file(base.encode(), ours.encode(), theirs.encode(), LABELS)
    assert n == 140 == text.count(b"<<<<<<< ours\n")


def test_a_binary_file_is_one_line_of_bad_input_naming_what_to_do():
    from patchkeeper.errors import BadInput

    with pytest.raises(BadInput, match="git merge-file failed: .*binary"):
        merge3.merge_file(b"a\0b\n", b"a\0c\n", b"a\0d\n", LABELS)


def test_each_conflict_is_placed_on_the_base_lines_it_stands_for():
    base = split_lines(BASE + BASE)  # every line twice: the second conflict is found after the first
    ours_text = edit(BASE + BASE, l3="ours 3\n", l15="ours 15\n", a20="ours after 20\n")
    theirs_text = edit(BASE + BASE, l3="theirs 3\n", l15="theirs 15\n", a20="theirs after 20\n")
    ours = split_lines(ours_text)
    data, n = merge3.merge_file("".join(base).encode(), ours_text.encode(), theirs_text.encode(), LABELS)
    found = merge3.conflicts(data.decode())
    assert n == 3 and [c.base for c in found] == [("line 3\n",), ("line 3\n",), ()]
    ours_map = merge3.matching(base, ours)
    assert merge3.spans(found, base, ours, ours_map) == [(2, 3), (14, 15), (20, 20)]
