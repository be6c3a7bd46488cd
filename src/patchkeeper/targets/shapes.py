"""What a target sends is checked before the controller believes it: the contract's types, and the
ids, digests, names and paths inside its values.

A host answers over the wire and writes the ledger and the journal the controller reads; whatever
it sends may be wrong (another version, a damaged file, a hostile host). Where such data enters
the controller (answer_from_wire below, records/ledger.py's from_dict, the journal) it is
checked here, and a value that does not fit raises Malformed naming the field: an id is hex of its
fixed length, a digest `algorithm:hex`, a name one path component, a path relative and normalised
inside the place it belongs. Used on the controller only (never shipped to a host).
"""

from __future__ import annotations

import posixpath
import re
from array import array
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from functools import cache
from typing import Any, Union, get_args, get_origin, get_type_hints

from ..host.contract import ANSWERS, AgentContract
from ..host.filekeys import keys_problem
from ..host.manifest_text import values_problem

ALGORITHMS = ("blake3", "sha256")
_DIGEST = re.compile(r"(?:blake3|sha256):[0-9a-f]{64}")
_STATE_ID = re.compile(r"[0-9a-f]{12}")
_DIGESTS = re.compile(r"(?:(?:blake3|sha256):[0-9a-f]{64}\n)*(?:blake3|sha256):[0-9a-f]{64}")
# a key that is not a plain relative path inside site-packages, in keys joined by NUL
_ODD_KEY = re.compile(r"(?:\A|\0)(?:[@%/\0]|\.\.?(?:/|\0|\Z)|\Z)|/\.\.?(?:/|\0|\Z)|//|/(?:\0|\Z)")
_ENTRY_ID = re.compile(r"[0-9]{8}T[0-9]{6}-[0-9a-f]{6}")
ROLE, ENV = "@", "%"  # manifest keys of role files and of files outside the package (repair's)


class Malformed(ValueError):
    """A value from a target that does not fit what it must be."""


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def fail(what: str, value: Any, should: str) -> Malformed:
    return Malformed(f"{what} is {_shown(value)}, not {should}")


def digest(value: Any, what: str = "digest") -> str:
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise fail(what, value, "a digest (blake3:HEX or sha256:HEX)")
    return value


def digests(values: Any, what: str) -> None:
    """Every one a digest (one regex over them all: a manifest has thousands)."""
    values = list(values)
    try:
        joined = "\n".join(values)
    except TypeError:
        raise Malformed(f"{what}: not every one is a string") from None
    if values and not _DIGESTS.fullmatch(joined) or joined.count("\n") != max(len(values) - 1, 0):
        bad = next(v for v in values if not _DIGEST.fullmatch(v))
        raise fail(f"a digest in {what}", bad, "a digest (blake3:HEX or sha256:HEX)")


def state_id(value: Any, what: str = "state id") -> str:
    if not isinstance(value, str) or not _STATE_ID.fullmatch(value):
        raise fail(what, value, "a state id (12 hex digits)")
    return value


def entry_id(value: Any, what: str = "transaction id") -> str:
    if not isinstance(value, str) or not _ENTRY_ID.fullmatch(value):
        raise fail(what, value, "a transaction id (YYYYMMDDTHHMMSS-6 hex digits)")
    return value


def count(value: Any, what: str, least: int = 0, most: int | None = None) -> int:
    if type(value) is not int or value < least or most is not None and value > most:
        raise fail(
            what,
            value,
            f"a whole number of at least {least}" + (f" and at most {most}" if most is not None else ""),
        )
    return value


def number(value: Any, what: str) -> float:
    if type(value) not in (int, float):
        raise fail(what, value, "a number")
    return float(value)


def text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise fail(what, value, "a string")
    return value


def name(value: Any, what: str) -> str:
    """One path component: no slash, no NUL, not empty, not . or .."""
    if not isinstance(value, str) or not value or "/" in value or "\0" in value or value in (".", ".."):
        raise fail(what, value, "a name (one path component)")
    return value


