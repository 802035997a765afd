"""An MCP server for flexrun's integration tests, on the official Python SDK (`mcp`, pinned to
1.30.0 in scripts/test: 2.x renamed FastMCP).

    python tests/mcp/server.py PORT

serves Streamable HTTP at http://127.0.0.1:PORT/mcp. Its tools are the cases flexrun's MCP client
has to handle: structured output (`add`), a tool error (`fail`; `refuse` quotes the caller's
credentials in its error), a destructive tool (`wipe`), calls that take time or never end on their
own (`slow`, `slow_once`, `hold`), output that breaks its own schema (`bad_output`), the caller's
bearer token (`auth_ok`), the tool list changing mid-session (`add_tool`, `remove_tool`),
elicitation (`ask`) and a result of any size (`big`). Only `add` and `bad_output` declare an output schema and answer
structuredContent; the others answer text content only (FastMCP would otherwise
give every tool a {"result": ...} schema).

Besides /mcp, plain HTTP routes for the test itself:
- GET /healthz: 200 "ok" once the server serves (readiness).
- GET /calls: every tool call so far, in order, as JSON: {"tool", "arguments", "meta"}, where meta
  is the request's `_meta` as the client sent it (null when it sent none).
- POST /release/{key}: ends the `hold` calls on `key`, and any later one at once.

State (calls, tools added or removed, keys seen) lives in this process: a test that needs a clean
server starts one. MCP_JSON_RESPONSE=1 answers requests with one JSON body instead of an SSE stream.

MCP_TOOL_PAGES=N (or `forever`) answers `tools/list` itself instead (tests/mcp/intercept.py): N
pages of 50 generated tools (`page{p}_{i}`, no arguments; they cannot be called), each but the
last with a `nextCursor`, or pages without end. The 501st tool listed is named `huge_` and
300,000 `x`: a name far beyond any bound flexrun has.
"""

import asyncio
import os
import sys
from typing import Annotated, Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from intercept import intercepting, send_json
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations

# Every tool call, in the order they arrived (before the tool runs, so calls that never end are in).
CALLS: list[dict[str, Any]] = []


class RecordingFastMCP(FastMCP):
    """FastMCP recording each tool call, whatever the tool (those added at run time, unknown ones)."""

    async def call_tool(self, name: str, arguments: dict[str, Any]):
        meta = self.get_context().request_context.meta
        # exclude_unset: the fields the client sent, not the model's defaults (progressToken: null).
        dumped = meta.model_dump(by_alias=True, exclude_unset=True) if meta is not None else None
        CALLS.append({"tool": name, "arguments": arguments, "meta": dumped})
        return await super().call_tool(name, arguments)


mcp = RecordingFastMCP("flexrun-test", host="127.0.0.1", port=int(sys.argv[1]))


class Sum(BaseModel):
    total: int


class Answer(BaseModel):
    answer: str


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True))
def add(a: int, b: int) -> Sum:
    """Adds two integers (structured output: {"total": a + b})."""
    return Sum(total=a + b)


@mcp.tool(annotations=ToolAnnotations(destructiveHint=False), structured_output=False)
def fail(reason: str) -> str:
    """Always fails: a result with isError true and `reason` in its text."""
    raise ToolError(reason)


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True), structured_output=False)
async def refuse(ctx: Context) -> str:
    """Always fails, quoting the request's Authorization and X-Team headers in its error, as a
    server that echoes its caller's credentials back does."""
    request = ctx.request_context.request
    headers = request.headers if request is not None else {}
    raise ToolError(f"not allowed: authorization={headers.get('authorization')} x-team={headers.get('x-team')}")


@mcp.tool(annotations=ToolAnnotations(destructiveHint=True), structured_output=False)
def wipe(target: str) -> str:
    """Pretends to wipe `target`."""
    return f"wiped {target}"


@mcp.tool(structured_output=False)
async def slow(seconds: float) -> str:
    """Answers "done" after `seconds`."""
    await asyncio.sleep(seconds)
    return "done"


SLOW_KEYS_SEEN: set[str] = set()


@mcp.tool(structured_output=False)
async def slow_once(key: str, seconds: float) -> str:
    """The first call for `key` answers "done" after `seconds`; later ones at once (a timeout,
    then a retry that succeeds)."""
    if key not in SLOW_KEYS_SEEN:
        SLOW_KEYS_SEEN.add(key)
        await asyncio.sleep(seconds)
    return "done"


RELEASES: dict[str, asyncio.Event] = {}


def release_event(key: str) -> asyncio.Event:
    return RELEASES.setdefault(key, asyncio.Event())


@mcp.tool(structured_output=False)
async def hold(key: str) -> str:
    """Answers "released {key}" once POST /release/{key} came (at once if it already did)."""
    await release_event(key).wait()
    return f"released {key}"


