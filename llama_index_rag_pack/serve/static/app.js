// The rag-pack page: ask, watch the cited answer stream, click a citation to read its passage
// with the supporting sentence marked. Plain DOM, no build step; text is never parsed as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { history: [], busy: false, keys: false };
const SOURCES_LIST = /\n\nSources:\n[\s\S]*$/; // the "text" style's reference list

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("key").value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

function status(text) { $("status").textContent = text || ""; }

async function errorText(response) {
  try {
    const body = await response.json();
    return (body.error && body.error.message) || response.statusText;
  } catch (e) { return response.status + " " + response.statusText; }
}

async function loadModes() {
  const health = await (await fetch("/healthz")).json();
  state.keys = Boolean(health.keys);
  $("key-field").hidden = !state.keys;
  if (state.keys && !$("key").value) { status("Enter your API key to list the modes."); return; }
  const response = await fetch("/v1/models", { headers: headers() });
  if (!response.ok) { status(await errorText(response)); return; }
  const models = (await response.json()).data;
  const select = $("mode");
  const current = select.value;
  select.replaceChildren(...models.map((m, i) => {
    const option = document.createElement("option");
    option.value = m.id;
    option.textContent = m.id + (i === 0 ? " (default)" : "");
    return option;
  }));
  if (models.some((m) => m.id === current)) select.value = current;
  status("");
}

// The answer text with each [n] as a button that opens passage n's source.
function renderAnswer(box, text, sources) {
  const shown = text.replace(SOURCES_LIST, "");
  const parts = shown.split(/(\[\d+\])/);
  box.replaceChildren(...parts.map((part) => {
    const match = /^\[(\d+)\]$/.exec(part);
    if (!match) return document.createTextNode(part);
    const button = document.createElement("button");
    button.type = "button";
    button.className = "cite";
    button.textContent = part;
    button.dataset.number = match[1];
    button.addEventListener("click", () => openSource(sources, Number(match[1])));
    return button;
  }));
}

function openSource(sources, number) {
  const cited = (sources || []).filter((s) => s.number === number);
  if (!cited.length) { status("The sources arrive when the answer ends."); return; }
  showPassages(cited);
}

// The passage's text with each supporting span in a <mark>.
function markedText(source) {
  const text = source.text || "";
  const spans = (source.evidence || [])
    .filter((e) => Number.isInteger(e.start) && e.end > e.start)
    .map((e) => [e.start, e.end])
    .sort((a, b) => a[0] - b[0]);
  const nodes = [];
  let cursor = 0;
  for (const [start, end] of spans) {
    if (start < cursor) continue;
    nodes.push(document.createTextNode(text.slice(cursor, start)));
    const mark = document.createElement("mark");
    mark.textContent = text.slice(start, end);
    nodes.push(mark);
    cursor = end;
  }
  nodes.push(document.createTextNode(text.slice(cursor)));
  return nodes;
}

// One source's passages (a citation may stand for several chunks of one document).
function showPassages(passages) {
  const first = passages[0];
  const meta = first.metadata || {};
  $("passage-title").textContent =
    (first.number ? "[" + first.number + "] " : "") + (meta.title || meta.file_name || first.id);
  $("passage-meta").textContent = meta.url || meta.file_path || meta.source || "";
  $("passage-text").replaceChildren(...passages.map((source) => {
    const block = document.createElement("p");
    block.className = "passage";
    block.append(...markedText(source));
    return block;
  }));
  $("passage").hidden = false;
  document.body.classList.add("reading");
}

function renderSources(list, sources) {
  list.replaceChildren(...sources.map((source) => {
    const item = document.createElement("li");
    item.className = source.cited ? "cited" : "uncited";
    const meta = source.metadata || {};
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = source.cited ? "[" + source.number + "]" : "passage " + source.position;
    button.addEventListener("click", () => showPassages([source]));
    item.append(button, " " + (meta.title || meta.file_name || source.id));
    return item;
  }));
}

// Server-sent events of a streamed chat completion: calls onEvent with each JSON object.
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
      if (data && data !== "[DONE]") onEvent(JSON.parse(data));
    }
  }
}

async function ask(question) {
  const turn = document.createElement("div");
  turn.className = "turn";
  const q = document.createElement("p");
  q.className = "question";
  q.textContent = question;
  const box = document.createElement("div");
  box.className = "answer";
  const list = document.createElement("ol");
  list.className = "sources";
  turn.append(q, box, list);
  $("conversation").append(turn);
  const messages = state.history.concat([{ role: "user", content: question }]);
  const response = await fetch("/v1/chat/completions", {
    method: "POST",
    headers: headers(),
    body: JSON.stringify({ model: $("mode").value || undefined, messages, stream: true, citation_style: "text" }),
  });
  if (!response.ok) { box.classList.add("error"); box.textContent = await errorText(response); return; }
  let text = "";
  let sources = null;
  await readEvents(response, (event) => {
    if (event.error) throw new Error(event.error.message);
    if (event.sources) { sources = event.sources; return; }
    const delta = event.choices && event.choices[0] && event.choices[0].delta;
    if (delta && delta.content) { text += delta.content; renderAnswer(box, text, sources); }
  });
  renderAnswer(box, text, sources);
  renderSources(list, sources || []);
  turn.dataset.done = "true";
  state.history = messages.concat([{ role: "assistant", content: text.replace(SOURCES_LIST, "") }]);
}

$("ask-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const question = $("question").value.trim();
  if (!question || state.busy) return;
  state.busy = true;
  $("ask").disabled = true;
  status("Answering…");
  try {
    await ask(question);
    $("question").value = "";
    status("");
  } catch (e) {
    status("Failed: " + e.message);
  } finally {
    state.busy = false;
    $("ask").disabled = false;
  }
});
$("question").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); $("ask-form").requestSubmit(); }
});
$("key").addEventListener("change", loadModes);
$("reset").addEventListener("click", () => { state.history = []; $("conversation").replaceChildren(); });
$("passage-close").addEventListener("click", () => {
  $("passage").hidden = true;
  document.body.classList.remove("reading");
});
loadModes().catch((e) => status("The server did not answer: " + e.message));