def absolute(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise fail(what, value, "an absolute path")
    return value


def relative(value: Any, what: str, inside: bool = True) -> str:
    """A relative path, normalised (no empty, . or .. parts); `inside=False` allows leading ..
    parts (a RECORD's paths outside site-packages)."""
    if (
        not isinstance(value, str)
        or value in ("", ".")
        or value.startswith("/")
        or "\0" in value
        or posixpath.normpath(value) != value
        or (inside and (value == ".." or value.startswith("../")))
    ):
        raise fail(what, value, "a relative path inside its directory" if inside else "a relative path")
    return value


def key(value: Any, what: str = "manifest key") -> str:
    """A manifest key: a relative path inside site-packages, @ROLE, or %PATH (relative to it)."""
    if isinstance(value, str) and value.startswith(ROLE):
        name(value[1:], what)
    elif isinstance(value, str) and value.startswith(ENV):
        relative(value[1:], what, inside=False)
    else:
        relative(value, what)
    return str(value)


def keys(values: Any, what: str) -> None:
    """Every one a manifest key; the common case (plain relative paths) in one regex over them all."""
    values = list(values)
    try:
        joined = "\0".join(values)
    except TypeError:
        raise Malformed(f"{what}: not every key is a string") from None
    if values and (_ODD_KEY.search(joined) or joined.count("\0") != len(values) - 1):
        for k in values:  # the rare keys the regex sends here: @roles, %paths, or a bad one
            key(k, what)


def rows(value: Any, what: str) -> None:
    """A Rows mapping: key -> (digest, size, mode), checked as a whole (a manifest has thousands)."""
    if not isinstance(value, dict):
        raise fail(what, value, "a mapping")
    keys(value, what)
    try:
        digests([r[0] for r in value.values()], what)
        array("q", [r[1] for r in value.values()])
        array("q", [r[2] for r in value.values()])
        if any(len(r) != 3 for r in value.values()):
            raise Malformed(f"{what}: a row is not (digest, size, mode)")
    except (TypeError, OverflowError, IndexError):
        raise Malformed(f"{what}: a row is not (digest, size, mode)") from None


# ---- the contract's types ------------------------------------------------------------------------
def conform(value: Any, hint: Any, what: str) -> None:
    """`value` as the annotation `hint` of the contract says: str, int, bytes, Optional, Union,
    Tuple, List, Dict, Any, or an answer value (each field by its own annotation)."""
    if hint is Any:
        return
    if hint is None or hint is type(None):
        if value is not None:
            raise fail(what, value, "None")
        return
    origin = get_origin(hint)
    if origin is Union:
        for option in get_args(hint):
            try:
                conform(value, option, what)
                return
            except Malformed:
                continue
        raise fail(what, value, " or ".join(_type_name(a) for a in get_args(hint)))
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise fail(what, value, "a list")
        args = get_args(hint)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                raise fail(what, value, f"{len(args)} items")
            for i, (item, arg) in enumerate(zip(value, args)):
                conform(item, arg, f"{what}[{i}]")
        elif args and args[0] is not Any:
            for i, item in enumerate(value):
                conform(item, args[0], f"{what}[{i}]")
        return
    if origin is dict:
        if not isinstance(value, dict):
            raise fail(what, value, "a mapping")
        kt, vt = get_args(hint) or (Any, Any)
        for k, v in value.items():
            conform(k, kt, f"a key of {what}")
            conform(v, vt, f"{what}[{k!r}]")
        return
    if isinstance(hint, type) and is_dataclass(hint):
        if not isinstance(value, hint):
            raise fail(what, value, hint.__name__)
        hints = _hints(hint)
        for f in fields(hint):
            conform(getattr(value, f.name), hints[f.name], f"{what}.{f.name}")
        return
    if hint is float:
        number(value, what)
    elif hint is int:
        if type(value) is not int:
            raise fail(what, value, "a whole number")
    elif isinstance(hint, type) and not isinstance(value, hint):
        raise fail(what, value, _type_name(hint))


def _type_name(hint: Any) -> str:
    return "None" if hint is type(None) else getattr(hint, "__name__", str(hint))


@cache
def _hints(obj: Any) -> dict[str, Any]:
    return get_type_hints(obj)


def answer(method: str, value: Any) -> None:
    """An agent's answer to `method`, rebuilt by answer_from_wire: of the type the contract
    declares, with the ids, digests and paths in it as they must be."""
    declared = getattr(AgentContract, method, None)
    if declared is None:
        return  # not a method of the contract (the holder's park): nothing is declared
    fast = _FACTS.get(method)
    if fast is not None and fast[0]:  # checked whole, faster than item by item
        fast[1](value, f"the answer to {method}")
        return
    conform(value, _hints(declared).get("return", Any), f"the answer to {method}")
    if fast is not None:
        fast[1](value, f"the answer to {method}")


def _rows_of(pick: Callable[[Any], Any]) -> Callable[[Any, str], None]:
    return lambda value, what: rows(pick(value), what)


def _manifest_rows(value: Any, what: str) -> None:
    """A stored manifest's rows: its keys are file keys (host/filekeys.py), its modes and sizes a
    recorded file's (host/manifest_text.py), as the agent checked them when it parsed the manifest; an
    agent of another version or a hostile host may not have."""
    rows(value, what)
    problem = keys_problem(value) or values_problem(value)
    if problem:
        raise Malformed(f"{what}: {problem}")


def _dist_info(value: Any, what: str) -> None:
    if value is None:
        return
    absolute(value.site, f"{what}.site")
    name(value.dist_info, f"{what}.dist_info")
    for rel in value.record:
        relative(rel, f"a path of {what}.record", inside=False)
    for rel in (*value.tops, *value.loose):
        relative(rel, f"a path of {what}")


def _comparison(value: Any, what: str) -> None:
    keys(value.pairs, what)
    for old, new in value.pairs.values():
        for side in (old, new):
            if side is not None:
                digest(side[0], f"a digest of {what}")
    for k, standing in value.standing.items():
        if k not in value.pairs or value.pairs[k][1] is not None:
            raise fail(f"{what}.standing", k, "a key the comparison finds gone")
        text(standing, f"{what}.standing")


def _comparisons(value: Any, what: str) -> None:
    for comparison in value:
        _comparison(comparison, what)


def _tree(value: Any, what: str) -> None:
    _comparison(value.comparison, f"{what}.comparison")


def _paths(value: Any, what: str) -> None:
    for path in value:
        absolute(path, f"a path of {what}")


def _owner(value: Any, what: str) -> None:
    absolute(value.state_dir, f"{what}.state_dir")
    absolute(value.site, f"{what}.site")
    if value.owner is not None:
        absolute(value.owner, f"{what}.owner")


def _interpreter(value: Any, what: str) -> None:
    for field in ("prefix", "purelib", "platlib"):
        absolute(getattr(value, field), f"{what}.{field}")


def _changed(value: Any, what: str) -> None:
    for file in (*value.files, *value.identities, *value.gone, *value.untrusted):
        name(file, f"a file name of {what}")


def _algorithm(value: Any, what: str) -> None:
    if value not in ALGORITHMS:
        raise fail(what, value, " or ".join(ALGORITHMS))


def _store_put_files(value: Any, what: str) -> None:
    digests(list(value), what)
    digests(list(value.values()), what)


# method -> (whether the check covers the type too, the check)
_FACTS: dict[str, tuple[bool, Callable[[Any, str], None]]] = {
    "algorithm": (False, _algorithm),
    "interpreter": (False, _interpreter),
    "read_changed": (False, _changed),
    "dist_info": (False, _dist_info),
    "scan": (True, _rows_of(lambda v: v.rows)),
    "manifest_rows": (True, _manifest_rows),
    "compare_many": (False, _comparisons),
    "audit_tree": (False, _tree),
    "store_put": (False, lambda value, what: None if digest(value, what) else None),
    "store_missing": (False, lambda value, what: digests(value, what)),
    "store_put_files": (False, _store_put_files),
    "state_dir_owner": (False, _owner),
    "missing_dirs": (False, _paths),
    "remove_empty_dirs": (False, _paths),
}


def answer_from_wire(method: str, value: Any) -> Any:
    """A method's answer as the agent returned it, rebuilt from the plain data the wire carried and
    checked against the contract's types; Malformed if it is not one."""
    decode = ANSWERS.get(method)
    try:
        result = value if decode is None else decode(value)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise Malformed(f"{type(exc).__name__}: {exc}"[:200]) from None
    answer(method, result)
    return result
