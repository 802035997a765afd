// The console's one script: shows times in the viewer's time zone, and follows a run's frames
// live through the browser's own EventSource (it re-attaches with Last-Event-ID by itself).

// Every stream this page opened. A browser keeps at most six connections to one server over
// HTTP/1.1: a page that leaves closes its streams (rather than holding them open in the back-forward
// cache), and one shown again from that cache reads itself anew.
const streams = [];

function open(url) {
  const source = new EventSource(url);
  streams.push(source);
  return source;
}

window.addEventListener("pagehide", () => {
  for (const source of streams) source.close();
});
window.addEventListener("pageshow", (event) => {
  if (event.persisted) location.reload();
});

const timeFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });

function localTimes(root) {
  for (const element of root.querySelectorAll("time[datetime]")) {
    const at = new Date(element.getAttribute("datetime"));
    if (!Number.isNaN(at.getTime())) {
      element.textContent = timeFormat.format(at);
      element.title = element.getAttribute("datetime");
    }
  }
}

// Frames after which the run publishes nothing more until an operator acts. The server then
// ends the stream; the browser would reconnect every few seconds, so the page stops it when the
// stream ends after one of them (a `hitl_request` earlier in the replay is not the end).
const pausing = new Set(["complete", "hitl_request"]);

// The live run page: after frames arrive, the page's server-rendered parts (`[data-live]`: the
// header, the failure summary, the actions, the plan with its graph, goal round and step panels,
// the output) are read again and swapped in place — at most one read at a time, the frames of a
// burst taken together. Open step panels stay open; the actions are swapped only when what they
// offer changed (`data-live-key`), never under an operator typing.
let refreshing = false;
let refreshAgain = false;

function refreshSoon() {
  if (refreshing) {
    refreshAgain = true;
    return;
  }
  refreshing = true;
  setTimeout(refreshLive, 150);
}

// This page as the server renders it now; null if it did not answer with it.
async function readThisPage() {
  const response = await fetch(location.href, { credentials: "same-origin", headers: { accept: "text/html" } });
  return response.ok ? new DOMParser().parseFromString(await response.text(), "text/html") : null;
}

async function refreshLive() {
  try {
    const fresh = await readThisPage();
    if (fresh) swapLive(fresh);
  } catch {
    // The next frame tries again; the event list goes on meanwhile.
  } finally {
    refreshing = false;
    if (refreshAgain) {
      refreshAgain = false;
      refreshSoon();
    }
  }
}

// What the server last rendered of each live part, by name: a part is swapped only when that
// changed (the page's own copy differs anyway once its times are shown in local time).
const rendered = new Map();
for (const part of document.querySelectorAll("[data-live]")) rendered.set(part.dataset.live, part.innerHTML);

function swapLive(fresh) {
  for (const next of fresh.querySelectorAll("[data-live]")) {
    const name = next.dataset.live;
    const shown = document.querySelector(`[data-live="${CSS.escape(name)}"]`);
    if (!shown || rendered.get(name) === next.innerHTML) continue;
    if (next.dataset.liveKey !== undefined && next.dataset.liveKey === shown.dataset.liveKey) continue;
    rendered.set(name, next.innerHTML);
    const open = [...shown.querySelectorAll("details[open][id]")].map((details) => details.id);
    const adopted = document.adoptNode(next);
    shown.replaceWith(adopted);
    for (const id of open) {
      const details = document.getElementById(id);
      if (details instanceof HTMLDetailsElement) details.open = true;
    }
    localTimes(adopted);
    bindActions(adopted);
  }
}

// One frame as a line of the list, built as the server renders it (`event_list.html`).
function eventItem(frame, seq) {
  const item = document.createElement("li");
  item.dataset.seq = seq;
  item.dataset.type = frame.type;
  const details = document.createElement("details");
  const summary = document.createElement("summary");
  const title = document.createElement("span");
  title.className = "event-type";
  title.textContent = `${frame.seq} · ${frame.type}`;
  summary.append(title);
  if (frame.nodeId) {
    const node = document.createElement("code");
    node.textContent = frame.nodeId;
    summary.append(" ", node);
  }
  const at = document.createElement("time");
  at.setAttribute("datetime", frame.timestamp);
  summary.append(" ", at);
  const json = document.createElement("pre");
  json.textContent = JSON.stringify(frame, null, 2);
  details.append(summary, json);
  item.append(details);
  localTimes(item);
  return item;
}

// The event filter: shows the lines of one frame type, or all of them.
function shownType() {
  return document.querySelector("[data-testid=event-filter]")?.value || "";
}

