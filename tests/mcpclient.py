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


class Wire:
    """`patchkeeper -w ROOT mcp` in a subprocess spoken to line by line, bytes on its stdin: what a
    client's SDK would never send (a line that is not JSON, a line of 100 MB) can be sent."""

    def __init__(self, root: Path, *options: str, errlog: Path) -> None:
        self.errlog = errlog
        with open(errlog, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "patchkeeper", "-w", str(root), "mcp", *options],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        self.ids = 0
        init = self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "wire", "version": "1"},
            },
        )
        assert init["result"]["serverInfo"]["name"] == "patchkeeper", init
        self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def answer(self) -> Any:
        """The next line the server writes, as JSON (one answer: the server writes nothing unasked here)."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.endswith(b"\n"), f"the server ended: {self.errlog.read_text()[-2000:]}"
        return json.loads(line)

    def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.ids += 1
        message = {"jsonrpc": "2.0", "id": self.ids, "method": method}
        self.send(json.dumps(message | ({"params": params} if params is not None else {})).encode() + b"\n")
        answer = self.answer()
        assert answer["id"] == self.ids, answer
        return answer

    def peak_memory(self) -> int:
        """The server's peak resident set so far (VmHWM), in bytes."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        (kib,) = [line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")]
        return int(kib) * 1024

    def close(self) -> int:
        """Close stdin, as a client does at the end; the server's exit code."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        rest = self.proc.stdout.read()
        code = self.proc.wait()
        assert rest == b"", rest
        assert "Traceback" not in self.errlog.read_text()
        return code
