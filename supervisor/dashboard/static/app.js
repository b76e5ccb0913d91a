// mcpvisor dashboard: renders /api/events (websocket) and edits servers through /api.
// No innerHTML with data: every value is set as text. The login cookie is HttpOnly:
// this script never sees the token.
"use strict";

const LABELS = {
  ready: "ready", starting: "starting", backing_off: "backing off", circuit_open: "circuit open",
  half_open: "half open (trial)", disabled: "disabled", not_loaded: "not loaded", idle: "idle (lazy)",
  stopped: "stopped", needs_login: "needs a login",
};
const RECONNECT_MS = [250, 500, 1000, 2000, 5000];
const $ = (sel) => document.querySelector(sel);
const entries = new Map();   // name -> entry as the API gives it (secrets ***)
let editing = null;          // name of the server being edited, or null
let attempts = 0;
let toolSort = { key: "calls", desc: true };  // the tool table's order (click a header to change it)
let lastTools = null;
const SVG = "http://www.w3.org/2000/svg";
const SPARK_W = 120, SPARK_H = 22, HOUR_S = 3600;

function svg(kind, title) {
  const el = document.createElementNS(SVG, "svg");
  el.setAttribute("width", SPARK_W); el.setAttribute("height", SPARK_H);
  el.setAttribute("viewBox", `0 0 ${SPARK_W} ${SPARK_H}`);
  el.setAttribute("class", `spark ${kind}`); el.dataset.kind = kind;
  const t = document.createElementNS(SVG, "title"); t.textContent = title; el.appendChild(t);
  return el;
}

function line(el, values, cls, top) {
  // One point a minute, oldest at the left; a minute without a value breaks the line.
  const step = (SPARK_W - 4) / Math.max(values.length - 1, 1);  // 2 px of margin: a dot at the edge shows
  let points = [];
  const flush = () => {
    if (points.length === 1) {  // a lone minute: a dot, a line of one point would not show
      const [x, y] = points[0].split(",");
      const dot = document.createElementNS(SVG, "circle");
      dot.setAttribute("cx", x); dot.setAttribute("cy", y); dot.setAttribute("r", "1.6");
      dot.setAttribute("class", cls);
      el.appendChild(dot);
    } else if (points.length) {
      const pl = document.createElementNS(SVG, "polyline");
      pl.setAttribute("points", points.join(" ")); pl.setAttribute("class", cls);
      el.appendChild(pl);
    }
    points = [];
  };
  values.forEach((v, i) => {
    if (v == null) { flush(); return; }
    const y = SPARK_H - 2 - (top > 0 ? (v / top) * (SPARK_H - 4) : 0);
    points.push(`${(2 + i * step).toFixed(1)},${y.toFixed(1)}`);
  });
  flush();
}

function lastHour(td, h) {
  // Calls a minute, p50 and p99 a minute, and the state changes of the last hour.
  if (!h) { td.textContent = "–"; return; }
  const calls = h.calls.reduce((a, b) => a + b, 0);
  const rate = svg("rate", `${calls} calls in the last hour (most in a minute: ${Math.max(...h.calls)})`);
  rate.dataset.total = String(calls);
  rate.dataset.errors = String(h.errors.reduce((a, b) => a + b, 0));
  line(rate, h.calls, "calls", Math.max(...h.calls, 1));
  line(rate, h.errors, "errors", Math.max(...h.calls, 1));
  const worst = Math.max(0, ...h.p99Ms.filter((v) => v != null));
  const known = h.p50Ms.filter((v) => v != null);
  const latency = svg("latency", known.length
    ? `p50 ${known[known.length - 1]} ms, p99 ${h.p99Ms.filter((v) => v != null).pop()} ms (last minute with calls)`
    : "no calls in the last hour");
  latency.dataset.p50 = known.length ? String(known[known.length - 1]) : "";
  latency.dataset.p99 = worst ? String(worst) : "";
  line(latency, h.p99Ms, "p99", worst);
  line(latency, h.p50Ms, "p50", worst);
  const timeline = svg("timeline", `${h.states.length} state changes in the last hour`);
  timeline.dataset.changes = String(h.states.length);
  for (const [ago, state, reason] of h.states) {
    const x = Math.max(0, Math.min(SPARK_W - 2, SPARK_W - 2 - (ago / HOUR_S) * (SPARK_W - 2)));
    const tick = document.createElementNS(SVG, "rect");
    tick.setAttribute("x", x.toFixed(1)); tick.setAttribute("y", "2");
    tick.setAttribute("width", "2"); tick.setAttribute("height", String(SPARK_H - 4));
    tick.setAttribute("class", `tick ${state}`); tick.dataset.state = state;
    const t = document.createElementNS(SVG, "title");
    t.textContent = `${Math.round(ago / 60)} min ago: ${LABELS[state] || state} (${reason})`;
    tick.appendChild(t); timeline.appendChild(tick);
  }
  td.replaceChildren(rate, latency, timeline);
}

