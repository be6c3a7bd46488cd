"""What systemd's unit loader sees in its directories, in one call: each directory's canonical path and its
entries (kind, what a symlink leads to, size), without opening any of them (a FIFO would block). Stdlib only."""

from __future__ import annotations

import os
import stat
from typing import Any, Dict, List, Optional


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISCHR(mode):
        return "char"
    return "other"


def _in_path_cache(directory: str) -> bool:
    """Whether a running manager's unit path cache holds `directory`, an entry of a search directory
    (src/shared/unit-file.c, unit_file_build_name_map; systemd 252): a symlink is kept only when its text,
    as a path from the manager's working directory `/`, is a directory; a relative symlink is thus read
    from `/`, not from where it lies, and its drop-ins are never looked for (tests/unitcorpus.py)."""
    try:
        text = os.readlink(directory)
    except OSError:
        return True  # not a symlink: a directory is kept
    return os.path.isdir(os.path.join("/", text))


def dir_entries(dirs: List[str], suffixes: List[str]) -> Dict[str, Optional[Dict[str, Any]]]:
    """For each directory: None when it is missing or unreadable, else {"real": its canonical path,
    "entries": [[name, kind, kind of what it leads to, where it leads (canonical), size of that], ...]} for
    the entries whose names end with one of `suffixes` (every entry when none is given), in name order,
    and "cached": whether, as an entry of a search directory, the manager's path cache would hold it."""
    out: Dict[str, Optional[Dict[str, Any]]] = {}
    for directory in dirs:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            out[directory] = None
            continue
        entries: List[List[Any]] = []
        for name in names:
            if suffixes and not any(name.endswith(s) for s in suffixes):
                continue
            path = os.path.join(directory, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            kind = _kind(st.st_mode)
            final, real, size = kind, path, st.st_size
            if kind == "link":
                real = os.path.realpath(path)
                try:
                    target = os.stat(path)
                    final, size = _kind(target.st_mode), target.st_size
                except OSError:
                    final, size = "missing", 0
            entries.append([name, kind, final, real, size])
        out[directory] = {
            "real": os.path.realpath(directory),
            "entries": entries,
            "cached": _in_path_cache(directory),
        }
    return out
