// The composer (`/ui/new`): a form over the task envelope — objective, inputs, output facets,
// goal conditions as rows that compile as they are typed (through the API's own compiler),
// policies — and the envelope as JSON one click away. The JSON is what is posted: every field
// writes its part of it as it changes, and an edit of the JSON fills the fields again. Launch
// shows every one of the server's 400 details at once, each at the field its path points into.

const form = document.getElementById("composer");
const envelopeText = document.getElementById("envelope");
const rows = form.querySelector("[data-testid=conditions] tbody");
const jsonProblem = form.querySelector("[data-testid=json-problem]");
const problems = form.querySelector("[data-testid=problems]");
const forkOutput = document.getElementById("fork-output");
const raw = form.querySelector("[data-testid=raw]");
const fields = [...form.querySelectorAll("[data-pointer]")];

// The envelope as JSON, or `undefined` (with the parse error shown) when it is not JSON.
function envelope() {
  try {
    const value = JSON.parse(envelopeText.value);
    jsonProblem.hidden = true;
    return value;
  } catch (error) {
    jsonProblem.textContent = `The envelope is not JSON: ${error.message}`;
    jsonProblem.hidden = false;
    return undefined;
  }
}

// The value at a JSON Pointer of `value`, or `undefined`.
function at(value, pointer) {
  return pointer
    .split("/")
    .slice(1)
    .reduce((item, key) => (item !== null && typeof item === "object" ? item[key] : undefined), value);
}

// Sets (or, for `undefined`, removes) the value at a pointer, making the objects on the way; an
// object left empty by a removal is removed too, so a cleared field leaves no `{}` behind.
function put(value, pointer, item) {
  const keys = pointer.split("/").slice(1);
  const last = keys.pop();
  const parents = [value];
  for (const key of keys) {
    const parent = parents[parents.length - 1];
    if (parent[key] === null || typeof parent[key] !== "object") {
      if (item === undefined) return;
      parent[key] = {};
    }
    parents.push(parent[key]);
  }
  if (item === undefined) delete parents[parents.length - 1][last];
  else parents[parents.length - 1][last] = item;
  for (let i = keys.length - 1; i >= 0 && Object.keys(parents[i + 1]).length === 0; i -= 1) delete parents[i][keys[i]];
}

// What a field holds, as the envelope's value (`undefined`: leave the key out); throws the
// words of a problem when it cannot be one.
function fieldValue(field, value) {
  if (field.type === "checkbox") return field.checked ? "required" : undefined;
  if (field.id === "facets") {
    const facets = field.value.split(",").map((facet) => facet.trim()).filter((facet) => facet !== "");
    return { ...(value.outputContract ?? {}), mode: "facets", facets };
  }
  if (field.type === "number") {
    if (field.validity.badInput) throw "is not a number";
    return field.value === "" ? undefined : Number(field.value);
  }
  if ("json" in field.dataset) {
    if (field.value.trim() === "") return undefined;
    try {
      return JSON.parse(field.value);
    } catch (error) {
      throw `is not JSON: ${error.message}`;
    }
  }
  if (field.tagName === "SELECT") return field.value === "" ? undefined : field.value;
  return field.value;
}

// Writes one field into the envelope as JSON (left alone while the JSON does not parse).
function writeField(field) {
  const container = field.closest("[data-field]");
  clearProblem(container);
  const value = envelope();
  if (value === undefined) {
    markProblem(container, "", "The envelope as JSON does not parse: fix it below first.");
    raw.open = true;
    return;
  }
  try {
    put(value, field.dataset.pointer, fieldValue(field, value));
  } catch (problem) {
    markProblem(container, "", `This field ${problem}`);
    return;
  }
  envelopeText.value = JSON.stringify(value, null, 2);
}

