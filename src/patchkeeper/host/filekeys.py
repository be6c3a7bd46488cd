"""The grammar of a file key: a path relative to the directory it is joined to (site-packages, a patch
set's directory) that stays below it, or a role file's `@ROLE`. One grammar for every place such a key
is read from a file or a host: a diff's paths and a patch set's files (names.py), a journal, and the
manifests of a state dir's store (manifest_text.parse), which a hostile or damaged state dir may hold.
Standard library only (shipped to hosts)."""

from __future__ import annotations

import re

from .contract import ROLE_PREFIX

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Iterable, Optional

MAX_COMPONENT = 255  # bytes of one path component (NAME_MAX)
MAX_PATH = 4096  # bytes of a whole path (PATH_MAX)
# a role name's control characters: printable.CONTROL's set (C0, DEL, C1, line and paragraph separators),
# which names.py refuses in a role a patch set names; written out here, since this module is shipped alone
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SEPARATORS = ("//", "/\0", "\0/", "\0\0")  # in keys joined by NUL: an empty key or part, an absolute key
ENV_PREFIX = "%"  # keys of files outside the package that a repair changed: a journal's, never a manifest's
_OPENINGS = (
    "/.",
    "\0.",
    "\0" + ROLE_PREFIX,
    "\0" + ENV_PREFIX,
)  # before a part opening with '.', a role, a %key


def path_problem(rel: object, what: str = "path") -> Optional[str]:
    """Why `rel` is not a plain relative path ('/' between components) that stays below the
    directory it is joined to, or None: not absolute, no empty, '.', '..' or `.git` component (git
    refuses that one too, in any case), no NUL or backslash, valid UTF-8, within NAME_MAX and PATH_MAX."""
    if not isinstance(rel, str) or not rel:
        return "%s %s is empty or not text" % (what, _shown(rel))
    try:
        size = len(rel.encode("utf-8"))
    except UnicodeEncodeError:
        return "%s %s is not UTF-8" % (what, _shown(rel))
    if "\0" in rel:
        return "%s %s holds a NUL byte" % (what, _shown(rel))
    if "\\" in rel:
        return "%s %s holds a backslash (a Windows path separator?)" % (what, _shown(rel))
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return "%s %s is not relative, or leaves its directory" % (what, _shown(rel))
    if any(p.lower() == ".git" for p in parts):
        return "%s %s has a .git component" % (what, _shown(rel))
    if size > MAX_PATH or any(len(p.encode("utf-8")) > MAX_COMPONENT for p in parts):
        return "%s %s is longer than a path may be (%d bytes a component)" % (
            what,
            _shown(rel),
            MAX_COMPONENT,
        )
    return None


def key_problem(key: object, what: str = "file key") -> Optional[str]:
    """Why `key` is not a manifest's key, or None: a path (path_problem), or `@ROLE` where ROLE is one
    plain name (the workspace maps it to the role file's path; the key itself is never a path). Not
    `%PATH`: repair's key of a file outside the package (a journal's, never a manifest's)."""
    if isinstance(key, str) and key.startswith(ROLE_PREFIX):
        role = key[len(ROLE_PREFIX) :]
        if "/" in role or role.startswith(".") or _CONTROL.search(role) or path_problem(role):
            return "%s %s is not a role (@ and one plain name)" % (what, _shown(key))
        return None
    if isinstance(key, str) and key.startswith(ENV_PREFIX):
        return "%s %s is a key of a file outside the package, which no manifest holds" % (what, _shown(key))
    return path_problem(key, what)


def keys_problem(keys: Iterable[str], what: str = "file key") -> Optional[str]:
    """The first problem of `keys` (key_problem), or None. A manifest of sglang has 10,000 keys: one by
    one they took 26 ms, about as long as parsing it; so the common case, ASCII paths, is screened in
    a few scans of them all, and only the keys with a part opening with '.' and the roles (a few dozen)
    are checked one by one."""
    keys = list(keys)
    joined = "\0".join(keys)
    plain = (
        joined.isascii()  # then a character is a byte, and no key holds a lone surrogate (not UTF-8)
        and joined.count("\0") == len(keys) - 1  # no key holds a NUL
        and "\\" not in joined
        and max(map(len, keys), default=0) <= MAX_COMPONENT  # then no part, nor the path, is too long
        and not joined.startswith(("/", "\0"))
        and not joined.endswith(("/", "\0"))
        and not any(s in joined for s in _SEPARATORS)
    )
    if not keys:
        return None
    if not plain or not joined:
        odd = keys
    else:
        odd = [keys[0]] if joined[:1] in (".", ROLE_PREFIX, ENV_PREFIX) else []
        for opening in _OPENINGS:
            at = joined.find(opening)
            while at >= 0:
                start = joined.rfind("\0", 0, at + 1) + 1
                end = joined.find("\0", at + 1)
                odd.append(joined[start : end if end >= 0 else len(joined)])
                at = joined.find(opening, at + 1)
    for key in odd:
        problem = key_problem(key, what)
        if problem:
            return problem
    return None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