function renderTools(tools) {
  lastTools = tools;
  const body = $("#tools tbody");
  $("#tools-empty").hidden = !!(tools && tools.length);
  if (!tools) { $("#tools-empty").textContent = "Not known: this proxy records no metrics."; }
  const { key, desc } = toolSort;
  const rows = [...(tools || [])].sort((a, b) => {
    const x = a[key] ?? -1, y = b[key] ?? -1;
    return (desc ? y - x : x - y) || a.server.localeCompare(b.server) || a.tool.localeCompare(b.tool);
  });
  body.replaceChildren();
  for (const t of rows) {
    const tr = document.createElement("tr");
    tr.dataset.server = t.server; tr.dataset.tool = t.tool;
    cell(tr, t.server); cell(tr, t.tool); cell(tr, String(t.calls)); cell(tr, String(t.errors));
    cell(tr, t.p50Ms != null ? `${t.p50Ms} ms` : "–"); cell(tr, t.p99Ms != null ? `${t.p99Ms} ms` : "–");
    body.appendChild(tr);
  }
  for (const b of document.querySelectorAll("#tools th button")) {
    b.dataset.active = b.dataset.sort === key ? (desc ? "desc" : "asc") : "";
  }
}

function sortTools(ev) {
  const b = ev.target.closest("button[data-sort]");
  if (!b) return;
  toolSort = { key: b.dataset.sort, desc: toolSort.key === b.dataset.sort ? !toolSort.desc : true };
  renderTools(lastTools);
}

function fmtSeconds(s) {
  if (s == null) return "–";
  if (s < 60) return `${Math.floor(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${Math.floor(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

function stateText(s) {
  let text = LABELS[s.state] || s.state;
  if ((s.state === "circuit_open" || s.state === "backing_off") && s.retryInSeconds != null) {
    text += `, next try in ${Math.ceil(s.retryInSeconds)}s`;
  }
  return text;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  if (cls) td.className = cls;
  td.textContent = text;
  tr.appendChild(td);
  return td;
}

function button(td, label, action, name) {
  const b = document.createElement("button");
  b.type = "button"; b.textContent = label; b.dataset.action = action; b.dataset.server = name;
  td.appendChild(b);
}

function setRowState(tr, state) {
  if (tr.dataset.state === state) return;
  tr.dataset.state = state;
  const history = tr.dataset.history ? tr.dataset.history.split(" ") : [];
  history.push(state);
  tr.dataset.history = history.slice(-20).join(" ");
}

function renderStatus(report) {
  $("#summary").textContent =
    `exposure ${report.exposure || "?"} · toolset ${report.toolset || "none"} · ${report.servers.length} servers`;
  const body = $("#servers tbody");
  const seen = new Set();
  for (const s of report.servers) {
    seen.add(s.name);
    let tr = body.querySelector(`tr[data-server="${CSS.escape(s.name)}"]`);
    if (!tr) {
      tr = document.createElement("tr");
      tr.dataset.server = s.name;
      body.appendChild(tr);
    }
    setRowState(tr, s.state);
    tr.replaceChildren();
    cell(tr, s.name).title = s.description || "";
    const st = cell(tr, "");
    const badge = document.createElement("span");
    badge.className = "badge"; badge.textContent = stateText(s); st.appendChild(badge);
    if (s.reason) st.title = s.reason;
    cell(tr, s.state === "ready" ? fmtSeconds(s.uptime) : "–");
    cell(tr, s.restarts ?? "–");
    cell(tr, s.state === "ready" ? String(s.toolCount) : "–");
    const m = s.metrics;
    cell(tr, m ? String(m.callsPerMinute) : "–");
    cell(tr, m ? String(m.errorsPerMinute) : "–");
    cell(tr, m && m.p50Ms != null ? `${m.p50Ms} ms` : "–");
    lastHour(cell(tr, "", "history"), s.history);
    cell(tr, s.lastError || "", "error");
    const actions = cell(tr, "", "actions");
    if (s.state === "needs_login") button(actions, "Log in", "login", s.name);
    button(actions, "Test", "test", s.name);
    button(actions, "Edit", "edit", s.name);
    button(actions, s.state === "disabled" ? "Enable" : "Disable", s.state === "disabled" ? "enable" : "disable", s.name);
    button(actions, "Remove", "remove", s.name);
  }
  for (const tr of body.querySelectorAll("tr")) if (!seen.has(tr.dataset.server)) tr.remove();
  renderTools(report.tools);
}

function renderEvent(e) {
  if (e.type === "state") {
    const tr = $(`#servers tr[data-server="${CSS.escape(e.server)}"]`);
    if (tr) {
      setRowState(tr, e.state);
      const badge = tr.querySelector(".badge");
      if (badge) badge.textContent = LABELS[e.state] || e.state;
    }
  }
  const li = document.createElement("li");
  const when = (e.at || "").slice(11, 19);
  li.textContent = e.type === "state"
    ? `${when} ${e.server}: ${LABELS[e.previous] || e.previous} → ${LABELS[e.state] || e.state}${e.reason ? ` (${e.reason})` : ""}`
    : e.type === "list" ? `${when} tools changed (${e.kinds.join(", ")})` : `${when} ${e.text || e.type}`;
  $("#events").prepend(li);
  while ($("#events").children.length > 50) $("#events").lastChild.remove();
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${scheme}://${location.host}/api/events`);
  ws.onmessage = (msg) => {
    const data = JSON.parse(msg.data);
    if (data.type === "snapshot") {
      attempts = 0;
      $("#conn").dataset.state = "live"; $("#conn").textContent = "live";
      $("#events").replaceChildren();
      for (const e of data.status.events || []) renderEvent(e);
      renderStatus(data.status);
      refreshEntries();
    } else if (data.type === "event") {
      renderEvent(data.event);
      if (data.event.type === "list" || data.event.type === "state") refreshEntries();
    } else if (data.type === "status") {
      renderStatus(data.status);
    }
  };
  ws.onclose = () => {
    const wait = RECONNECT_MS[Math.min(attempts, RECONNECT_MS.length - 1)];
    attempts += 1;
    $("#conn").dataset.state = "lost";
    $("#conn").textContent = `connection lost, reconnecting (attempt ${attempts})…`;
    setTimeout(connect, wait);
  };
}