// Fills the fields from the envelope as JSON.
function readFields() {
  const value = envelope();
  if (value === undefined) return;
  for (const field of fields) {
    const item = at(value, field.dataset.pointer);
    if (field.type === "checkbox") field.checked = item === "required";
    else if (field.id === "facets") readContract(field, item);
    else if ("json" in field.dataset) field.value = item === undefined ? "" : JSON.stringify(item, null, 2);
    else field.value = item === undefined || item === null ? "" : String(item);
  }
}

// The facets field shows a `facets` contract; any other contract is edited as JSON.
function readContract(field, contract) {
  const note = form.querySelector("[data-testid=contract-note]");
  const other = contract?.mode !== undefined && contract.mode !== "facets";
  field.disabled = other;
  field.value = Array.isArray(contract?.facets) ? contract.facets.join(", ") : "";
  note.hidden = !other;
  note.textContent = other ? `The output contract is of mode "${contract.mode}": edit it in the envelope as JSON below.` : "";
}

// A problem shown at a field (or, for `container` the raw envelope, in it, opened).
function markProblem(container, path, message) {
  const note = document.createElement("p");
  note.className = "problem field-problem";
  if (path && path !== container.dataset.field) {
    const where = document.createElement("code");
    where.textContent = path;
    note.append(where, " ");
  }
  note.append(message);
  container.append(note);
  container.querySelector("[data-pointer], textarea, input")?.setAttribute("aria-invalid", "true");
  if (container === raw) raw.open = true;
}

function clearProblem(container) {
  for (const marked of container.querySelectorAll(":scope > .field-problem")) marked.remove();
  container.querySelector("[aria-invalid]")?.removeAttribute("aria-invalid");
}

// The field a JSON Pointer points into: the one whose own pointer is its longest prefix (the
// envelope as JSON when none is).
function fieldOf(path) {
  let best = raw;
  for (const container of form.querySelectorAll("[data-field]")) {
    const own = container.dataset.field;
    const inside = own !== "" && (path === own || path.startsWith(`${own}/`));
    if (inside && own.length > best.dataset.field.length) best = container;
  }
  return best;
}

function cell(...children) {
  const td = document.createElement("td");
  td.append(...children);
  return td;
}

function labelled(text, input) {
  const label = document.createElement("label");
  const name = document.createElement("span");
  name.className = "visually-hidden";
  name.textContent = text;
  label.append(name, input);
  return label;
}

function textInput(name, value, label) {
  const input = document.createElement("input");
  input.type = "text";
  input.name = name;
  input.value = value ?? "";
  input.addEventListener("input", () => writeConditions());
  return labelled(label, input);
}

// One goal condition as a row: facet, path, DSL, and what the server compiled it to.
function conditionRow(goal, index) {
  const row = document.createElement("tr");
  row.dataset.index = index;
  // A condition written as JSON-Logic only stays as it is unless a DSL is typed.
  row.original = goal.condition ?? {};
  const dsl = textInput("dsl", goal.condition?.dsl, `Condition ${index + 1}`);
  dsl.querySelector("input").placeholder = goal.condition?.jsonLogic ? "(JSON-Logic in the envelope)" : "e.g. quality_score >= 0.8";
  dsl.querySelector("input").addEventListener("input", () => compileSoon(row));
  const compiled = document.createElement("div");
  compiled.dataset.testid = "compiled";
  compiled.setAttribute("aria-live", "polite");
  const remove = document.createElement("button");
  remove.type = "button";
  remove.textContent = "Remove";
  remove.setAttribute("aria-label", `Remove condition ${index + 1}`);
  remove.addEventListener("click", () => {
    row.remove();
    writeConditions();
    showConditions();
  });
  row.append(
    cell(textInput("facet", goal.facet, `Facet of condition ${index + 1}`)),
    cell(textInput("path", goal.path, `Path of condition ${index + 1}`)),
    cell(dsl),
    cell(compiled),
    cell(remove),
  );
  return row;
}

function showConditions() {
  const empty = rows.children.length === 0;
  form.querySelector("[data-testid=no-conditions]").hidden = !empty;
  rows.closest("table").hidden = empty;
}