function applyFilter(list) {
  const type = shownType();
  for (const item of list.querySelectorAll("li")) item.hidden = type !== "" && item.dataset.type !== type;
}

// Streams the page stopped when their run paused, each a function that follows the run again
// from its last frame: called when the feed says the run changed (an operator decided elsewhere —
// through the API, the CLI, the inbox or another tab), so the page does not go on showing the run
// waiting.
const paused = new Set();

function followEvents(list, after) {
  const renderedSeq = Number(list.dataset.renderedSeq || 0);
  const url = new URL(list.dataset.stream, location.href);
  if (after !== undefined) url.searchParams.set("after", after);
  const source = open(`${url.pathname}${url.search}`);
  const seen = new Set([...list.querySelectorAll("li")].map((item) => item.dataset.seq));
  const show = (event) => {
    if (seen.has(event.lastEventId)) return;
    seen.add(event.lastEventId);
    const frame = JSON.parse(event.data);
    const item = eventItem(frame, event.lastEventId);
    const type = shownType();
    item.hidden = type !== "" && frame.type !== type;
    list.append(item);
    last = frame.type;
    if (frame.type === "complete") source.close();
    // A frame the page was not rendered with: what the server renders of the run changed.
    if (frame.seq > renderedSeq) refreshSoon();
  };
  let last = list.lastElementChild?.dataset.type || null;
  source.onerror = () => {
    if (!pausing.has(last)) return;
    source.close();
    if (last !== "complete") paused.add(() => followEvents(list, Number(list.lastElementChild?.dataset.seq || renderedSeq)));
  };
  source.onmessage = show;
  // Every frame type the server sends (`event:` lines name them), as the page lists them.
  for (const type of list.dataset.frameTypes.split(" ")) source.addEventListener(type, show);
}

for (const select of document.querySelectorAll("[data-testid=event-filter]")) {
  const list = document.getElementById(select.getAttribute("aria-controls"));
  if (list) select.addEventListener("change", () => applyFilter(list));
}

// A graph box links to its step's panel: open it.
function openNodePanel() {
  if (!location.hash.startsWith("#node-")) return;
  const panel = document.getElementById(decodeURIComponent(location.hash.slice(1)));
  if (panel instanceof HTMLDetailsElement) {
    panel.open = true;
    panel.scrollIntoView({ block: "start" });
  }
}
window.addEventListener("hashchange", openNodePanel);
openNodePanel();

localTimes(document);
for (const list of document.querySelectorAll("[data-stream]")) followEvents(list);

// Operator actions: each form posts to the API as the signed-in viewer (the session cookie goes
// along; the server checks the role and the origin). On success the page reloads to show the run
// as it is now; a refusal is shown as the server worded it.
function request(form, runId) {
  const feedback = form.querySelector("[name=feedback]")?.value.trim() || undefined;
  const nodeId = form.dataset.nodeId;
  switch (form.dataset.action) {
    case "resume": {
      const decision = { requestId: form.dataset.requestId, approved: form.dataset.approved === "true", freeformText: feedback };
      const budget = raisedBudget(form);
      if (budget) decision.budget = budget;
      return ["/api/v1/flex/run.resume", { runId, decision }];
    }
    case "submit":
      return ["/api/v1/flex/run.resume", { runId, payload: { requestId: form.dataset.requestId, nodeId, output: taskOutput(form) } }];
    case "decline":
      return ["/api/v1/flex/run.resume", { runId, payload: { requestId: form.dataset.requestId, nodeId, decline: { reason: form.querySelector("[name=reason]").value.trim() } } }];
    case "replan":
      return [`/api/v1/flex/runs/${runId}/replan`, { feedback }];
    default:
      return [`/api/v1/flex/runs/${runId}/cancel`, cancelBody(form.dataset.reason)];
  }
}

// A cancel's body: the operator's reason, if given, is recorded with it (`note`).
function cancelBody(reason) {
  return reason ? { note: reason } : {};
}

// Asks before a destructive action, in the page's one <dialog> (keyboard and screen reader
// friendly: it is modal, focus starts on the safe choice, Escape keeps things as they are).
// Resolves to the reason typed (when `reason` is asked for), "" without one, or null when the
// operator kept things as they are.
function confirmed({ title, message, go, keep, reason = false }) {
  const dialog = document.querySelector("dialog[data-testid=confirm]");
  dialog.querySelector("#confirm-title").textContent = title;
  dialog.querySelector("#confirm-message").textContent = message;
  dialog.querySelector("[data-testid=confirm-go]").textContent = go;
  dialog.querySelector("[data-testid=confirm-keep]").textContent = keep;
  const box = dialog.querySelector("textarea[name=reason]");
  box.value = "";
  dialog.querySelector("[data-testid=confirm-reason-label]").hidden = !reason;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "go" ? box.value.trim() : null), { once: true });
    dialog.showModal();
  });
}

