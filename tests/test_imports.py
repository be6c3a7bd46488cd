"""The package's own imports sit at module level (but a short, documented list) and form no cycle."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import patchkeeper

SRC = Path(patchkeeper.__file__).parent

# (module, imported module): in-function imports of patchkeeper itself that stay, each for a reason said
# at the import. Keep this list short; a new entry needs a reason a user would feel.
LAZY_OWN: set[tuple[str, str]] = {
    ("patchkeeper.__main__", "patchkeeper.cli"),  # the entry point catches Ctrl-C while the CLI imports
    # audit and status of a target with no patch set applied read no patch set: the reader (parsing,
    # patching, templates: a tenth of the bare venv's warm audit, issue 40) loads when one is read
    ("patchkeeper.change.session", "patchkeeper.patchset.patchset"),
    ("patchkeeper.commands.audit", "patchkeeper.change.stacks"),
    # --all: the fleet runner (multiprocessing)
    ("patchkeeper.commands.audit", "patchkeeper.commands.audit_all"),
    ("patchkeeper.targets", "patchkeeper.targets.ssh"),  # a local target's command loads no SSH client code
    ("patchkeeper.targets.local", "patchkeeper.targets.remote_agent"),  # the wire: another interpreter only
    # --rehash alone reads release wheels (zipfile, wheels.py) for their code digests
    ("patchkeeper.commands.audit", "patchkeeper.checks.release_code"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def target(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The absolute name `from ... import` reads from."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imported(module: str, node: ast.Import | ast.ImportFrom, is_package: bool, known: set[str]) -> set[str]:
    """The patchkeeper modules one import statement loads by name."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    base = target(module, node, is_package)
    found = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known}
    return found | ({base} if base in known else set())


def modules() -> dict[str, tuple[ast.Module, bool]]:
    return {
        module_name(p): (ast.parse(p.read_text()), p.name == "__init__.py") for p in sorted(SRC.rglob("*.py"))
    }


def runtime_top_level(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports run when the module loads: its body, outside functions, classes and `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                visit(getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    return found


def in_function_own_imports() -> set[tuple[str, str]]:
    everything = modules()
    known = set(everything)
    found: set[tuple[str, str]] = set()
    for name, (tree, is_package) in everything.items():
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        loads = imported(name, node, is_package, known)
                        base = target(name, node, is_package) if isinstance(node, ast.ImportFrom) else ""
                        for other in ({o for o in loads if o != base} or loads) or {base}:
                            if other.startswith("patchkeeper"):
                                found.add((name, other))
    return found


def cycles() -> list[list[str]]:
    """Each import cycle among the modules' load-time imports (a package's __init__ importing its own
    submodules is how packages work, so the edge from a submodule up to its package is left out)."""
    everything = modules()
    known = set(everything)
    edges = {
        name: {
            o
            for node in runtime_top_level(tree)
            for o in imported(name, node, is_package, known)
            if not name.startswith(o + ".")
        }
        for name, (tree, is_package) in everything.items()
    }
    found: list[list[str]] = []
    state: dict[str, int] = {}

    def walk(name: str, path: list[str]) -> None:
        state[name] = 1
        for other in sorted(edges[name]):
            if state.get(other) == 1:
                found.append(path[path.index(other) :] + [other] if other in path else [name, other])
            elif other not in state:
                walk(other, path + [other])
        state[name] = 2

    for name in sorted(edges):
        if name not in state:
            walk(name, [name])
    return found


def test_own_imports_are_at_module_level():
    assert sorted(in_function_own_imports() - LAZY_OWN) == []
    assert len(LAZY_OWN) <= 12


# Third-party (and stdlib) imports that may wait inside a function: each is slow to import and off the
# fast paths (tests/test_cli_imports.py), and says so in a comment on its line.
OPTIONAL_ON_HOSTS = {"blake3"}  # host/disk.py imports it where the host has it, else falls back
LAZY_HEAVY = {
    "packaging",
    "unidiff",
    "git",
    "gitdb",
    "paramiko",
    "http",
    "mcp",
    "mcp_types",
    "anyio",
}  # mcp, mcp_types, anyio: the optional extra patchkeeper[mcp], imported by `patchkeeper mcp` only


def test_only_heavy_libraries_are_imported_in_functions():
    late = []
    for path in sorted(SRC.rglob("*.py")):
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Import):
                        names = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.level == 0:
                        names = [node.module or ""]
                    else:
                        continue
                    if (
                        any(n.split(".")[0] not in LAZY_HEAVY for n in names)
                        or "# lazy:" not in lines[node.lineno - 1]
                    ):
                        late.append(
                            f"{path.relative_to(SRC)}:{node.lineno}: {lines[node.lineno - 1].strip()}"
                        )
    assert late == []


def test_the_modules_import_no_cycle():
    assert cycles() == []


def test_the_walk_sees_in_function_imports_and_cycles(tmp_path, monkeypatch):
    """The two checks above can fail: a copy of a package with a lazy import and a cycle is caught."""
    pkg = tmp_path / "patchkeeper"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text(
        "from . import b\n\n\ndef f():\n    from ..sub import b\n    return b\n"
    )
    (pkg / "sub" / "b.py").write_text("from .a import f\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", pkg)
    assert in_function_own_imports() == {("patchkeeper.sub.a", "patchkeeper.sub.b")}
    assert cycles() == [["patchkeeper.sub.a", "patchkeeper.sub.b", "patchkeeper.sub.a"]]


def test_host_modules_import_only_the_standard_library_and_each_other():
    """host/ is shipped to targets and run in their interpreter: nothing else of patchkeeper goes with it."""
    everything = modules()
    outside = []
    for name, (tree, is_package) in everything.items():
        if name.startswith("patchkeeper.host."):
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    found = {target(name, node, is_package)}
                elif isinstance(node, ast.Import):
                    found = {a.name for a in node.names}
                else:
                    continue
                outside += [
                    (name, f)
                    for f in found
                    if f.startswith("patchkeeper")
                    and not f.startswith("patchkeeper.host")
                    or not f.startswith("patchkeeper")
                    and f.split(".")[0] not in OPTIONAL_ON_HOSTS | sys.stdlib_module_names
                ]
    assert outside == []
