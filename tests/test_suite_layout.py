"""The test suite's own layout: test files share through conftest.py and helper modules, never by
importing one another (a fixture imported from another test file runs that file's module code and
hides where the fixture lives)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def imports_of_test_files(source: str) -> list[str]:
    """The test_* modules that `source` imports, at any depth (inside functions too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and not node.level
            else []
        )
        found += [n for n in names if n.split(".")[0].startswith("test_")]
    return found


def test_no_test_file_imports_another():
    offenders = {p.name: imports_of_test_files(p.read_text()) for p in sorted(TESTS.glob("*.py"))}
    assert {name: mods for name, mods in offenders.items() if mods} == {}


def test_the_check_sees_imports_at_the_top_and_inside_functions():
    assert imports_of_test_files("from test_verify import FAKE\nimport os\n") == ["test_verify"]
    assert imports_of_test_files("def f():\n    import test_ssh as t\n") == ["test_ssh"]
    assert imports_of_test_files("from helpers import ledger\nfrom conftest import tree\n") == []