// What a form's action will do, asked before anything is sent when it cannot be undone: a
// Reject without feedback fails the run, a Cancel ends it, and so do a human task's Decline and a
// reached budget's End the run (their forms say how, `data-ends-run`). False: the operator kept
// things as they are.
async function confirmedAction(form) {
  if (form.dataset.action === "cancel") {
    const reason = await confirmed({
      title: "Cancel this run?",
      message: "The run stops now: steps in flight are dropped and it ends cancelled. This cannot be undone.",
      go: "Cancel the run",
      keep: "Keep it running",
      reason: true,
    });
    if (reason === null) return false;
    form.dataset.reason = reason;
    return true;
  }
  if (form.hasAttribute("data-reject") && !form.querySelector("[name=feedback]").value.trim()) {
    const go = await confirmed({
      title: "Reject and fail the run?",
      message: "Without feedback, rejecting ends the run as failed; it cannot go on. To have it planned again, write what should change as feedback instead.",
      go: "Reject and fail the run",
      keep: "Keep waiting",
    });
    return go !== null;
  }
  if (form.hasAttribute("data-ends-run")) {
    const go = await confirmed({
      title: "End the run as failed?",
      message: form.dataset.endsRun,
      go: form.dataset.go,
      keep: "Keep waiting",
    });
    return go !== null;
  }
  return true;
}

// A Reject form says what it will do as the feedback is written.
function bindRejectHints(root) {
  for (const form of root.querySelectorAll("form[data-reject]")) {
    const hint = form.querySelector("[data-testid=reject-hint]");
    const feedback = form.querySelector("[name=feedback]");
    const say = () => {
      hint.textContent = feedback.value.trim()
        ? "Rejecting sends this feedback to the planner: the run is planned again."
        : "Rejecting without feedback fails the run. Write what should change to have it planned again.";
    };
    feedback.addEventListener("input", say);
    say();
  }
}

// The limits a budget form raises: each filled field as a number (none filled: no budget sent,
// and the server says what is missing).
function raisedBudget(form) {
  const budget = {};
  for (const input of form.querySelectorAll("[data-budget]")) {
    if (input.value.trim() !== "") budget[input.name] = Number(input.value);
  }
  return Object.keys(budget).length ? budget : undefined;
}

// A human task's output from its form: one value per field, typed as the schema asks; an empty
// field is left out (the server says when it is required). Text that is not JSON in a JSON field
// is sent as text, for the server to refuse at that field.
function taskOutput(form) {
  const asJson = (text) => {
    try {
      return JSON.parse(text);
    } catch {
      return text;
    }
  };
  const output = {};
  for (const input of form.querySelectorAll("[data-kind]")) {
    const text = input.value.trim();
    let value;
    switch (input.dataset.kind) {
      case "checkbox":
        value = input.checked;
        break;
      case "number":
        value = text === "" ? undefined : Number.isNaN(Number(text)) ? text : Number(text);
        break;
      case "json":
        value = text === "" ? undefined : asJson(text);
        break;
      default:
        value = text === "" ? undefined : text;
    }
    if (input.name === "") return value;
    if (value !== undefined) output[input.name] = value;
  }
  return output;
}

// The frames of a resume's stream, as they arrive.
async function* streamedFrames(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buffered += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const block = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      const data = block.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trim()).join("\n");
      if (data) yield JSON.parse(data);
    }
  }
}

// A human task's submission: the server answers with the run's stream. A refused output comes
// back as `validation_error` (the run keeps waiting): its errors are shown at their fields.
// Anything else means the run took the output.
async function submitted(response, form) {
  for await (const frame of streamedFrames(response)) {
    if (frame.type === "validation_error") return showFieldErrors(form, frame.payload?.errors || []);
    if (frame.type !== "log") return true;
  }
  return true;
}

