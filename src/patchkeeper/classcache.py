"""The methods `dataclasses` generates, compiled once per source text and remembered across runs.

Building a dataclass compiles the source of each method it generates (`__init__`, `__repr__`,
`__eq__`, `__hash__`, a frozen class's `__setattr__` and `__delattr__`): about 40 value classes
load on a change path, and those compilations were half of its import time. `install` gives the
`dataclasses` module an `exec` that looks the source text up in a table of code objects compiled
from exactly that text, by this very Python (the table is stamped with its version), as
`dataclasses` itself would compile it (no inherited `__future__` flags); only an unknown text is
compiled, and the table is written back once at exit when it grew. The classes are the same
dataclasses, built by the same code: only the compiling is remembered, as `__pycache__` remembers a
module's. A table that cannot be read or written only costs time. Only the CLI's entry point
(launch.py) installs it; a library user or a test importing our modules gets plain `dataclasses`.
"""

from __future__ import annotations

import builtins
import sys
from typing import Any, Callable

STAMP = ("pk-dataclass-code", 1, sys.version, sys.implementation.cache_tag)
KEEP = 2048  # a table grown past this (many versions' classes) keeps only what this run used
_codes: dict[str, Any] = {}
_new: dict[str, Any] = {}
_used: set[str] = set()


def path() -> str:
    from .host.disk import user_cache

    return user_cache(f"dataclass-code-{sys.implementation.cache_tag}.marshal")


def _exec(source: Any, globals: Any = None, locals: Any = None) -> None:  # noqa: A002 (exec's own names)
    if isinstance(source, str):
        _used.add(source)
        code = _codes.get(source)
        if code is None:
            code = _new[source] = _codes[source] = compile(source, "<string>", "exec", dont_inherit=True)
        source = code
    builtins.exec(source, globals, locals)


def install() -> None:
    """Remember the compiled methods of every dataclass built from now on in this process; and load
    `inspect`, which `dataclasses` imports, only when something uses it (see on_first_use)."""
    if "dataclasses" not in sys.modules:
        on_first_use("inspect")
    import dataclasses

    if getattr(dataclasses, "exec", None) is _exec:
        return
    from .host.disk import load_cache

    _codes.update(load_cache(path(), STAMP) or {})  # none yet, damaged, or another Python's: compiled as they come
    dataclasses.exec = _exec  # type: ignore[attr-defined]  # found before the builtin by dataclasses' own calls
    import atexit

    atexit.register(_save)


def on_first_use(name: str, calls: tuple[str, ...] = ()) -> None:
    """Stand in for the module `name` until one of its attributes is first read, then import it whole.

    `dataclasses` imports `inspect` (with ast, dis and tokenize: about a tenth of a change path's
    imports) only to name the signature of a class that has no docstring, and our value classes all
    have one. The stand-in answers `import inspect` (which reads only its `__spec__`); any other read
    imports the real module, which replaces the stand-in in sys.modules and fills the stand-in's own
    namespace, so a module that kept the stand-in finds every name in it from then on.
    `calls` are functions another module takes at its own import (`from name import f`): the
    stand-in has each as a function that imports the real module when first called and calls its f.
    A submodule's stand-in is set on its package too, as an import of the real one would be.
    importlib.util.LazyLoader cannot serve here: the import statement itself reads its `__spec__`,
    which loads it."""
    if name in sys.modules:
        return
    import importlib
    import types

    stand_in = types.ModuleType(name, f"{name}, imported whole when one of its attributes is first read")

    def real() -> types.ModuleType:
        if sys.modules.get(name) is stand_in:
            sys.modules.pop(name, None)  # (another thread may be a step ahead)
        module = importlib.import_module(name)
        stand_in.__dict__.update(module.__dict__)
        return module

    def load(attribute: str) -> Any:  # PEP 562: read only for a name the namespace lacks
        if attribute in ("__file__", "__cached__", "__path__"):  # (replay.py asks every module for its file)
            raise AttributeError(f"{name} is not imported yet: it comes from no file so far")
        return getattr(real(), attribute)

    def forward(attribute: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(real(), attribute)(*args, **kwargs)

        return call

    vars(stand_in)["__getattr__"] = load
    for attribute in calls:
        vars(stand_in)[attribute] = forward(attribute)
    package, _, leaf = name.rpartition(".")
    if package:
        setattr(importlib.import_module(package), leaf, stand_in)
    sys.modules[name] = stand_in


def _save() -> None:
    """Write the table back when this run compiled anything new (not durably: a lost table is rebuilt)."""
    if not _new:
        return
    if len(_codes) > KEEP:
        for source in [s for s in _codes if s not in _used]:
            del _codes[source]
    from .host.disk import save_cache

    save_cache(path(), STAMP, _codes, 0o600)
    _new.clear()
