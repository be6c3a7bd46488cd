"""`patchkeeper disconnect`: end held SSH connections (one target's, or every one of this user's)."""

from __future__ import annotations

from ..errors import BadInput
from ..targets import persist
from ..workspace import Workspace


def disconnect(ws: Workspace | None, target: str | None, every: bool) -> int:
    if every:
        count = persist.stop_all()
        print(f"ended {count} held connection(s)" if count else "no held connections")
        return 0
    assert ws is not None, "a workspace names the target"
    config = ws.target(target)
    if not config.ssh:
        raise BadInput(
            f"target {config.name} is local: there is no connection to end",
            "name an SSH target, or use --all",
        )
    try:
        holder = persist.Holder(config.name, config.ssh, config.python, config.persist, config.identity_file)
    except persist.Unavailable:
        print(f"{config.name}: no held connection")
        return 0
    print(f"{config.name}: connection ended" if holder.stop() else f"{config.name}: no held connection")
    return 0