function showFieldErrors(form, errors) {
  for (const slot of form.querySelectorAll("[data-error-for]")) {
    slot.textContent = "";
    slot.hidden = true;
  }
  const names = [...form.querySelectorAll("[data-error-for]")].map((slot) => slot.dataset.errorFor);
  const unplaced = [];
  for (const error of errors) {
    const path = (error.instancePath || "").split("/")[1] || "";
    const required = error.keyword === "required" ? /"([^"]+)"/.exec(error.message)?.[1] : undefined;
    const name = names.includes("") ? "" : required ?? path;
    const slot = names.includes(name) ? form.querySelector(`[data-error-for="${CSS.escape(name)}"]`) : null;
    if (!slot) {
      unplaced.push(error.message);
      continue;
    }
    slot.textContent = slot.textContent ? `${slot.textContent} ${error.message}` : error.message;
    slot.hidden = false;
  }
  return unplaced.length ? unplaced.join(" ") : false;
}

async function act(form, section) {
  const [url, body] = request(form, section.dataset.runId);
  const controller = new AbortController();
  const response = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: controller.signal,
  });
  const problem = section.querySelector("[data-testid=action-problem]");
  if (response.ok) {
    const outcome = form.dataset.action === "submit" ? await submitted(response, form) : true;
    // A resume answers with the run's stream: the page follows the run itself.
    controller.abort();
    if (outcome === true) {
      location.reload();
    } else {
      problem.textContent = outcome || "The output was refused: see the fields marked. The run keeps waiting.";
      problem.hidden = false;
    }
    return;
  }
  const answer = await response.json().catch(() => ({}));
  problem.textContent = answer?.error?.message || `The server answered ${response.status}.`;
  problem.hidden = false;
}

// The operator actions under `root` (the page, or a part of it just swapped in).
function bindActions(root) {
  bindRejectHints(root);
  for (const section of root.querySelectorAll("section.actions")) bindSection(section);
}

function bindSection(section) {
  for (const form of section.querySelectorAll("form[data-action]")) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (!(await confirmedAction(form))) return;
      for (const button of section.querySelectorAll("button")) button.disabled = true;
      act(form, section)
        .catch(() => {
          const problem = section.querySelector("[data-testid=action-problem]");
          problem.textContent = "The server could not be reached; nothing was changed by this page.";
          problem.hidden = false;
        })
        .finally(() => {
          for (const button of section.querySelectorAll("button")) button.disabled = false;
        });
    });
  }
}

bindActions(document);

// The feed (`/ui/feed`): the pending count in the navigation on every page, and on the run list
// each run that starts or changes, as its row (rendered by the server). The run list opens the
// feed with its filters; other pages open the plain one.
function followFeed() {
  const table = document.querySelector("table[data-feed]");
  const url = table?.dataset.feed || (document.body.dataset.feed && document.querySelector("[data-run-feed]")?.dataset.runFeed) || document.body.dataset.feed;
  if (!url) return;
  const source = open(url);
  source.addEventListener("changed", () => {
    for (const follow of [...paused]) {
      paused.delete(follow);
      follow();
    }
  });
  let connected = false;
  source.addEventListener("open", () => {
    // A reconnect may have missed changes: the list reads itself again.
    if (connected && table) location.reload();
    connected = true;
  });
  source.addEventListener("pending", (event) => {
    const count = JSON.parse(event.data).count;
    for (const badge of document.querySelectorAll("[data-testid=pending-count]")) {
      badge.textContent = count >= 200 ? "200+" : String(count);
      badge.hidden = count === 0;
    }
    if (document.querySelector("[data-inbox]")) refreshInbox();
  });
  if (!table) return;
  source.addEventListener("resync", () => location.reload());
  source.addEventListener("gone", (event) => {
    const { runId } = JSON.parse(event.data);
    table.querySelector(`tr[data-run-id="${CSS.escape(runId)}"]`)?.remove();
  });
  source.addEventListener("run", (event) => {
    const { runId, html } = JSON.parse(event.data);
    const body = table.tBodies[0];
    const template = document.createElement("template");
    template.innerHTML = html.trim();
    const row = template.content.firstElementChild;
    localTimes(row);
    const shown = body.querySelector(`tr[data-run-id="${CSS.escape(runId)}"]`);
    if (shown) {
      const selected = shown.querySelector("input[name=selected]")?.checked;
      const box = row.querySelector("input[name=selected]");
      if (box && selected) box.checked = true;
      shown.replaceWith(row);
    } else if (table.dataset.firstPage === "true") {
      body.prepend(row);
      table.hidden = false;
      document.querySelector("[data-testid=empty]")?.setAttribute("hidden", "");
      keepOnePage(table);
    }
    selectionChanged();
  });
}

