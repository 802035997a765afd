"""Drives flexrun with the unmodified official LangGraph Python SDK (langgraph-sdk).

Run by tests/langgraph_sdk.rs: `python drive.py SCENARIO BASE_URL ARGS_JSON`. Each scenario uses
the SDK as a client would and prints what it saw as one JSON document on the last line of stdout;
the Rust test asserts on it (and on the database and the stand-in model's calls). Progress lines
before it (`progress: …`) let the test act while the scenario runs (e.g. kill the server).
"""

import asyncio
import json
import sys

import httpx

from langgraph_sdk import get_client
from langgraph_sdk.errors import APIStatusError


def part(p):
    """A stream part as JSON: its event, its data and (for the raw stream) its id."""
    return {"event": p.event, "data": p.data, "id": getattr(p, "id", None)}


def progress(text):
    print(f"progress: {text}", flush=True)


async def collect(stream, announce_after=None):
    parts = []
    async for p in stream:
        parts.append(part(p))
        if announce_after is not None and len(parts) == announce_after:
            progress(f"received {len(parts)}")
    return parts


async def stream(client, args):
    """A run streamed to its end on a new thread, then the thread's state and runs."""
    thread = await client.threads.create(metadata={"purpose": "conformance"})
    tid = thread["thread_id"]
    created = {}
    parts = await collect(client.runs.stream(
        tid, "flex", input=args["input"], stream_mode=args.get("modes", ["values", "updates", "custom"]),
        on_run_created=lambda meta: created.update(meta)))
    state = await client.threads.get_state(tid)
    runs = await client.runs.list(tid)
    got = await client.threads.get(tid)
    search = await client.threads.search(metadata={"purpose": "conformance"}, limit=10)
    history = await client.threads.get_history(tid, limit=5)
    return {"thread_id": tid, "created": created, "parts": parts, "state": state, "runs": runs, "thread": got,
            "search": search, "history": history}


async def interrupt_and_resume(client, args):
    """A run that waits for an answer: its interrupt, the state, then each resume in turn."""
    thread = await client.threads.create()
    tid = thread["thread_id"]
    first = await collect(client.runs.stream(tid, "flex", input=args["input"], stream_mode=["values", "updates"]))
    rounds = [{"parts": first, "state": await client.threads.get_state(tid), "thread": await client.threads.get(tid)}]
    for resume in args["resumes"]:
        parts = []
        async for p in client.runs.stream(tid, "flex", command={"resume": resume}, stream_mode=["values", "updates"],
                                          version="v2"):
            parts.append(p)
        rounds.append({"parts": parts, "state": await client.threads.get_state(tid)})
    return {"thread_id": tid, "rounds": rounds}


async def background_and_join(client, args):
    """A background run joined when done; then its stream re-joined after a Last-Event-ID."""
    thread = await client.threads.create()
    tid = thread["thread_id"]
    run = await client.runs.create(tid, "flex", input=args["input"])
    joined = await client.runs.join(tid, run["run_id"])
    done = await client.runs.get(tid, run["run_id"])
    rest = await collect(client.runs.join_stream(tid, run["run_id"], last_event_id=str(args["last_event_id"]),
                                                 stream_mode="custom"))
    everything = await collect(client.runs.join_stream(tid, run["run_id"], last_event_id="-1", stream_mode="custom"))
    waited = await client.runs.wait(None, "flex", input=args["input"])
    return {"thread_id": tid, "created": run, "joined": joined, "done": done, "rest": rest, "everything": everything,
            "waited": waited}


async def reconnect(client, args):
    """A run streamed while the server is killed and started again: the SDK reconnects itself."""
    thread = await client.threads.create()
    parts = await collect(client.runs.stream(thread["thread_id"], "flex", input=args["input"], stream_mode="custom"),
                          announce_after=args["announce_after"])
    return {"thread_id": thread["thread_id"], "parts": parts}


async def cancel_and_busy(client, args):
    """A slow run: a second run on its thread is refused (409); then the run is cancelled."""
    thread = await client.threads.create()
    tid = thread["thread_id"]
    run = await client.runs.create(tid, "flex", input=args["input"])
    try:
        await client.runs.create(tid, "flex", input=args["input"], multitask_strategy="reject")
        busy = {"refused": False}
    except APIStatusError as error:
        busy = {"refused": True, "status": error.status_code, "message": str(error)}
    thread_busy = await client.threads.get(tid)
    await client.runs.cancel(tid, run["run_id"])
    after = await client.runs.get(tid, run["run_id"])
    return {"run": run, "busy": busy, "thread_while_busy": thread_busy, "after_cancel": after}


async def failing(client, args):
    """A run that fails: the stream's `error` event, then `end`; the run's status."""
    thread = await client.threads.create()
    tid = thread["thread_id"]
    parts = await collect(client.runs.stream(tid, "flex", input=args["input"], stream_mode=["values"]))
    runs = await client.runs.list(tid)
    try:
        await client.runs.stream(tid, "nope", input=args["input"]).__anext__()
        unknown = {"refused": False}
    except APIStatusError as error:
        unknown = {"refused": True, "status": error.status_code}
    return {"parts": parts, "runs": runs, "unknown_assistant": unknown, "thread": await client.threads.get(tid)}


