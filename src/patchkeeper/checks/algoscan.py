"""Places in a package's Python source that compare to one algorithm by name and not to another.

sglang checks its speculative algorithm by name in many places (`algo == "DFLASH"`,
`SpeculativeAlgorithm.DFLASH`, `in (...)`); a patch set that adds an algorithm riding on DFlash
(DDTREE) must be named wherever DFLASH is. A release that adds such a place needs the patch set
to follow it."""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

DFLASH = "DFLASH"


@dataclass(frozen=True)
class Place:
    """One comparison: its file, line, and its source text (which tells it apart across releases)."""

    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def _names_in(node: ast.AST, names: tuple[str, ...], tuples: dict[str, set[str]]) -> set[str]:
    """Which of `names` an expression names: "X", Something.X(.name), or a variable bound to a
    tuple, list or set that holds them."""
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and sub.value in names:
            found.add(sub.value)
        elif isinstance(sub, ast.Attribute) and sub.attr in names:
            found.add(sub.attr)
        elif isinstance(sub, ast.Name) and sub.id in tuples:
            found |= tuples[sub.id]
    return found


def places(path: str, data: bytes, algorithm: str, of: str = DFLASH) -> list[Place]:
    """Every comparison (==, !=, in, not in, is) in one file that names `of` but not `algorithm`;
    none in a file that does not parse. Only the statements on lines that name `of` (or a variable
    bound to a tuple that does) are walked: a whole tree's walk is most of a scan's time."""
    if of.encode() not in data:
        return []
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return []
    names = (of, algorithm)
    text = data.decode("utf-8", "replace").split("\n")
    hot = [n for n, line in enumerate(text, 1) if of in line]
    tuples = {
        t.id: _names_in(n.value, names, {})
        for n in _near(tree, hot)
        if isinstance(n, ast.Assign) and isinstance(n.value, (ast.Tuple, ast.List, ast.Set))
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    tuples = {name: found for name, found in tuples.items() if found}
    if tuples:
        word = re.compile(r"\b(?:" + "|".join(map(re.escape, tuples)) + r")\b")
        hot = [n for n, line in enumerate(text, 1) if of in line or word.search(line)]
    return sorted(
        (
            Place(path, node.lineno, ast.unparse(node))
            for node in _near(tree, hot)
            if isinstance(node, ast.Compare) and _names_in(node, names, tuples) == {of}
        ),
        key=lambda p: p.line,
    )


def _near(tree: ast.AST, hot: list[int]) -> Iterator[ast.AST]:
    """ast.walk, but into a node only where its lines hold one of `hot` (sorted line numbers)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        start = getattr(node, "lineno", None)
        if start is not None:
            i = bisect.bisect_left(hot, start)
            if i == len(hot) or hot[i] > (getattr(node, "end_lineno", None) or start):
                continue
        yield node
        todo.extend(reversed(list(ast.iter_child_nodes(node))))


def scan(files: Iterable[tuple[str, bytes]], algorithm: str, of: str = DFLASH) -> Iterator[Place]:
    """`places` over many files, in the order given."""
    for path, data in files:
        yield from places(path, data, algorithm, of)


def new_places(before: Iterable[Place], after: Iterable[Place]) -> list[Place]:
    """The places of `after` whose file and text no place of `before` has (line numbers move)."""
    seen = {(p.path, p.text) for p in before}
    return [p for p in after if (p.path, p.text) not in seen]
