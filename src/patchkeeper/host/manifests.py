"""The stored manifests' rows as an agent reads them: each parsed once and cached beside the store
(manifest-cache/*.rows), stamped with its format, the Python that wrote it and the identity of the
object it was read from, so it is never believed over that object.
Standard library only (shipped to hosts)."""

from __future__ import annotations

import os
import sys

from .manifest_text import parse
from .statcache import load_cache, save_cache
from .store import Store

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Callable, Dict, Tuple

    from .contract import Rows

FORMAT = 3  # of *.rows (2: rows are tuples; 3: the object's identity with its device)
KEPT = 4  # manifests whose rows are kept while a command lasts


class Manifests:
    """The rows of the manifests in the stores `stores` gives (root -> Store), each read at most once
    while this lasts (an agent makes a new one for each command: Agent.park)."""

    def __init__(self, stores: Callable[[str], Store]) -> None:
        self._stores = stores
        self._rows: Dict[Tuple[str, str], Rows] = {}

    def rows(self, store: str, digest: str) -> Rows:
        """A stored manifest's rows, from its cache when that is current (same format, same
        digest, the object's file unchanged), else parsed and cached again."""
        if (store, digest) in self._rows:
            return self._rows[(store, digest)]
        objects = self._stores(store)
        ident = objects.identity(digest)
        path = _path(store, digest, ".rows")
        stamp = [FORMAT, list(sys.version_info[:2]), digest, ident]
        rows = load_cache(path, stamp) if ident is not None else None
        if rows is None:
            rows = parse(objects.get(digest))
            if ident is not None:
                save_cache(path, stamp, rows)
        self._rows[(store, digest)] = rows
        while len(self._rows) > KEPT:
            del self._rows[next(iter(self._rows))]
        return rows


def _path(store: str, digest: str, suffix: str) -> str:
    return os.path.join(os.path.dirname(store), "manifest-cache", digest.replace(":", "-") + suffix)
