"""The client of `cargo bench --bench langgraph_wire`: one batch of runs over one wire.

Started by benches/langgraph_wire.rs (which installs httpx and sniffio into a venv of their
own), once per batch:

    python langgraph_wire.py BASE_URL WIRE RUNS CONCURRENCY ENVELOPE_FILE STREAM_MODES [START]

WIRE is `native` (`POST /api/v1/flex/run.stream`, read to its end) or `langgraph` (`POST
/threads`, then `POST /threads/{tid}/runs/stream` in STREAM_MODES, comma-separated, read to its
end). START `create` makes the LangGraph run its thread in the same request instead (a thread id
of the client's, `if_not_exists: create`); `thread`, the default, posts the thread first.
CONCURRENCY clients (asyncio tasks, each with its own httpx client and connection, opened before
the clock starts) take runs until RUNS are done. Every event's data is decoded as JSON, as a
client would, and every run must end completed: anything else exits non-zero, saying what it
got. Prints one JSON line: runs,
seconds (wall time of the batch), events, bytes, and this process's CPU seconds over the batch.
"""

import asyncio
import json
import sys
import time
import uuid

import httpx

JSON = {"content-type": "application/json"}


class Failure(Exception):
    pass


async def events(response):
    """The SSE events of `response` as (event, data) pairs; comments are skipped."""
    event, data = None, []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield event, "\n".join(data)
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
    if data:
        yield event, "\n".join(data)


async def read_stream(client, path, body):
    """Posts `body` to `path` and reads its SSE stream to the end: (events, bytes, last event,
    the event before it)."""
    count, size, last, before = 0, 0, None, None
    async with client.stream("POST", path, content=body, headers=JSON) as response:
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")[:500]
            raise Failure(f"POST {path}: {response.status_code} {text}")
        async for event, data in events(response):
            count += 1
            size += len(data)
            last, before = (event, json.loads(data)), last
    if last is None:
        raise Failure(f"POST {path}: the stream had no event")
    return count, size, last, before


async def native(client, envelope, modes, start):
    count, size, (event, data), _ = await read_stream(client, "/api/v1/flex/run.stream", envelope)
    if event != "complete" or '"status":"completed"' not in json.dumps(data, separators=(",", ":")):
        raise Failure(f"native run did not end completed: {event} {json.dumps(data)[:500]}")
    return count, size


async def langgraph(client, envelope, modes, start):
    body = b'{"assistant_id":"flex","input":' + envelope + b',"stream_mode":' + modes
    extra = (0, 0)
    if start == "create":
        thread_id = str(uuid.uuid4())
        body += b',"if_not_exists":"create"'
    else:
        response = await client.post("/threads", content=b"{}", headers=JSON)
        if response.status_code != 200:
            raise Failure(f"POST /threads: {response.status_code} {response.text[:500]}")
        thread_id = response.json()["thread_id"]
        extra = (1, len(response.content))
    path = f"/threads/{thread_id}/runs/stream"
    count, size, (event, data), before = await read_stream(client, path, body + b"}")
    if event != "end" or data.get("status") != "success":
        # The `error` event before `end` says why the run failed.
        why = json.dumps(before)[:500] if before else "no event before it"
        raise Failure(f"LangGraph run did not end with success: {event} {json.dumps(data)[:500]}; before it: {why}")
    return count + extra[0], size + extra[1]


async def batch(base, wire, runs, concurrency, envelope, modes, start):
    run = {"native": native, "langgraph": langgraph}[wire]
    left = [runs]
    totals = {"events": 0, "bytes": 0}

    async def client_loop(client):
        while left[0] > 0:
            left[0] -= 1
            count, size = await run(client, envelope, modes, start)
            totals["events"] += count
            totals["bytes"] += size

    # Each client its own httpx client and connection: one pool shared by all of them costs the
    # client more CPU per request the more connections it holds (httpcore's pool bookkeeping).
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    clients = [httpx.AsyncClient(base_url=base, limits=limits, timeout=120.0) for _ in range(concurrency)]
    try:
        # Each client's connection is opened (and httpx's lazy imports done) before the clock starts.
        for client in clients:
            (await client.get("/api/v1/health")).raise_for_status()
        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(client_loop(client) for client in clients))
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        for client in clients:
            await client.aclose()
    return {"runs": runs, "seconds": seconds, "client_cpu_seconds": cpu, **totals}


def main():
    base, wire, runs, concurrency, envelope_file, modes = sys.argv[1:7]
    start = sys.argv[7] if len(sys.argv) > 7 else "thread"
    with open(envelope_file, "rb") as f:
        envelope = f.read().strip()
    modes = json.dumps(modes.split(",")).encode()
    try:
        result = asyncio.run(batch(base, wire, int(runs), int(concurrency), envelope, modes, start))
    except Failure as failure:
        print(f"langgraph_wire.py: {failure}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
