"""The stored manifests' rows as an agent reads them: each parsed at most once while a command lasts.
Standard library only (shipped to hosts)."""

from __future__ import annotations

from .manifest_text import parse
from .store import Store

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Callable, Dict, Tuple

    from .answers import Rows

KEPT = 4  # manifests whose rows are kept while a command lasts


class Manifests:
    """The rows of the manifests in the stores `stores` gives (root -> Store), each read at most once
    while this lasts (an agent makes a new one for each command: Agent.park). Parsing a manifest of
    the sglang package (5,800 rows) takes 3-13 ms: no cache between commands (issue 31)."""

    def __init__(self, stores: Callable[[str], Store]) -> None:
        self._stores = stores
        self._rows: Dict[Tuple[str, str], Rows] = {}

    def rows(self, store: str, digest: str) -> Rows:
        """A stored manifest's rows, read from the store (verified) and parsed."""
        if (store, digest) not in self._rows:
            self._rows[(store, digest)] = parse(self._stores(store).get(digest))
        rows = self._rows[(store, digest)]
        while len(self._rows) > KEPT:
            del self._rows[next(iter(self._rows))]
        return rows