// The inbox, when the decisions pending change (asked, or answered elsewhere): the page reads
// itself again — at most one read at a time — adds the items it does not show, in their place,
// and drops those no longer pending. An item it shows stays as it is: an operator may be writing
// in it.
let inboxReading = false;
let inboxAgain = false;

async function refreshInbox() {
  if (inboxReading) {
    inboxAgain = true;
    return;
  }
  inboxReading = true;
  try {
    const fresh = await readThisPage();
    if (fresh) reconcileInbox(fresh);
  } catch {
    // The next change tries again.
  } finally {
    inboxReading = false;
    if (inboxAgain) {
      inboxAgain = false;
      refreshInbox();
    }
  }
}

function reconcileInbox(fresh) {
  const shown = document.querySelector("[data-inbox]");
  const next = fresh.querySelector("[data-inbox]");
  if (!shown || !next) return;
  const list = shown.querySelector("ol.inbox");
  const nextList = next.querySelector("ol.inbox");
  const adopt = (element) => {
    const adopted = document.adoptNode(element);
    localTimes(adopted);
    bindActions(adopted);
    return adopted;
  };
  if (!list || !nextList) {
    // From nothing pending, or to it: nothing shown is kept.
    shown.replaceWith(adopt(next));
    return;
  }
  const key = (item) => item.querySelector("section.actions")?.dataset.requestId;
  const wanted = new Set([...nextList.children].map(key));
  for (const item of [...list.children]) if (!wanted.has(key(item))) item.remove();
  const kept = new Map([...list.children].map((item) => [key(item), item]));
  // Oldest first in both: walked from the newest, each new item goes before the one after it.
  let after = null;
  for (const item of [...nextList.children].reverse()) {
    const known = kept.get(key(item));
    after = known || list.insertBefore(adopt(item), after);
  }
}

// The first page keeps one page of rows as new runs arrive: the oldest go, and "Older runs" then
// starts after the last row still shown, so a run that left the page is on the next one.
function keepOnePage(table) {
  const body = table.tBodies[0];
  const size = Number(table.dataset.pageSize);
  if (!size || body.rows.length <= size) return;
  while (body.rows.length > size) body.rows[body.rows.length - 1].remove();
  let older = document.querySelector("a[data-testid=older]");
  if (!older) {
    const paragraph = document.createElement("p");
    older = document.createElement("a");
    older.className = "next";
    older.dataset.testid = "older";
    older.textContent = "Older runs";
    paragraph.append(older);
    table.closest("form")?.after(paragraph);
  }
  const url = new URL(location.href);
  url.searchParams.set("cursor", body.rows[body.rows.length - 1].dataset.runId);
  older.href = `${url.pathname}${url.search}`;
}

// Bulk cancel: an operator selects runs in the list and cancels them together; each cancel is
// the API's own, and what the server refused is listed.
const bulk = document.querySelector("form[data-testid=bulk]");

function selectionChanged() {
  const button = bulk?.querySelector("[data-testid=cancel-selected]");
  if (button) button.disabled = !bulk.querySelector("input[name=selected]:checked");
}

async function cancelSelected() {
  const problem = bulk.querySelector("[data-testid=bulk-problem]");
  problem.hidden = true;
  const selected = bulk.querySelectorAll("input[name=selected]:checked");
  const reason = await confirmed({
    title: selected.length === 1 ? "Cancel the selected run?" : `Cancel the ${selected.length} selected runs?`,
    message: "Each stops now: steps in flight are dropped and it ends cancelled. This cannot be undone.",
    go: selected.length === 1 ? "Cancel the run" : `Cancel ${selected.length} runs`,
    keep: "Keep them running",
    reason: true,
  });
  if (reason === null) return;
  const refused = [];
  for (const box of selected) {
    const response = await fetch(`/api/v1/flex/runs/${encodeURIComponent(box.value)}/cancel`, {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(cancelBody(reason)),
    }).catch(() => undefined);
    if (response?.ok) {
      box.checked = false;
      continue;
    }
    const answer = await response?.json().catch(() => ({}));
    refused.push(`${box.value}: ${answer?.error?.message || "the server could not be reached"}`);
  }
  if (refused.length) {
    problem.textContent = `Not cancelled — ${refused.join("; ")}`;
    problem.hidden = false;
  }
}

if (bulk) {
  bulk.addEventListener("change", selectionChanged);
  bulk.addEventListener("submit", (event) => {
    event.preventDefault();
    const button = bulk.querySelector("[data-testid=cancel-selected]");
    button.disabled = true;
    cancelSelected().finally(selectionChanged);
  });
}

followFeed();
