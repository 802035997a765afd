"""A small MCP server written with the official Python SDK 2.x (`mcp==2.3.0`), which speaks the
2026-07-28 protocol revision (server/discover, no initialize) as well as the older ones.

Run as `python tests/mcp/server_modern.py PORT`; it serves Streamable HTTP at
http://127.0.0.1:PORT/mcp and GET /healthz (readiness). Tools:
- add(a, b) -> {"total": a + b} (outputSchema, structuredContent; read-only);
- add_tool(name): adds a tool `name` at run time and says the list changed, to legacy sessions and
  to 2026-07-28 `subscriptions/listen` streams.
"""

import sys

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

mcp = MCPServer("flexrun-test-modern")


class Sum(BaseModel):
    total: int


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def add(a: int, b: int) -> Sum:
    """Adds two integers."""
    return Sum(total=a + b)


@mcp.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Adds a tool named `name` that takes no argument, and says the tool list changed."""
    mcp.add_tool(lambda: f"{name} ran", name=name, description="added at run time")
    await ctx.session.send_tool_list_changed()
    await ctx.notify_tools_changed()
    return f"added {name}"


@mcp.custom_route("/healthz", methods=["GET"])
async def healthz(_request: Request) -> Response:
    return PlainTextResponse("ok")


if __name__ == "__main__":
    mcp.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
