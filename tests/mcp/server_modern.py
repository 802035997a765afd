"""A small MCP server written with the official Python SDK 2.x (`mcp==2.3.0`), which speaks the
2026-07-28 protocol revision (server/discover, no initialize) as well as the older ones.

Run as `python tests/mcp/server_modern.py PORT`; it serves Streamable HTTP at
http://127.0.0.1:PORT/mcp and GET /healthz (readiness). Tools:
- add(a, b) -> {"total": a + b} (outputSchema, structuredContent; read-only);
- add_tool(name): adds a tool `name` at run time and says the list changed, to legacy sessions and
  to 2026-07-28 `subscriptions/listen` streams;
- confirm_order(item, quantity) -> {"item", "quantity", "warehouse"} (outputSchema): asks the user
  (form elicitation, `Ship {quantity} x {item}? Which warehouse?`, one required string `warehouse`);
  on 2026-07-28 as an input_required result answered by a retried tools/call (MRTR), on older
  revisions as an `elicitation/create` request; declined or cancelled -> isError;
- big(size) -> a text of `size` characters ("big-result-" repeated).
GET /calls lists the confirm_order calls: {"tool", "stage": "entered"} for each tools/call that
reached it (each MRTR round), {"tool", "stage": "finished"} when one finished with an answer; and
the big calls: {"tool": "big", "stage": "entered"}.
POST /listen/silence: from then on the server answers `subscriptions/listen` with 200 and an
event stream that never says anything — no acknowledgement — and stays open (tests/mcp/intercept.py).
"""

import asyncio
import sys
from typing import Annotated, Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from intercept import intercepting
from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, ElicitationResult, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

mcp = MCPServer("flexrun-test-modern")
# Every tools/call that reached confirm_order ("entered", each MRTR round) and every one that
# finished with an answer ("finished"), and every big call, in order.
CALLS: list[dict[str, str]] = []


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


class Warehouse(BaseModel):
    warehouse: str


class Order(BaseModel):
    item: str
    quantity: int
    warehouse: str


async def ask_warehouse(item: str, quantity: int) -> Elicit[Warehouse]:
    """Runs on every round of a confirm_order call (so it records them) and asks the user."""
    CALLS.append({"tool": "confirm_order", "stage": "entered"})
    return Elicit(f"Ship {quantity} x {item}? Which warehouse?", Warehouse)


@mcp.tool()
def confirm_order(
    item: str, quantity: int, answer: Annotated[ElicitationResult[Warehouse], Resolve(ask_warehouse)]
) -> Order:
    """Asks the user to confirm an order and pick its warehouse."""
    if not isinstance(answer, AcceptedElicitation):
        raise ToolError(f"order not confirmed (the user chose {answer.action})")
    CALLS.append({"tool": "confirm_order", "stage": "finished"})
    return Order(item=item, quantity=quantity, warehouse=answer.data.warehouse)


@mcp.tool()
def big(size: int) -> str:
    """Answers a text of `size` characters."""
    CALLS.append({"tool": "big", "stage": "entered"})
    return ("big-result-" * (size // 11 + 1))[:size]


@mcp.custom_route("/calls", methods=["GET"])
async def call_counts(_request: Request) -> Response:
    return JSONResponse(CALLS)


@mcp.custom_route("/healthz", methods=["GET"])
async def healthz(_request: Request) -> Response:
    return PlainTextResponse("ok")


SILENT_LISTEN = asyncio.Event()


@mcp.custom_route("/listen/silence", methods=["POST"])
async def silence(_request: Request) -> Response:
    SILENT_LISTEN.set()
    return PlainTextResponse("silenced")


async def silent_listen(request: dict[str, Any], send) -> bool:
    """Once silenced, answers `subscriptions/listen` with an event stream that stays open and
    silent (a comment first, so that the client has the answer's headers)."""
    if request.get("method") != "subscriptions/listen" or not SILENT_LISTEN.is_set():
        return False
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b": listening\n\n", "more_body": True})
    await asyncio.Event().wait()
    return True


if __name__ == "__main__":
    import uvicorn

    host = "127.0.0.1"
    app = intercepting(mcp.streamable_http_app(host=host), silent_listen)
    uvicorn.run(app, host=host, port=int(sys.argv[1]), log_level=mcp.settings.log_level.lower())
