"""The MCP server over stdio (the official `mcp` SDK, the optional extra `patchkeeper[mcp]`): tools
run the verbs and return their --json documents, resources are the patch sets' files and each
target's ledger, changes go through plans (plans.py)."""

from __future__ import annotations

import mimetypes
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .. import __version__
from ..change.session import READ_ONLY
from ..errors import BadInput, PatchkeeperError
from ..patchset import patchset
from ..printable import one_line
from ..workspace import Workspace
from . import plans, tools, verbs, wire

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

NAME = "patchkeeper"
URI = "patchkeeper://"
MAX_CLIENT_NAME = 100


@dataclass(frozen=True)
class Served:
    """What one server serves: the CLI's verbs, one workspace, and whether it may change targets."""

    group: click.Group
    base: list[str]  # --workspace=ROOT, and --inventory=FILE when the server was given one
    load: Callable[[], Workspace]
    read_only: bool


def resources(ws: Workspace) -> dict[str, Path | str]:
    """uri -> a patch set's file (patchset.toml, its diffs, its role files) or a target's name (its ledger).
    A resource is read only when its uri is one of these: no uri becomes a path."""
    found: dict[str, Path | str] = {}
    for name in patchset.names(ws.patchsets_dir):
        folder = ws.patchsets_dir / name
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
            found[f"{URI}patchsets/{name}/{path.relative_to(folder).as_posix()}"] = path
    for target in sorted(ws.targets):
        found[f"{URI}ledger/{target}"] = target
    return found


def call(
    served: Served,
    session: plans.Plans,
    name: str,
    args: dict[str, Any],
    on_line: plans.OnLine,
    client: str | None,
) -> verbs.Outcome:
    """One tool call, in a worker thread: a document, or the error document of a refusal."""
    try:
        tool = tools.find(name, served.read_only)
        tools.check_arguments(tool, args)
        if served.read_only and args.get("restart"):
            raise BadInput(
                "verify with restart restarts the service, and this server is read-only",
                "call verify without restart",
            )
        if tool.name == "plan":
            return session.plan(args, on_line)
        if tool.name == "apply_plan":
            return session.apply(args["plan_id"], on_line, client)
        assert tool.words is not None
        return verbs.run(served.group, served.base, tool.words(served.load(), args), on_line, client)
    except PatchkeeperError as exc:
        return verbs.Outcome(exc.exit_code, verbs.error_doc(exc.message, exc.hint, exc.exit_code))
    except OSError as exc:
        return verbs.Outcome(2, verbs.error_doc(f"{exc.strerror or exc}", "call the tool again"))
    except Exception as exc:  # a bug: one line for the agent and the log, never a traceback
        line = one_line(f"internal error in {name[:60]}: {type(exc).__name__}: {str(exc)[:400]}")
        print(f"patchkeeper mcp: {line}", file=sys.stderr)
        return verbs.Outcome(2, verbs.error_doc(line, "report it with the tool call that caused it"))


def serve(served: Served) -> int:
    """Serve MCP on stdin and stdout until the client closes them."""
    try:
        import anyio  # lazy: the extra [mcp]
        import mcp.server.lowlevel  # noqa: F401  # lazy: the extra [mcp]
    except ImportError as exc:
        raise BadInput(
            f"patchkeeper mcp needs the MCP SDK, which is not installed here (no module {exc.name!r})",
            "pip install 'patchkeeper[mcp]' (or pip install mcp) into patchkeeper's environment",
        ) from None
    if served.read_only:  # no session of this process, nor of a worker it starts, finishes or undoes a
        os.environ[READ_ONLY] = "1"  # transaction it finds: a reading tool refuses, naming it
    anyio.run(_run, served)
    return 0


async def _run(served: Served) -> None:
    import anyio  # lazy: the extra [mcp]
    import anyio.from_thread  # lazy: the extra [mcp]
    import anyio.to_thread  # lazy: the extra [mcp]
    import mcp_types as types  # lazy: the extra [mcp]
    from mcp.server.lowlevel import Server  # lazy: the extra [mcp]

    session = plans.Plans(served.group, served.base, served.load)
    one_at_a_time = anyio.Lock()  # the verbs share the process's stdout, stderr and ORIGIN

    async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t.name,
                    description=t.description,
                    input_schema=t.schema(),
                    annotations=types.ToolAnnotations(
                        read_only_hint=t.reads and t.name != "verify",
                        destructive_hint=t.name == "apply_plan",
                        open_world_hint=False,
                    ),
                )
                for t in tools.served(served.read_only)
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        client_params = ctx.session.client_params
        client = client_params.client_info.name[:MAX_CLIENT_NAME] if client_params else None
        lines = 0

        def on_line(line: str) -> None:  # in the worker thread: each line of progress, as it comes
            nonlocal lines
            lines += 1
            try:
                anyio.from_thread.run(ctx.session.report_progress, lines, None, one_line(line))
            except Exception:  # noqa: BLE001 the client left: the call goes on to its end
                pass

        async with one_at_a_time:
            out = await anyio.to_thread.run_sync(
                call, served, session, params.name, dict(params.arguments or {}), on_line, client
            )
        return types.CallToolResult(content=[types.TextContent(text=out.text)], is_error=out.failed)

    async def list_resources(ctx: ServerRequestContext[Any], params: Any) -> types.ListResourcesResult:
        found = await anyio.to_thread.run_sync(resources, served.load())
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=uri,
                    name=uri.removeprefix(URI),
                    mime_type=_mime(where) if isinstance(where, Path) else "application/json",
                    description=None
                    if isinstance(where, Path)
                    else f"the ledger of target {where} (log --json)",
                )
                for uri, where in found.items()
            ]
        )

    async def read_resource(
        ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        from mcp.shared.exceptions import MCPError  # lazy: the extra [mcp]

        found = await anyio.to_thread.run_sync(resources, served.load())
        where = found.get(str(params.uri))
        if where is None:
            raise MCPError(
                types.INVALID_PARAMS, f"no resource {str(params.uri)[:200]!r}: resources/list names them"
            )
        if isinstance(where, Path):
            text = where.read_bytes().decode("utf-8", "replace")
            mime = _mime(where)
        else:
            async with one_at_a_time:
                out = await anyio.to_thread.run_sync(
                    verbs.run, served.group, served.base, ["log", "--json", f"--target={where}"]
                )
            text, mime = out.text, "application/json"
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=str(params.uri), text=text, mime_type=mime)]
        )

    server: Server[Any] = Server(
        NAME,
        version=__version__,
        instructions=(
            "patchkeeper: versioned patch sets over an installed Python package. Read with list, show, "
            "status, audit, diff, log, check, verify. Change a target only with plan, then apply_plan "
            "with the plan's id; a stale plan is refused."
            + (" This server is read-only." if served.read_only else "")
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )
    async with wire.stdio() as (read_stream, write_stream):  # not the SDK's stdio_server: wire.py says why
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _mime(path: Path) -> str:
    if path.name.endswith((".diff", ".patch")):
        return "text/x-diff"
    if path.suffix == ".toml":
        return "application/toml"
    return mimetypes.guess_type(path.name)[0] or "text/plain"