async function api(method, path, body) {
  const res = await fetch(path, {
    method, credentials: "same-origin",
    headers: body === undefined ? {} : { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = {};
  try { data = await res.json(); } catch (_) { /* not JSON */ }
  return { ok: res.ok, status: res.status, data };
}

async function refreshEntries() {
  const res = await api("GET", "/api/servers");
  if (!res.ok) return;
  entries.clear();
  for (const row of res.data.servers) if (row.entry) entries.set(row.name, row.entry);
}

function notice(text) { $("#notice").textContent = text; }

function lines(text) { return text.split("\n").map((l) => l.trim()).filter(Boolean); }

function pairs(text, sep) {
  const out = {};
  for (const line of lines(text)) {
    const i = line.indexOf(sep);
    if (i <= 0) { out[line] = ""; continue; }
    out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
  }
  return out;
}

function showTransport() {
  const t = $("#server-form").transport.value;
  $(".for-stdio").hidden = t !== "stdio";
  $(".for-url").hidden = t === "stdio";
}

function clearErrors() {
  for (const el of document.querySelectorAll(".field-error")) el.textContent = "";
  for (const el of document.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
}

function showErrors(fields, fallback) {
  const form = $("#server-form");
  let shown = false;
  for (const [field, message] of Object.entries(fields || {})) {
    const root = field.split(".")[0];
    const slot = document.querySelector(`.field-error[data-for="${CSS.escape(root)}"]`);
    const target = slot || $("#form-error");
    target.textContent = target.textContent ? `${target.textContent}\n${message}` : message;
    if (form.elements[root]) form.elements[root].setAttribute("aria-invalid", "true");
    shown = true;
  }
  if (!shown) $("#form-error").textContent = fallback;
}

function entryFromForm() {
  const f = $("#server-form");
  const base = editing ? { ...(entries.get(editing) || {}) } : {};
  for (const k of ["command", "args", "env", "url", "headers", "type"]) delete base[k];
  if (f.transport.value === "stdio") {
    return { ...base, command: f.command.value.trim(), args: lines(f.args.value), env: pairs(f.env.value, "=") };
  }
  return { ...base, type: f.transport.value, url: f.url.value.trim(), headers: pairs(f.headers.value, ":") };
}

function startEdit(name) {
  const e = entries.get(name);
  if (!e) { notice(`${name} is not in the config file`); return; }
  const f = $("#server-form");
  editing = name;
  $("#form-title").textContent = `Edit ${name}`;
  $("#save").textContent = "Save"; $("#cancel").hidden = false;
  f.name.value = name; f.name.readOnly = true;
  f.transport.value = e.type && e.type !== "stdio" ? e.type : "stdio";
  f.command.value = e.command || "";
  f.args.value = (e.args || []).join("\n");
  f.env.value = Object.entries(e.env || {}).map(([k, v]) => `${k}=${v}`).join("\n");
  f.url.value = e.url || "";
  f.headers.value = Object.entries(e.headers || {}).map(([k, v]) => `${k}: ${v}`).join("\n");
  showTransport(); clearErrors();
}

function stopEdit() {
  const f = $("#server-form");
  editing = null; f.reset(); f.name.readOnly = false;
  $("#form-title").textContent = "Add a server";
  $("#save").textContent = "Add"; $("#cancel").hidden = true;
  showTransport(); clearErrors();
}

async function save(ev) {
  ev.preventDefault();
  clearErrors();
  const f = $("#server-form");
  const name = f.name.value.trim();
  const res = editing
    ? await api("PUT", `/api/servers/${encodeURIComponent(editing)}`, { entry: entryFromForm() })
    : await api("POST", "/api/servers", { name, entry: entryFromForm() });
  if (!res.ok) {
    showErrors(res.data.fields, res.data.error || `HTTP ${res.status}`);
    return;
  }
  notice(editing ? `saved ${name}` : `added ${name}`);
  stopEdit();
  refreshEntries();
}

async function act(ev) {
  const b = ev.target.closest("button[data-action]");
  if (!b) return;
  const name = b.dataset.server;
  const path = `/api/servers/${encodeURIComponent(name)}`;
  if (b.dataset.action === "edit") { startEdit(name); return; }
  if (b.dataset.action === "remove") {
    if (!confirm(`Remove server ${name} from the config?`)) return;
    const res = await api("DELETE", path);
    notice(res.ok ? `removed ${name}` : res.data.error || `HTTP ${res.status}`);
    return;
  }
  if (b.dataset.action === "login") {
    // The proxy starts the server's OAuth login and answers the authorization URL; the
    // server comes up by itself once the person has logged in there.
    const res = await api("POST", `${path}/login`);
    if (!res.ok) { notice(res.data.error || `HTTP ${res.status}`); return; }
    window.open(res.data.url, "_blank", "noopener");
    notice(`log in to ${name} in the new tab`);
    return;
  }
  if (b.dataset.action === "test") {
    notice(`testing ${name}…`);
    const res = await api("POST", `${path}/test`);
    const out = $("#test-result");
    out.hidden = false;
    if (!res.ok) { out.textContent = res.data.error || `HTTP ${res.status}`; notice(""); return; }
    const r = res.data;
    const steps = r.steps.map((s) => `  ${s.ok ? "✓" : "✗"} ${s.name.padEnd(22)} ${(s.seconds * 1000).toFixed(0)} ms  ${s.detail || ""}`);
    const tail = r.ok ? `OK: ${r.server} is online with ${r.toolCount} tools (${(r.seconds * 1000).toFixed(0)} ms)`
      : `FAILED: ${r.server}: ${r.failure.message}` + (r.failure.stderr.length ? `\n  last stderr lines:\n    ${r.failure.stderr.join("\n    ")}` : "")
        + (r.failure.hint ? `\n  hint: ${r.failure.hint}` : "");
    out.textContent = [`Testing ${r.server}`, ...steps, tail].join("\n");
    notice("");
    return;
  }
  const res = await api("POST", `${path}/${b.dataset.action}`);
  notice(res.ok ? `${b.dataset.action}d ${name}` : res.data.error || `HTTP ${res.status}`);
}

document.addEventListener("DOMContentLoaded", () => {
  $("#server-form").addEventListener("submit", save);
  $("#server-form").transport.addEventListener("change", showTransport);
  $("#cancel").addEventListener("click", stopEdit);
  $("#servers").addEventListener("click", act);
  $("#tools").addEventListener("click", sortTools);
  showTransport();
  connect();
});
