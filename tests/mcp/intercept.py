"""An ASGI middleware for the test MCP servers (tests/mcp/server.py, server_modern.py): it answers
chosen JSON-RPC requests itself, to play a server that misbehaves in one way while a real SDK
server answers everything else.

    app = intercepting(app, answer)

`answer(request, send)` is awaited with every JSON-RPC message POSTed to the app (parsed) and the
ASGI `send`; it returns True when it answered the request itself, False to let the app answer.
"""

import json
from typing import Any, Awaitable, Callable

Answer = Callable[[dict[str, Any], Callable[..., Awaitable[None]]], Awaitable[bool]]


def intercepting(app, answer: Answer):
    """`app`, with POSTed JSON-RPC requests offered to `answer` first."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        body = await read_body(receive)
        try:
            message = json.loads(body)
        except ValueError:
            message = None
        if isinstance(message, dict) and await answer(message, send):
            return None
        return await app(scope, replaying(body, receive), send)

    return wrapped


async def read_body(receive) -> bytes:
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body", False):
            return body


def replaying(body: bytes, receive):
    """A `receive` that gives `body` once, then what the client sends next (its disconnect)."""
    given = False

    async def replay():
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def send_json(send, value: Any) -> None:
    """Answers 200 with `value` as one JSON body."""
    body = json.dumps(value).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
