"""The error hints of src/ (read with ast) and the verbs that can reach each: a call graph of the
package's functions by name (imports followed, methods by attribute name), rooted at the verbs' commands (verbs/)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "patchkeeper"


@dataclass(frozen=True)
class Hint:
    """The hint of one `raise SomeError(message, hint)`: where, in which function, its literal text."""

    where: str  # module.py:line
    function: str  # the key of the function that raises it
    text: str  # the string constants of the hint, formatted values left out


Aliases = dict[str, tuple[str, "str | None"]]  # local name -> (module, name in it; None: the module itself)


@dataclass
class Module:
    name: str  # patchkeeper.change.engine
    tree: ast.Module
    is_package: bool
    aliases: Aliases = field(default_factory=dict)  # the module's top-level imports


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(base: str, level: int, module: str | None, is_package: bool) -> str:
    """The absolute module an `from .x import y` names."""
    if level == 0:
        return module or ""
    parts = base.split(".")
    parts = parts if is_package else parts[:-1]
    parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


def _own(node: ast.AST) -> list[ast.AST]:
    """The nodes of a body, not those of the functions and classes defined in it."""
    out, todo = [], list(ast.iter_child_nodes(node))
    while todo:
        n = todo.pop()
        out.append(n)
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo += ast.iter_child_nodes(n)
    return out


def _imports(mod: Module, node: ast.AST) -> Aliases:
    """The names the `from ... import` statements of a body (its own) bind."""
    aliases: Aliases = {}
    for n in _own(node):
        if isinstance(n, ast.ImportFrom):
            origin = _resolve(mod.name, n.level, n.module, mod.is_package)
            for a in n.names:
                sub = Path(*f"{origin}.{a.name}".split("."))
                is_module = (SRC / sub).is_dir() or (SRC / sub).with_suffix(".py").is_file()
                aliases[a.asname or a.name] = (f"{origin}.{a.name}", None) if is_module else (origin, a.name)
    return aliases


def load() -> dict[str, Module]:
    modules = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        mod = Module(_module_name(path), ast.parse(path.read_text(), str(path)), path.name == "__init__.py")
        mod.aliases = _imports(mod, mod.tree)
        modules[mod.name] = mod
    return modules


@dataclass
class Graph:
    functions: dict[str, ast.AST]  # key "module:qualname" -> the def
    module_of: dict[str, str]
    edges: dict[str, set[str]]
    verbs: dict[str, str]  # verb name -> the key of its function in cli.py


def _defs(mod: Module) -> list[tuple[str, ast.AST, bool, Aliases]]:
    """(qualified name, def, is a method, the imports it sees) of every function of a module, nested
    ones too (which see their enclosing function's imports)."""
    out: list[tuple[str, ast.AST, bool, Aliases]] = []

    def walk(node: ast.AST, prefix: str, in_class: bool, seen: Aliases) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = {**seen, **_imports(mod, child)}
                out.append((prefix + child.name, child, in_class, inner))
                walk(child, prefix + child.name + ".", False, inner)
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".", True, seen)
            else:
                walk(child, prefix, in_class, seen)

    walk(mod.tree, "", False, mod.aliases)
    return out


