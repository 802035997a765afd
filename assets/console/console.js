// The console's one script: shows times in the viewer's time zone, and follows a run's frames
// live through the browser's own EventSource (it re-attaches with Last-Event-ID by itself).

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

// Frames after which the page's server-rendered parts (header, actions) are out of date.
const rerender = new Set(["hitl_request", "hitl_resolved", "complete"]);

function followEvents(list) {
  const renderedSeq = Number(list.dataset.renderedSeq || 0);
  const source = new EventSource(list.dataset.stream);
  const seen = new Set();
  const show = (event) => {
    if (seen.has(event.lastEventId)) return;
    seen.add(event.lastEventId);
    const frame = JSON.parse(event.data);
    const item = document.createElement("li");
    item.dataset.seq = event.lastEventId;
    item.dataset.type = frame.type;
    const summary = document.createElement("span");
    summary.className = "event-type";
    summary.textContent = `${frame.seq} · ${frame.type}`;
    const at = document.createElement("time");
    at.setAttribute("datetime", frame.timestamp);
    item.append(summary, " ", at);
    list.append(item);
    localTimes(item);
    if (frame.type === "complete") {
      const status = document.querySelector("[data-testid=status]");
      if (status && frame.payload && frame.payload.status) {
        status.textContent = frame.payload.status;
        status.className = `status status-${frame.payload.status}`;
      }
    }
    last = frame.type;
    if (frame.type === "complete") source.close();
    // A live frame that changes what the server rendered (a new request to answer, a request
    // closed, the end): show the page as it is now.
    if (frame.seq > renderedSeq && rerender.has(frame.type)) {
      source.close();
      location.reload();
    }
  };
  let last = null;
  source.onerror = () => {
    if (pausing.has(last)) source.close();
  };
  source.onmessage = show;
  // Every frame type the server sends (`event:` lines name them), as the page lists them.
  for (const type of list.dataset.frameTypes.split(" ")) source.addEventListener(type, show);
}

localTimes(document);
for (const list of document.querySelectorAll("[data-stream]")) followEvents(list);

// Operator actions: each form posts to the API as the signed-in viewer (the session cookie goes
// along; the server checks the role and the origin). On success the page reloads to show the run
// as it is now; a refusal is shown as the server worded it.
async function act(form, section) {
  const runId = section.dataset.runId;
  const feedback = form.querySelector("[name=feedback]")?.value.trim() || undefined;
  let url;
  let body;
  switch (form.dataset.action) {
    case "resume":
      url = "/api/v1/flex/run.resume";
      body = { runId, decision: { requestId: form.dataset.requestId, approved: form.dataset.approved === "true", freeformText: feedback } };
      break;
    case "replan":
      url = `/api/v1/flex/runs/${runId}/replan`;
      body = { feedback };
      break;
    default:
      url = `/api/v1/flex/runs/${runId}/cancel`;
      body = {};
  }
  const controller = new AbortController();
  const response = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: controller.signal,
  });
  if (response.ok) {
    // A resume answers with the run's stream: the page follows the run itself.
    controller.abort();
    location.reload();
    return;
  }
  const problem = section.querySelector("[data-testid=action-problem]");
  const answer = await response.json().catch(() => ({}));
  problem.textContent = answer?.error?.message || `The server answered ${response.status}.`;
  problem.hidden = false;
}

for (const section of document.querySelectorAll("section.actions")) {
  for (const form of section.querySelectorAll("form[data-action]")) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      for (const button of section.querySelectorAll("button")) button.disabled = true;
      act(form, section).finally(() => {
        for (const button of section.querySelectorAll("button")) button.disabled = false;
      });
    });
  }
}
