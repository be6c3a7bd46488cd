"""Where the managed files stand once pip, uv or a person changed the package's installation: told in one line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..records.installation import Change
from ..records.ledger import Ledger
from ..targets import Target
from .scan import compare


@dataclass(frozen=True)
class Told:
    """A change of the installation as reading commands tell it: one line, and whether the state no
    longer holds (status, audit and diff then exit 1). A reinstall that left every managed file as
    the state recorded it is told, but the state still holds."""

    change: Change
    line: str
    trouble: bool
    released: tuple[str, ...] = ()  # the keys the state changed that are back to the release's bytes

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.change.kind, "what": self.line, "state": self.change.state.id,
                "then": self.change.then.to_dict(), "now": self.change.now.to_dict(),
                "trouble": self.trouble, "released": list(self.released)}


def told(target: Target, ledger: Ledger, change: Change | None) -> Told | None:
    """`tell`, where the installation changed (None where it is as the current state recorded it)."""
    return tell(target, ledger, change) if change is not None else None


def tell(target: Target, ledger: Ledger, change: Change) -> Told:
    """`change` with where the managed files stand: compared on the target with the current state and
    the baseline (one scan), the files the state changed from the baseline (the patch sets' files,
    and any hand edit a snapshot recorded) that are back to the baseline's, the release's, bytes."""
    current, base = change.state, ledger.baseline()
    if change.kind == "version" or base is None or base.manifest == current.manifest:
        differ, = compare(target, current.manifest)
        files = (f"{len(differ)} managed file(s) differ from the state" if differ else
                 "its files match the state")
        if change.kind == "version" and differ:
            files += f" (they are {change.now.version}'s)"
        return Told(change, f"{change.what()}; {files}", change.kind != "reinstalled" or bool(differ))
    to_current, to_base = compare(target, current.manifest, base.manifest)
    rows_now, rows_base = ledger.load_manifest(current), ledger.load_manifest(base)
    changed = sorted(k for k in rows_now.keys() | rows_base.keys() if rows_now.get(k) != rows_base.get(k))
    released = tuple(k for k in changed if k in to_current and k not in to_base)
    what = current.stack_text() if current.stack else "the state"
    if released:
        files = f"{len(released)} of the {len(changed)} files {what} changes are back to the release's bytes"
    elif to_current:
        files = f"{len(to_current)} managed file(s) differ from the state"
    else:
        files = "its files match the state"
    return Told(change, f"{change.what()}; {files}", change.kind != "reinstalled" or bool(to_current), released)

