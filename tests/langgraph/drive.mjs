// Drives flexrun with the unmodified official LangGraph JS SDK (@langchain/langgraph-sdk), the
// way `useStream` does: submit chat messages streamed in values, messages-tuple and updates
// (learning the run from onRunCreated), re-join the run's stream from its start, read the
// thread's state. Run by tests/langgraph_sdk.rs: `node drive.mjs BASE_URL QUESTION`; prints what
// it saw as one JSON document.
import { Client } from "@langchain/langgraph-sdk";

const [baseUrl, question] = process.argv.slice(2);
const client = new Client({ apiUrl: baseUrl });
const thread = await client.threads.create();
let created = null;
const parts = [];
for await (const part of client.runs.stream(thread.thread_id, "flex", {
  input: { messages: [{ type: "human", content: question }] },
  streamMode: ["values", "messages-tuple", "updates"],
  onRunCreated: (meta) => { created = meta; },
})) {
  parts.push({ event: part.event, data: part.data });
}
const rejoined = [];
for await (const part of client.runs.joinStream(thread.thread_id, created.run_id, { lastEventId: "-1", streamMode: ["values"] })) {
  rejoined.push({ event: part.event, data: part.data });
}
const state = await client.threads.getState(thread.thread_id);
console.log(JSON.stringify({ threadId: thread.thread_id, created, parts, rejoined, state }));
