"""The stored manifests' rows as an agent reads them: each parsed at most once while a command lasts.
Standard library only (shipped to hosts)."""

from __future__ import annotations

from .errors import AgentError
from .manifest_text import parse
from .store import Store

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Callable, Dict, Tuple

    from .answers import Rows

KEPT = 4  # manifests whose rows are kept while a command lasts
DAMAGED = "damaged-manifest"  # the AgentError kind of a stored manifest that cannot be read
DAMAGED_HINT = (
    "the state dir's record is damaged (or was tampered with); nothing was changed: put back its ledger "
    "from the workspace's copy (snapshots/<target>/ledger/), or move the state dir aside and record a new "
    "baseline"
)


class Manifests:
    """The rows of the manifests in the stores `stores` gives (root -> Store), each read at most once
    while this lasts (an agent makes a new one for each command: Agent.park). Parsing a manifest of
    the sglang package (5,800 rows) takes 3-13 ms: no cache between commands (issue 31)."""

    def __init__(self, stores: Callable[[str], Store]) -> None:
        self._stores = stores
        self._rows: Dict[Tuple[str, str], Rows] = {}

    def rows(self, store: str, digest: str) -> Rows:
        """A stored manifest's rows, read from the store (verified) and parsed; one whose lines or
        keys are not a manifest's (manifest_text.parse) is refused, naming it."""
        if (store, digest) not in self._rows:
            data = self._stores(store).get(digest)
            try:
                self._rows[(store, digest)] = parse(data)
            except ValueError as exc:
                raise AgentError(
                    DAMAGED,
                    "the manifest %s in the store %s is damaged: %s" % (digest, store, exc),
                    DAMAGED_HINT,
                ) from None
        rows = self._rows[(store, digest)]
        while len(self._rows) > KEPT:
            del self._rows[next(iter(self._rows))]
        return rows