@mcp.tool()
def bad_output() -> Annotated[CallToolResult, Sum]:
    """Declares Sum's output schema ({"total": integer}) but answers {"total": "5"}, a string.

    FastMCP checks a returned CallToolResult against the model in pydantic's lax mode, where "5"
    passes as an integer, and then sends the result as it was returned: the schema check is left
    to the client."""
    return CallToolResult(
        content=[TextContent(type="text", text='{"total": "5"}')],
        structuredContent={"total": "5"},
    )


@mcp.tool(structured_output=False)
async def auth_ok(ctx: Context) -> bool:
    """Whether the request's Authorization header is "Bearer $MCP_EXPECTED_TOKEN" (false when that
    variable is unset or empty)."""
    expected = os.environ.get("MCP_EXPECTED_TOKEN")
    request = ctx.request_context.request
    if not expected or request is None:
        return False
    return request.headers.get("authorization") == f"Bearer {expected}"


@mcp.tool(structured_output=False)
async def add_tool(name: str, ctx: Context) -> str:
    """Adds a tool `name` (no arguments, answers "{name} ran"), then notifies tools/list_changed."""
    mcp.add_tool(lambda: f"{name} ran", name=name, description=f"{name}, added at run time")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@mcp.tool(structured_output=False)
async def remove_tool(name: str, ctx: Context) -> str:
    """Removes the tool `name` (an error when there is none), then notifies tools/list_changed."""
    mcp.remove_tool(name)
    await ctx.session.send_tool_list_changed()
    return f"removed {name}"


@mcp.tool(structured_output=False)
async def ask(question: str, ctx: Context) -> str:
    """Asks the client `question` (elicitation, schema {"answer": string}): the answer, or
    "declined" / "cancelled"."""
    result = await ctx.elicit(message=question, schema=Answer)
    if result.action == "accept":
        return result.data.answer
    return "declined" if result.action == "decline" else "cancelled"


@mcp.tool(structured_output=False)
def big(size: int) -> str:
    """Answers a text of `size` characters: "big-result-" repeated."""
    return ("big-result-" * (size // 11 + 1))[:size]


@mcp.custom_route("/healthz", methods=["GET"])
async def healthz(_request: Request) -> Response:
    return PlainTextResponse("ok")


@mcp.custom_route("/calls", methods=["GET"])
async def calls(_request: Request) -> Response:
    return JSONResponse(CALLS)


@mcp.custom_route("/release/{key}", methods=["POST"])
async def release(request: Request) -> Response:
    key = request.path_params["key"]
    release_event(key).set()
    return PlainTextResponse(f"released {key}")


TOOL_PAGE_SIZE = 50
HUGE_TOOL_AT = 500


def generated_tool(number: int) -> dict[str, Any]:
    page, index = divmod(number, TOOL_PAGE_SIZE)
    name = "huge_" + "x" * 300_000 if number == HUGE_TOOL_AT else f"page{page}_{index}"
    return {"name": name, "description": f"generated tool {number}", "inputSchema": {"type": "object"}}


def paged_tools(pages: str):
    """Answers `tools/list` with page after page of generated tools: `pages` of them, or without end
    (`forever`). The cursor is the number of the page it asks for."""

    async def answer(request: dict[str, Any], send) -> bool:
        if request.get("method") != "tools/list":
            return False
        cursor = (request.get("params") or {}).get("cursor")
        page = int(cursor) if cursor else 0
        first = page * TOOL_PAGE_SIZE
        result: dict[str, Any] = {"tools": [generated_tool(n) for n in range(first, first + TOOL_PAGE_SIZE)]}
        if pages == "forever" or page + 1 < int(pages):
            result["nextCursor"] = str(page + 1)
        await send_json(send, {"jsonrpc": "2.0", "id": request.get("id"), "result": result})
        return True

    return answer


if __name__ == "__main__":
    # MCP_EXTRA_TOOLS=N lists N more tools, `extra_0` … (a server with more than flexrun offers).
    for i in range(int(os.environ.get("MCP_EXTRA_TOOLS") or 0)):
        mcp.add_tool(lambda i=i: f"extra {i}", name=f"extra_{i}", description=f"extra tool {i}", structured_output=False)
    mcp.settings.json_response = os.environ.get("MCP_JSON_RESPONSE") == "1"
    pages = os.environ.get("MCP_TOOL_PAGES")
    if pages:
        import uvicorn

        app = intercepting(mcp.streamable_http_app(), paged_tools(pages))
        uvicorn.run(app, host=mcp.settings.host, port=mcp.settings.port, log_level=mcp.settings.log_level.lower())
    else:
        mcp.run(transport="streamable-http")
