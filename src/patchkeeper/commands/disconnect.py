"""`patchkeeper disconnect`: end held SSH connections (one target's, or every one of this user's)."""

from __future__ import annotations

from ..errors import BadInput
from ..targets import persist
from ..workspace import Workspace
from . import json_answer


def disconnect(ws: Workspace | None, target: str | None, every: bool, as_json: bool = False) -> int:
    """End a target's held connection (or every one of this user's); with --json: {"target" (null with
    --all), "ended"}: how many held connections were ended (null: the controller did not answer and was
    stopped, so how many it held is not known)."""
    with json_answer(as_json) as doc:
        doc["ended"] = _disconnect(ws, target, every, doc)
    return 0


def _disconnect(ws: Workspace | None, target: str | None, every: bool, doc: dict[str, object]) -> int | None:
    doc["target"] = None
    if every:
        count = persist.stop_all()
        if count is None:  # never "no held connections" over a controller that held some
            print("ended the held connections: their controller did not answer in time and was stopped")
        else:
            print(f"ended {count} held connection(s)" if count else "no held connections")
        return count
    assert ws is not None, "a workspace names the target"
    config = ws.target(target)
    doc["target"] = config.name
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
    ended = holder.stop()
    print(f"{config.name}: connection ended" if ended else f"{config.name}: no held connection")
    return int(ended)
