"""Shell completion of names (patch sets, targets, states): read from the workspace only, never a
target, never SSH; a failure completes nothing rather than printing into the user's shell."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from . import workspace
from .patchset import layout


def _completion_workspace(ctx: Any) -> workspace.Workspace:
    root = ctx.find_root().params.get("workspace")
    return workspace.load(workspace.find(root))


def _completing(names: Callable[[Any], Iterable[str]]) -> Callable[[Any, Any, str], list[str]]:
    """A click shell_complete function over the names `names(ctx)` gives; none when that fails."""

    def complete(ctx: Any, param: Any, incomplete: str) -> list[str]:
        try:
            return [n for n in names(ctx) if n.startswith(incomplete)]
        except Exception:  # completion never prints errors into the user's shell
            return []

    return complete


def _patchset_names(ctx: Any) -> list[str]:
    return layout.names(_completion_workspace(ctx).patchsets_dir)


def _target_names(ctx: Any) -> list[str]:
    return sorted(_completion_workspace(ctx).targets)


def _state_names(ctx: Any) -> list[str]:
    """baseline, previous, and the names and ids of the states in the workspace's copy of the ledger."""

    ws = _completion_workspace(ctx)
    given = ctx.params.get("target") or ctx.params.get("targets_")  # -t once, or repeated: the first
    target = (given if isinstance(given, str) else given[0] if given else None) or ws.default_target
    names, ids = ["baseline", "previous"], []
    for path in sorted((ws.snapshots_dir / str(target) / "ledger").glob("*.json")):
        after = json.loads(path.read_text()).get("after") or {}
        if after.get("name"):
            names.append(after["name"])
        ids.append(after.get("id", ""))
    return list(dict.fromkeys(names + [i for i in ids if i]))


complete_patchsets = _completing(_patchset_names)
complete_targets = _completing(_target_names)
complete_states = _completing(_state_names)
