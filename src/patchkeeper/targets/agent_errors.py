"""What an agent's error documents stand for, raised again in the controller (remote_agent.AgentProxy)."""

from __future__ import annotations

from typing import Any

from ..errors import AgentError, TargetError
from ..host.manifests import DAMAGED, DAMAGED_HINT


def _quoted(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _exception(doc: Any, target: str, method: str) -> Exception:
    """The exception an error document from the agent stands for (wire.error_doc)."""
    doc = doc if isinstance(doc, dict) else {}
    kind, message = str(doc.get("type", "?")), str(doc.get("message", "?"))
    if kind == "FileNotFoundError":
        errno, filename = doc.get("errno"), doc.get("filename")
        return FileNotFoundError(
            errno if type(errno) is int else 2,
            str(doc.get("strerror") or message),
            filename if isinstance(filename, str) else None,
        )
    if kind == "AgentError" and isinstance(doc.get("kind"), str):
        if doc["kind"] == DAMAGED:  # the hint is ours, naming the target, not the one the host wrote
            return AgentError(DAMAGED, message.partition("\n")[0], DAMAGED_HINT.replace("<target>", target))
        return AgentError(doc["kind"], message)
    trace = doc.get("trace")
    detail = (trace.strip().splitlines()[-1:] if isinstance(trace, str) else []) or [f"{kind}: {message}"]
    return TargetError(
        f"target {target}: {method} failed on the host: {detail[0]}",
        "check the path and permissions on the host",
    )
