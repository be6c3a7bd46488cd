"""`patchkeeper mcp` on the command line: the MCP server for AI agents (docs/agents.md)."""

from __future__ import annotations

import click

from ..mcpserver import server as mcp_server
from ..options import command, workspace_of


@click.command("mcp")
@click.option("--read-only", is_flag=True, help="serve only the reading tools: no plan, no apply_plan")
@click.pass_context
@command
def mcp_cmd(ctx: click.Context, read_only: bool) -> int:
    """Serve this workspace to an AI agent: an MCP server over stdin and stdout (docs/agents.md).

    Needs the optional extra: pip install 'patchkeeper[mcp]'. Tools return the verbs' --json
    documents; a change runs only through `plan` then `apply_plan` of a fresh plan.
    """
    ws = workspace_of(ctx)
    group = ctx.find_root().command
    assert isinstance(group, click.Group)
    inventory = ctx.obj.get("inventory")
    base = [f"--workspace={ws.root}"] + ([f"--inventory={inventory}"] if inventory else [])
    return mcp_server.serve(mcp_server.Served(group, base, lambda: workspace_of(ctx), read_only))