async def chat(client, args):
    """A chat input (`messages`), as chat front ends send it, streamed with messages-tuple."""
    assistants = await client.assistants.search()
    thread = await client.threads.create()
    tid = thread["thread_id"]
    parts = await collect(client.runs.stream(
        tid, "flex", input={"messages": [{"type": "human", "content": args["question"]}]},
        stream_mode=["values", "messages-tuple"]))
    second = await collect(client.runs.stream(
        tid, "flex", input={"messages": [{"type": "human", "content": "And again?"}]}, stream_mode=["values"]))
    return {"assistants": assistants, "parts": parts, "second": second, "state": await client.threads.get_state(tid)}


async def refused(call):
    """A request the server should refuse: its status and message, or that it was taken.
    `runs.create` and `threads.*` raise the SDK's typed errors; `runs.wait` raises httpx's."""
    try:
        await call
        return {"refused": False}
    except APIStatusError as error:
        return {"refused": True, "status": error.status_code, "message": str(error)}
    except httpx.HTTPStatusError as error:
        return {"refused": True, "status": error.response.status_code, "message": str(error)}


async def time_travel(client, args):
    """LangGraph's time-travel guide on a repaired run: the thread's history (a checkpoint per plan
    version and per completed step), then runs from its checkpoints on the same thread — replayed
    from plan version 2 (`input=None`, the guide's deprecated `checkpoint_id` field), with a state
    update (`command.update`), and from the newest checkpoint given as a `checkpoint` object — and
    the requests the server refuses."""
    thread = await client.threads.create()
    tid = thread["thread_id"]
    created = {}
    first = await client.runs.wait(tid, "flex", input=args["input"], on_run_created=lambda m: created.update(m))
    parent = created["run_id"]

    # The history, newest first; the checkpoint of plan version 2 and the newest one.
    history = await client.threads.get_history(tid, limit=args.get("limit", 20))
    state_before = await client.threads.get_state(tid)
    v2 = next(s for s in history
              if s["metadata"].get("frame") == "plan_generated" and s["values"].get("planVersion") == 2)
    head = history[0]
    page_by_id = await client.threads.get_history(tid, limit=2, before=v2["checkpoint"]["checkpoint_id"])
    page_by_checkpoint = await client.threads.get_history(tid, limit=2, before=v2["checkpoint"])
    plans = await client.threads.get_history(tid, metadata={"frame": "plan_generated"})

    # Replay from v2, as the guide resumes: no input, the state's `checkpoint_id`.
    replay_created = {}
    replayed = await client.runs.wait(tid, "flex", input=None, checkpoint_id=v2["checkpoint_id"],
                                      on_run_created=lambda m: replay_created.update(m))

    # From v2 again, with the draft's output replaced (LangGraph's `command.update`).
    edited = {"text": "an edited draft", "quality_score": 0.6}
    update_created = {}
    updated = await collect(client.runs.stream(
        tid, "flex", command={"update": {"outputs": {"draft": edited}}},
        checkpoint_id=v2["checkpoint"]["checkpoint_id"], stream_mode=["values", "updates", "custom"],
        on_run_created=lambda m: update_created.update(m)))

    # From the parent's newest checkpoint, given as a `checkpoint` object (as useStream sends it).
    from_head = await client.runs.create(tid, "flex", checkpoint=head["checkpoint"])
    joined = await client.runs.join(tid, from_head["run_id"])

    # Refused, and nothing created.
    runs_before = len(await client.runs.list(tid, limit=100))
    v2_id = v2["checkpoint"]["checkpoint_id"]
    refusals = {
        "unknown": await refused(client.runs.create(tid, "flex", checkpoint_id=f"{parent}:999999")),
        "not_a_checkpoint": await refused(client.runs.create(tid, "flex", checkpoint_id=f"{parent}:1")),
        "resume_too": await refused(client.runs.create(tid, "flex", checkpoint_id=v2_id, command={"resume": True})),
        "derived": await refused(client.runs.create(
            tid, "flex", checkpoint_id=v2_id, command={"update": {"status": "completed"}})),
        "not_done": await refused(client.runs.create(
            tid, "flex", checkpoint_id=v2_id, command={"update": {"outputs": {"polish": edited}}})),
        "stateless": await refused(client.runs.create(None, "flex", checkpoint_id=v2_id)),
    }
    runs_after = len(await client.runs.list(tid, limit=100))

    return {
        "thread_id": tid, "parent": parent, "first": first,
        "history": history, "state_before": state_before,
        "v2": v2_id, "head": head["checkpoint"]["checkpoint_id"],
        "page_by_id": page_by_id, "page_by_checkpoint": page_by_checkpoint, "plans": plans,
        "replayed": {"run_id": replay_created.get("run_id"), "values": replayed},
        "updated": {"run_id": update_created.get("run_id"), "parts": updated},
        "from_head": {"run": from_head, "joined": joined},
        "refusals": refusals, "runs_before_refusals": runs_before, "runs_after_refusals": runs_after,
        "history_after": await client.threads.get_history(tid, limit=50),
        "state_after": await client.threads.get_state(tid),
        "runs": await client.runs.list(tid, limit=100),
    }


SCENARIOS = {f.__name__: f for f in [stream, interrupt_and_resume, background_and_join, reconnect, cancel_and_busy,
                                      failing, chat, time_travel]}


async def main():
    scenario, base_url, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    client = get_client(url=base_url, api_key=args.get("api_key"))
    result = await SCENARIOS[scenario](client, args)
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    asyncio.run(main())
