"""The stored manifests' rows as an agent reads them: each parsed once and cached beside the store
(manifest-cache/): whole (*.rows), as its changes over another one cached whole (*.over), and the
tree audit's plan of units (*.groups); every cache stamped with its format, the Python that wrote
it and the identity of the object it was read from, so it is never believed over that object.
Standard library only (shipped to hosts)."""

from __future__ import annotations

import os
import sys

from .disk import load_cache, save_cache
from .errors import AgentError
from .manifest_text import parse
from .store import Store
from . import treecheck

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Callable, Dict, List, Optional, Tuple

    from .contract import Rows

FORMAT = 2  # of *.rows (2: rows are tuples), *.over and *.groups
KEPT = 4  # manifests whose rows are kept while a command lasts


class Manifests:
    """The rows of the manifests in the stores `stores` gives (root -> Store), each read at most once
    while this lasts (an agent makes a new one for each command: Agent.park)."""

    def __init__(self, stores: Callable[[str], Store]) -> None:
        self._stores = stores
        self._rows: Dict[Tuple[str, str], Rows] = {}

    def rows(self, store: str, digest: str, over: bool = True) -> Rows:
        """A stored manifest's rows, from its cache when that is current (same format, same
        digest, the object's file unchanged), else parsed and cached again.

        A manifest that differs in a few rows from another one read already (a rollback reads the
        state it leaves and the one it goes to) is cached as those rows over the other's whole cache
        (`over`: one level at most), and read back as a copy of the other's rows with them."""
        if (store, digest) in self._rows:
            return self._rows[(store, digest)]
        objects = self._stores(store)
        ident = objects.identity(digest)
        path = _path(store, digest, ".rows")
        stamp = [FORMAT, list(sys.version_info[:2]), digest, ident]
        rows = load_cache(path, stamp) if ident is not None else None
        if rows is None and ident is not None and over:
            rows = self._over(store, digest, stamp)
        if rows is None:
            rows = parse(objects.get(digest))
            if ident is not None:
                self._cache(store, digest, stamp, rows)
        self._rows[(store, digest)] = rows
        while len(self._rows) > KEPT:
            del self._rows[next(iter(self._rows))]
        return rows  # type: ignore[no-any-return]

    def _over(self, store: str, digest: str, stamp: List[Any]) -> Optional[Rows]:
        """The rows a cache of changes over another manifest's rows gives, None without a usable one."""
        kept = load_cache(_path(store, digest, ".over"), stamp)
        if kept is None or not isinstance(kept.get("base"), str) or not isinstance(kept.get("changes"), dict):
            return None
        try:
            rows = dict(self.rows(store, kept["base"], over=False))
        except AgentError:  # the other manifest is gone, or damaged: this one is parsed instead
            return None
        for key, row in kept["changes"].items():
            if row is None:
                rows.pop(key, None)
            else:
                rows[key] = row
        return rows

    def _cache(self, store: str, digest: str, stamp: List[Any], rows: Rows) -> None:
        """Cache a manifest's rows whole, or as the few rows it changes over a manifest read here
        already and cached whole."""
        for (where, base), known in self._rows.items():
            if where != store or not os.path.exists(_path(store, base, ".rows")):
                continue
            differ = {k for k, _ in known.items() ^ rows.items()}
            if 8 * len(differ) < len(rows):
                save_cache(_path(store, digest, ".over"), stamp,
                           {"base": base, "changes": {k: rows.get(k) for k in differ}})
                return
        save_cache(_path(store, digest, ".rows"), stamp, rows)

    @staticmethod
    def groups(store: str, digest: str, rows: Rows, walk: Tuple[str, ...]) -> List[List[str]]:
        """The package's groups of directories for a tree audit (treecheck.groups), planned from a
        stored manifest's rows once and kept beside its cached rows: a plan only shares work out,
        and the manifest's digest names its rows whole."""
        path = _path(store, digest, ".groups")
        stamp = [FORMAT, list(sys.version_info[:2]), digest, list(walk), treecheck.PARTS]
        kept = load_cache(path, stamp)
        if kept is not None and isinstance(kept.get("groups"), list):
            return kept["groups"]  # type: ignore[no-any-return]
        groups = treecheck.groups(rows, walk)
        save_cache(path, stamp, {"groups": groups})
        return groups


def _path(store: str, digest: str, suffix: str) -> str:
    return os.path.join(os.path.dirname(store), "manifest-cache", digest.replace(":", "-") + suffix)