// Rows from the envelope's `goal_condition`.
function readConditions() {
  const value = envelope();
  if (value === undefined) return;
  rows.replaceChildren();
  const goals = Array.isArray(value.goal_condition) ? value.goal_condition : [];
  goals.forEach((goal, index) => {
    const row = conditionRow(goal, index);
    rows.append(row);
    compileSoon(row, 0);
  });
  showConditions();
}

// The envelope's `goal_condition` from the rows (left alone while the JSON does not parse).
function writeConditions() {
  const value = envelope();
  if (value === undefined) return;
  const goals = [...rows.children].map((row) => {
    const field = (name) => row.querySelector(`[name=${name}]`).value;
    const dsl = field("dsl").trim();
    const condition = dsl !== "" || !row.original.jsonLogic ? { dsl } : { jsonLogic: row.original.jsonLogic };
    return { facet: field("facet").trim(), path: field("path"), condition };
  });
  if (goals.length) value.goal_condition = goals;
  else delete value.goal_condition;
  envelopeText.value = JSON.stringify(value, null, 2);
}

// Compiles a row's DSL after a pause in typing; a slower, older answer never overwrites a newer one.
function compileSoon(row, delay = 250) {
  clearTimeout(row.timer);
  row.timer = setTimeout(() => compile(row), delay);
}

async function compile(row) {
  const dsl = row.querySelector("[name=dsl]").value;
  const shown = row.querySelector("[data-testid=compiled]");
  const asked = (row.asked = (row.asked ?? 0) + 1);
  if (dsl.trim() === "") {
    shown.replaceChildren();
    return;
  }
  const response = await fetch("/api/v1/flex/conditions/compile", {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ dsl, relative: true }),
  }).catch(() => undefined);
  if (asked !== row.asked) return;
  if (!response) {
    shown.textContent = "The server could not be reached.";
    return;
  }
  const answer = await response.json().catch(() => ({}));
  if (response.ok) {
    const canonical = document.createElement("code");
    canonical.textContent = answer.canonicalDsl;
    const logic = document.createElement("code");
    logic.className = "json-logic";
    logic.textContent = JSON.stringify(answer.jsonLogic);
    shown.className = "compiled ok";
    shown.replaceChildren(canonical, document.createElement("br"), logic);
    return;
  }
  shown.className = "compiled problem";
  shown.replaceChildren(...(answer.error?.details ?? []).map((detail) => dslError(dsl, detail)));
  if (!shown.children.length) shown.textContent = answer.error?.message ?? `The server answered ${response.status}.`;
}

// A DSL error: its message and the expression with the offending range marked.
function dslError(dsl, detail) {
  const item = document.createElement("p");
  item.textContent = detail.message;
  const range = detail.range;
  if (range) {
    const chars = [...dsl];
    const start = Math.min(range.start.offset, chars.length);
    const end = Math.max(start + 1, Math.min(range.end.offset, chars.length));
    const source = document.createElement("code");
    const mark = document.createElement("mark");
    mark.textContent = chars.slice(start, end).join("") || " ";
    source.append(chars.slice(0, start).join(""), mark, chars.slice(end).join(""));
    item.append(document.createElement("br"), source);
  }
  return item;
}

// The server's 400 details, all at once: listed with their paths above Launch, and each at the
// field its path points into (a goal condition's at its row).
function showProblems(answer, status) {
  for (const container of form.querySelectorAll("[data-field]")) clearProblem(container);
  for (const marked of rows.querySelectorAll(".field-problem")) marked.remove();
  const list = problems.querySelector("ul");
  list.replaceChildren();
  const details = answer.error?.details?.length ? answer.error.details : [{ path: "", message: answer.error?.message ?? `The server answered ${status}.` }];
  for (const detail of details) {
    const item = document.createElement("li");
    const path = document.createElement("code");
    path.textContent = detail.path || "(the envelope)";
    item.append(path, ` ${detail.message}`);
    list.append(item);
    const goal = /^\/goal_condition\/(\d+)/.exec(detail.path ?? "");
    const row = goal && rows.children[Number(goal[1])];
    if (row) {
      const note = document.createElement("p");
      note.className = "problem field-problem";
      note.textContent = detail.message;
      row.querySelector("[data-testid=compiled]").after(note);
    } else if (detail.path) {
      markProblem(fieldOf(detail.path), detail.path, detail.message);
    }
  }
  problems.hidden = false;
  form.querySelector(".field-problem")?.closest("[data-field]")?.scrollIntoView({ block: "center" });
}

