"""The rest of the git apply corpus: git's own test vectors (tests/data/gitapply) on the tree their
hunks imply, damaged versions of every case, and the whole corpus (tests/gitapply_corpus.py holds
the cases git makes here and the two sides that judge each)."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path

from gitapply_corpus import DATA, LINK, Case, Tree, case, made_by_git

# ---- git's own vectors ---------------------------------------------------------------------------
_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_GITHEAD = re.compile(rb"^diff --git [^ ]+/(\S+) [^ ]+/(\S+)$")


def implied_tree(diff: bytes) -> Tree:
    """The tree a diff's hunks imply (a reader of its own, not patchkeeper's): each file the diff
    changes first holds filler lines up to each hunk's start, then the hunk's old lines."""
    tree: dict[str, list[bytes]] = {}
    seen: set[str] = set()
    lines = diff.split(b"\n")
    name: str | None = None
    new = False
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _GITHEAD.match(line)
        if m:
            name, new = m.group(1).decode("utf-8", "replace"), False
        elif line.startswith((b"rename from ", b"copy from ")):
            name = line.split(b" ", 2)[2].decode("utf-8", "replace")
        elif line.startswith(b"new file mode") or line == b"--- /dev/null":
            new = True
        elif line.startswith(b"--- ") and not line.startswith(b"--- /dev/null"):
            token = line[4:].split(b"\t")[0].split(b"/", 1)
            name = token[-1].decode("utf-8", "replace")
        h = _HUNK.match(line)
        if h and name and not new and name not in seen:
            start, count = int(h.group(1)), int(h.group(2) or b"1")
            body = tree.setdefault(name, [])
            while len(body) < start - 1:
                body.append(b"filler %d\n" % len(body))
            j = i + 1
            while count > 0 and j < len(lines):
                if lines[j][:1] in (b" ", b"-", b""):
                    body.append(lines[j][1:] + b"\n")
                    count -= 1
                j += 1
        if line.startswith(b"diff ") and name:
            seen.update(tree)
        i += 1
    return {k: (b"".join(v), 0o644) for k, v in tree.items() if k and ".." not in k.split("/")}


def vectors() -> Iterator[Case]:
    """Each of git's vectors on the tree its hunks imply (those of t4013 that differ only in the log
    text around the diff once)."""
    for path in sorted((DATA / "git-t").iterdir()):
        diff = path.read_bytes()
        if path.name.startswith("t4013"):
            diff = b"\n".join(line for line in diff.split(b"\n") if not line.startswith(b"$ git"))
        yield case(f"git-t/{path.name}", implied_tree(diff), diff)


def _some(c: Case, cases: Iterator[Case], others: int | None) -> list[Case]:
    every = list(cases)
    if others is None:
        return every
    kept = [d for d in every if d.name.rpartition("/")[2] in ALWAYS]
    rest = [d for d in every if d not in kept]
    return kept + random.Random(c.name).sample(rest, min(others, len(rest)))


# ---- damage --------------------------------------------------------------------------------------
def _hunk_lines(lines: list[bytes]) -> list[int]:
    return [i for i, line in enumerate(lines) if line.startswith(b"@@ -")]


def damaged(c: Case) -> Iterator[Case]:
    """Versions of the case's last patch with one thing wrong, on the same tree."""
    diff = c.patches[-1]
    head = c.patches[:-1]
    lines = diff.split(b"\n")
    hunks = _hunk_lines(lines)

    def mk(name: str, new_lines: list[bytes], tree: tuple | None = None) -> Case:
        return Case(f"{c.name}/{name}", tree if tree is not None else c.tree, (*head, b"\n".join(new_lines)))

    if hunks:
        h = hunks[0]
        m = _HUNK.match(lines[h])
        assert m is not None
        end = next(
            (i for i in range(h + 1, len(lines)) if lines[i][:1] not in (b" ", b"-", b"+", b"\\")), len(lines)
        )  # the line after the first hunk
        if end < len(lines) and lines[end].startswith(b"@@ -"):  # another hunk of the same file follows
            yield mk("stray-line", lines[:end] + [b"a note between hunks"] + lines[end:])
            yield mk("empty-line", lines[:end] + [b""] + lines[end:])
            yield mk("overlap", lines[:end] + lines[h:end] + lines[end:])
        old, new = int(m.group(2) or b"1"), int(m.group(4) or b"1")
        for label, o, n in (
            ("count+1", old + 1, new + 1),
            ("count-1", max(old - 1, 0), new),
            ("newcount+1", old, new + 1),
        ):
            yield mk(
                label, [*lines[:h], b"@@ -%s,%d +%s,%d @@" % (m.group(1), o, m.group(3), n), *lines[h + 1 :]]
            )
        yield mk("truncated", lines[: end - 1] + lines[end:])
        yield mk(
            "huge-line",
            [
                *lines[:h],
                lines[h]
                .replace(b"-" + m.group(1), b"-98765432109876543210", 1)
                .replace(b"+" + m.group(3), b"+98765432109876543210", 1),
                *lines[h + 1 :],
            ],
        )
        yield mk(
            "big-line", [*lines[:h], lines[h].replace(b"-" + m.group(1), b"-4000000", 1), *lines[h + 1 :]]
        )
        yield mk("zero-start", [*lines[:h], lines[h].replace(b"-" + m.group(1), b"-0", 1), *lines[h + 1 :]])
        ctx = [i for i in range(h + 1, end) if lines[i][:1] == b" "]
        if ctx:
            yield mk("context-changed", [*lines[: ctx[0]], b" something else", *lines[ctx[0] + 1 :]])
            yield mk("no-eol-marker", [*lines[: h + 1], b"\\ No newline at end of file", *lines[h + 1 :]])
    for i, line in enumerate(lines):
        if line.startswith((b"literal ", b"delta ")):
            n = int(line.split()[1])
            yield mk("lying-size", [*lines[:i], b"%s %d" % (line.split()[0], n + 1), *lines[i + 1 :]])
            data = lines[i + 1]
            if len(data) > 8:
                flipped = data[:6] + (b"A" if data[6:7] != b"A" else b"B") + data[7:]
                yield mk("corrupt-base85", [*lines[: i + 1], flipped, *lines[i + 2 :]])
                yield mk("bad-base85-char", [*lines[: i + 1], data[:6] + b'"' + data[7:], *lines[i + 2 :]])
            yield mk("binary-truncated", [*lines[: i + 1], *lines[i + 2 :]])
            if line.startswith(b"delta "):
                tree = tuple((p, d[:-1] + b"?" if m == 0o644 else d, m) for p, d, m in c.tree)
                yield mk("delta-base-mismatch", lines, tree)
            rev = next(
                (j for j in range(i + 2, len(lines)) if lines[j].startswith((b"literal ", b"delta "))), None
            )
            if rev is not None:
                yield mk("reverse-truncated", [*lines[: rev + 1], *lines[rev + 2 : rev + 3]])
            break
    names = [i for i, line in enumerate(lines) if line.startswith(b"diff --git a/")]
    if names:
        i = names[0]
        for label, repl in (
            ("dotdot", b"../escape"),
            ("absolute", b"/tmp/escape"),
            ("dot-git", b".git/config"),
            ("sub-dot-git", b"sub/.GIT/hooks/x"),
            ("dot", b"./x"),
        ):
            name = re.match(rb"diff --git a/(\S+) b/", lines[i])
            if name is None:
                continue
            old = name.group(1)
            yield mk(
                label,
                [
                    line.replace(b"a/" + old, b"a/" + repl).replace(b"b/" + old, b"b/" + repl)
                    if j >= i
                    else line
                    for j, line in enumerate(lines)
                ],
            )
    if b"\r" not in diff and hunks:
        yield mk("crlf", [line + b"\r" for line in lines[:-1]] + lines[-1:])
    yield mk("doubled-file", lines[:-1] + lines)


