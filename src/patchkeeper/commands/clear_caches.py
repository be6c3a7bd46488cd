"""`patchkeeper clear-caches`: delete every cache kept for the chosen targets, and this user's cache."""

from __future__ import annotations

import os
import posixpath
import shutil
from typing import Any

from ..host.contract import AgentContract
from ..host.statcache import user_cache
from ..targets import open_target
from ..workspace import Workspace
from . import json_answer

# The caches of a target's state dir (docs/files-and-caches.md): everything else there is a record.
# manifest-cache/ and pack-cache/ are left by versions before issue 31, which kept them.
STATE_CACHES = (
    "statcache.json",
    "statcache.json.dirs",
    "statcache.json.sha256",
    "audit",
    "env",
    "manifest-cache",
    "pack-cache",
)


def clear_caches(
    ws: Workspace, names: tuple[str, ...], group: str | None, every: bool, as_json: bool = False
) -> int:
    """Each chosen target's state-dir caches (the default target's when none is chosen), then the user
    cache; one line each (--json: {"targets": {name: {"state_dir", "removed"}}, "user_cache": {"path",
    "removed"}}). The next command that needs a cache writes it again."""
    with json_answer(as_json) as doc:
        _clear(ws, names, group, every, doc)
    return 0


def _clear(
    ws: Workspace, names: tuple[str, ...], group: str | None, every: bool, doc: dict[str, Any]
) -> None:
    doc["targets"] = {}
    configs = (
        list(ws.select(names, group, every).targets.values())
        if names or group or every
        else [ws.target(None)]
    )
    for config in configs:
        target = open_target(config)
        try:
            state_dir = target.info.state_dir
            files, dirs = _cache_files(target.agent, state_dir)
            for path in files:
                target.agent.unlink(path, durable=False)
            target.agent.sync_dirs(files)
            target.agent.remove_empty_dirs(dirs)
        finally:
            target.close()
        doc["targets"][config.name] = {"state_dir": state_dir, "removed": len(files)}
        print(f"{config.name}: removed {len(files)} cache file(s) from {state_dir}")
    root = user_cache("")
    count = sum(len(names) for _, _, names in os.walk(root))
    shutil.rmtree(root, ignore_errors=True)
    doc["user_cache"] = {"path": root.rstrip("/"), "removed": count}
    print(f"removed {count} cache file(s) from {root.rstrip('/')}")


def _cache_files(agent: AgentContract, state_dir: str) -> tuple[list[str], list[str]]:
    """The files below the state dir's caches, and their directories (deepest last)."""
    files: list[str] = []
    dirs: list[str] = []
    pending = [posixpath.join(state_dir, name) for name in STATE_CACHES]
    while pending:
        path = pending.pop()
        found = agent.lstat(path)
        if found is None:
            continue
        if found.is_dir:
            dirs.append(path)
            pending += [posixpath.join(path, name) for name in agent.listdir(path)]
        else:
            files.append(path)
    return files, dirs
