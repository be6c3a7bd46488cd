"""An MCP client for the tests: the SDK's own client over stdio against `patchkeeper mcp` in a
subprocess, each tool call's error flag, its JSON document and its progress messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


@dataclass
class Agent:
    """A client session: each call's error flag, its JSON document and the progress messages it got."""

    session: ClientSession
    error_keys: set[str]  # the keys of the CLI's own error document (--json)
    progress: list[str] = field(default_factory=list)

    async def call(self, tool: str, **args: Any) -> tuple[bool, Any]:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            self.progress.append(message or "")

        result = await self.session.call_tool(tool, args, progress_callback=on_progress)
        (content,) = result.content
        assert isinstance(content, mcp_types.TextContent)
        return result.is_error, json.loads(content.text)

    async def ok(self, tool: str, **args: Any) -> Any:
        failed, doc = await self.call(tool, **args)
        assert not failed, doc
        return doc

    async def refused(self, tool: str, **args: Any) -> dict[str, str]:
        """A refusal: the CLI's error document; its error, {"message", "hint"}."""
        failed, doc = await self.call(tool, **args)
        assert failed, doc
        assert set(doc) == self.error_keys and doc["error"]["hint"], doc  # the CLI's error document
        return doc["error"]


def serve(
    root: Path,
    body: Callable[[Agent], Awaitable[None]],
    *options: str,
    errlog: Path,
    client: str = "test-agent",
) -> None:
    """Run `body` against `patchkeeper -w ROOT mcp OPTIONS` in a subprocess, over stdio."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "patchkeeper", "-w", str(root), "mcp", *options],
        env=dict(os.environ),
    )

    cli = subprocess.run(
        [sys.executable, "-m", "patchkeeper", "-w", str(root), "show", "nosuchset", "--json"],
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 2
    error_keys = set(json.loads(cli.stdout))

    async def main() -> None:
        with open(errlog, "a") as err:
            async with stdio_client(params, errlog=err) as (read, write):
                info = mcp_types.Implementation(name=client, version="1.0")
                async with ClientSession(read, write, client_info=info) as session:
                    await session.initialize()
                    await body(Agent(session, error_keys))

    anyio.run(main)
    assert "Traceback" not in errlog.read_text()