// The JSON Pointers of the values that still read as the redaction marker: a Re-run shows a
// run's secrets so, and they are typed again, never posted as the marker.
function redactedPaths(value, path = "") {
  if (value === form.dataset.redacted) return [path];
  if (value === null || typeof value !== "object") return [];
  return Object.entries(value).flatMap(([key, item]) =>
    redactedPaths(item, `${path}/${key.replaceAll("~", "~0").replaceAll("/", "~1")}`));
}

// What a fork posts: its point, and only what was edited — an envelope left as it was is the
// run's own (its hidden values included); a step's output left as it was runs the step again.
function forkRequest() {
  const { forkVersion, forkNode } = form.dataset;
  const request = { fromVersion: Number(forkVersion) };
  if (forkNode) request.fromNode = forkNode;
  const edited = envelope();
  if (edited === undefined || JSON.stringify(edited) !== JSON.stringify(JSON.parse(envelopeText.defaultValue))) {
    request.envelope = edited;
  }
  if (forkOutput && !forkOutput.disabled && forkOutput.value !== forkOutput.defaultValue) {
    try {
      request.outputs = { [forkNode]: JSON.parse(forkOutput.value) };
    } catch (error) {
      return { problem: `The step's output is not JSON: ${error.message}` };
    }
  }
  return { request };
}

async function launch() {
  problems.hidden = true;
  const fork = form.dataset.forkRun ? forkRequest() : undefined;
  if (fork && "envelope" in fork.request && fork.request.envelope === undefined) return;
  if (fork?.problem) {
    showProblems({ error: { details: [{ path: `/outputs/${form.dataset.forkNode}`, message: fork.problem }] } }, 0);
    return;
  }
  const posted = fork ? fork.request.envelope : envelope();
  const hidden = posted === undefined ? [] : redactedPaths(posted);
  if (hidden.length) {
    const message = `still reads ${form.dataset.redacted}: type the value again`;
    showProblems({ error: { details: hidden.map((path) => ({ path, message })) } }, 0);
    return;
  }
  const controller = new AbortController();
  const url = fork ? `/api/v1/flex/runs/${encodeURIComponent(form.dataset.forkRun)}/fork` : "/api/v1/flex/run.stream";
  const response = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json", accept: "text/event-stream" },
    body: fork ? JSON.stringify(fork.request) : envelopeText.value,
    signal: controller.signal,
  });
  const runId = response.headers.get("x-flexrun-run-id");
  if (response.ok && runId) {
    // The run goes on without this stream; its page follows it.
    controller.abort();
    location.assign(`/ui/runs/${encodeURIComponent(runId)}`);
    return;
  }
  showProblems(await response.json().catch(() => ({})), response.status);
}

envelopeText.addEventListener("change", () => {
  readConditions();
  readFields();
});
for (const field of fields) {
  field.addEventListener("input", () => writeField(field));
  field.addEventListener("change", () => writeField(field));
}
form.querySelector("[data-testid=add-condition]").addEventListener("click", () => {
  const row = conditionRow({ facet: "", path: "", condition: { dsl: "" } }, rows.children.length);
  rows.append(row);
  showConditions();
  writeConditions();
  row.querySelector("input").focus();
});
form.addEventListener("submit", (event) => {
  event.preventDefault();
  const button = form.querySelector("[data-testid=launch]");
  button.disabled = true;
  launch()
    .catch(() => showProblems({ error: { message: "The server could not be reached." } }, 0))
    .finally(() => {
      button.disabled = false;
    });
});
readConditions();
readFields();
