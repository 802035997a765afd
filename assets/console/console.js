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

// Frames after which the run publishes nothing more until an operator acts: the stream ends,
// and the browser must not reconnect in a loop.
const pausing = new Set(["complete", "hitl_request"]);

function followEvents(list) {
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
    if (pausing.has(frame.type)) source.close();
  };
  source.onmessage = show;
  for (const type of FRAME_TYPES) source.addEventListener(type, show);
}

// Every frame type the server sends (`event:` lines name them).
const FRAME_TYPES = [
  "start", "plan_requested", "plan_rejected", "plan_generated", "plan_updated", "node_start",
  "node_complete", "node_error", "goal_condition_failed", "policy_triggered", "policy_update",
  "hitl_request", "hitl_resolved", "validation_error", "log", "retry", "complete",
];

localTimes(document);
for (const list of document.querySelectorAll("[data-stream]")) followEvents(list);