@lru_cache(maxsize=1)
def graph() -> Graph:
    modules = load()
    functions, module_of, by_name, methods, scope = {}, {}, {}, {}, {}
    for mod in modules.values():
        for qual, node, is_method, aliases in _defs(mod):
            key = f"{mod.name}:{qual}"
            functions[key], module_of[key], scope[key] = node, mod.name, aliases
            if "." not in qual:  # a module-level function, called by its name
                by_name.setdefault((mod.name, qual), []).append(key)
            if is_method:
                methods.setdefault(qual.rsplit(".", 1)[-1], []).append(key)

    def named(module: str, name: str) -> list[str]:
        return by_name.get((module, name), [])

    edges: dict[str, set[str]] = {}
    for key, node in functions.items():
        mod, aliases = modules[module_of[key]], scope[key]
        out: set[str] = set()
        for n in _own(node):  # a nested function's body: its edges are its own
            if isinstance(n, ast.Name):
                if n.id in aliases:
                    origin, attr = aliases[n.id]
                    out.update(named(origin, attr) if attr else [])
                    if attr:  # a class imported by name: its methods are reached through it
                        out.update(k for k in functions if k.startswith(f"{origin}:{attr}."))
                out.update(named(mod.name, n.id))
                for scope_key in (key, key.rpartition(".")[0]):  # a function nested in this one, or a sibling
                    if f"{scope_key}.{n.id}" in functions:
                        out.add(f"{scope_key}.{n.id}")
            elif isinstance(n, ast.Attribute):
                base = n.value.id if isinstance(n.value, ast.Name) else None
                if base in aliases and aliases[base][1] is None:
                    out.update(named(aliases[base][0], n.attr))
                else:
                    out.update(methods.get(n.attr, []))
        edges[key] = out
    verbs = {}
    for mod in modules.values():  # each verb's command, in its module of verbs/ (cli.py's VERBS loads them)
        if not mod.name.startswith(f"{PACKAGE}.verbs."):
            continue
        for qual, node, _, _ in _defs(mod):
            for deco in getattr(node, "decorator_list", []):
                if (
                    isinstance(deco, ast.Call)
                    and isinstance(deco.func, ast.Attribute)
                    and deco.func.attr == "command"
                ):
                    name = (
                        deco.args[0].value if deco.args and isinstance(deco.args[0], ast.Constant) else qual
                    )
                    verbs[str(name)] = f"{mod.name}:{qual}"
    return Graph(functions, module_of, edges, verbs)


def reached(g: Graph, start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        key = todo.pop()
        if key not in seen:
            seen.add(key)
            todo += g.edges.get(key, ())
    return seen


def hints(g: Graph) -> list[Hint]:
    """Every hint given to an error raised in src/ (its second argument, or hint=)."""
    out = []
    for key, node in g.functions.items():
        for n in ast.walk(node):
            if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call):
                call = n.exc
                hint = (
                    call.args[1]
                    if len(call.args) > 1
                    else next((k.value for k in call.keywords if k.arg == "hint"), None)
                )
                if hint is None:
                    continue
                text = "".join(
                    c.value if isinstance(c, ast.Constant) and isinstance(c.value, str) else " "
                    for c in _pieces(hint)
                )
                path = g.module_of[key].replace(".", "/") + ".py"
                out.append(Hint(f"{path}:{n.lineno}", key, text))
    return out


def _pieces(node: ast.AST) -> list[ast.AST]:
    """The parts of a string expression in order: constants, and a placeholder for each value."""
    if isinstance(node, ast.JoinedStr):
        return list(node.values)
    if isinstance(node, ast.BinOp):
        return _pieces(node.left) + _pieces(node.right)
    if isinstance(node, ast.Constant):
        return [node]
    if isinstance(node, ast.IfExp):
        return _pieces(node.body) + [ast.Constant(" ")] + _pieces(node.orelse)
    return [ast.Constant(" ")]


OPTION = re.compile(r"(?<![\w-])(--[a-z][\w-]*|-[a-zA-Z])(?![\w-])")


def options_named(text: str, verbs: set[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """(verb, option) pairs of the commands a hint shows (`patchkeeper VERB ... --x`, `VERB ... --x`),
    and the options it names bare ("--force applies anyway"); options of other programs are skipped."""
    shown, bare = [], []
    quoted = re.split(r"`([^`]*)`", text)
    for i, part in enumerate(quoted):
        if i % 2:  # inside backticks: a command
            words = part.split()
            if words[:1] == ["patchkeeper"]:
                words = words[1:]
            while words[:1] and words[0] in ("-w", "--workspace", "-i", "--inventory"):
                words = words[2:]
            if words and (words[0] in verbs or part.split()[:1] == ["patchkeeper"]):
                shown += [(words[0], o) for o in OPTION.findall(" ".join(words[1:]))] or [(words[0], "")]
            continue  # another program's command (`git log --oneline`)
        for seg in re.split(r"patchkeeper\s+", part)[1:]:  # unquoted `patchkeeper VERB ...` up to a ; or ,
            words = re.split(r"[;,)]", seg, maxsplit=1)[0].split()
            if words and words[0] in verbs:
                shown += [(words[0], o) for o in OPTION.findall(" ".join(words[1:]))]
        rest = re.sub(r"patchkeeper\s+[^;,)]*", " ", part)
        bare += [o for o in OPTION.findall(rest) if o.startswith("--")]
    return shown, bare