ALWAYS = (
    "huge-line",
    "reverse-truncated",
    "delta-base-mismatch",
    "lying-size",
    "corrupt-base85",
    "stray-line",
)
NAMES = ("dotdot", "absolute", "dot-git", "sub-dot-git", "dot")


def corpus(work: Path) -> list[Case]:
    """The whole corpus: git-made cases and git's vectors, each also damaged (every damage of git's
    forms at their own place; of a form moved in its file or with other context, and of git's
    vectors, the damages in ALWAYS and a few others drawn by the case's name)."""
    out = []
    for c in made_by_git(work):
        out.append(c)
        plain = "/" not in c.name and not c.name.endswith(("-U1", "-U8"))
        named = random.Random(c.name).random() < 0.2  # a name that leaves the tree: on a fifth of the forms
        some = [d for d in damaged(c) if named or d.name.rpartition("/")[2] not in NAMES]
        out.extend(_some(c, iter(some), None if plain else 2))
    seen: set[bytes] = set()
    for c in vectors():
        if c.patches[0] in seen:
            continue
        seen.add(c.patches[0])
        out.append(c)
        out.extend(_some(c, damaged(c), 2))
    extra = [
        case(
            "add-over-directory",
            {"d/x": (b"x\n", 0o644)},
            b"diff --git a/d b/d\nnew file mode 100644\n--- /dev/null\n+++ b/d\n@@ -0,0 +1 @@\n+d\n",
        ),
        case(
            "add-below-file",
            {"d": (b"x\n", 0o644)},
            b"diff --git a/d/x b/d/x\nnew file mode 100644\n--- /dev/null\n+++ b/d/x\n@@ -0,0 +1 @@\n+d\n",
        ),
        case(
            "add-through-symlink",
            {"real/k": (b"k\n", 0o644), "l": (b"real", LINK)},
            b"diff --git a/l/x b/l/x\nnew file mode 100644\n--- /dev/null\n+++ b/l/x\n@@ -0,0 +1 @@\n+d\n",
        ),
        case(
            "edit-a-symlink",
            {"real": (b"k\n", 0o644), "l": (b"real", LINK)},
            b"diff --git a/l b/l\n--- a/l\n+++ b/l\n@@ -1 +1 @@\n-k\n+j\n",
        ),
        case(
            "edit-a-directory",
            {"d/x": (b"k\n", 0o644)},
            b"diff --git a/d b/d\n--- a/d\n+++ b/d\n@@ -1 +1 @@\n-k\n+j\n",
        ),
    ]
    return out + extra
