// The wstream web UI: plain JavaScript over the REST API (/v1/), redrawn
// from polls. Every text that comes from the cluster goes in as
// textContent, never as HTML: job names, vertex ids and error messages
// are data.
"use strict";

const POLL_MS = 1000;
let token = localStorage.getItem("wstream-token") || "";
let timer = null;
let view = { route: "", selectedCheckpoint: null, lastRequest: null };

// h builds an element: h("td", {class: "num"}, "12").
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

class HTTPError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

async function api(path, opts = {}) {
  const headers = { "Accept": "application/json" };
  if (token) headers["Authorization"] = "Bearer " + token;
  if (opts.body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method: opts.method || "GET", headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
  let data = null;
  try { data = await res.json(); } catch (e) { /* no body */ }
  if (res.status === 401) {
    showLogin(data && data.error);
    throw new HTTPError(401, "not signed in");
  }
  if (!res.ok) throw new HTTPError(res.status, (data && data.error) || res.statusText);
  return data;
}

function showLogin(msg) {
  document.getElementById("login").hidden = false;
  document.getElementById("main").hidden = true;
  document.getElementById("login-error").textContent = token ? (msg || "the token was refused") : "";
}

document.getElementById("login-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = document.getElementById("token").value.trim();
  localStorage.setItem("wstream-token", token);
  document.getElementById("login").hidden = true;
  document.getElementById("main").hidden = false;
  refresh();
});

// Formatting.
function fmtBytes(n) {
  if (n === undefined || n === null) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, f = n;
  while (f >= 1024 && i < u.length - 1) { f /= 1024; i++; }
  return (i === 0 ? f : f.toFixed(1)) + " " + u[i];
}
function fmtMs(ms) {
  if (ms === undefined || ms === null) return "";
  if (ms < 1000) return ms + " ms";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(1) + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + "m " + Math.floor(s % 60) + "s";
  return Math.floor(m / 60) + "h " + (m % 60) + "m";
}
function fmtTime(t) {
  if (!t) return "";
  const d = typeof t === "number" ? new Date(t) : new Date(t);
  return d.toLocaleString();
}
function fmtRate(r) { return r === undefined ? "" : (r >= 100 ? Math.round(r) : r.toFixed(1)) + "/s"; }
function pct(r) { return Math.round((r || 0) * 100) + "%"; }
function bpText(level) { return level ? level : "no sample yet"; }
function bpClass(level) { return level ? "bp-" + level : "bp-none"; }
function stateBadge(s) { return h("span", { class: "state " + s, "data-state": s }, s); }

function route() { return location.hash.replace(/^#/, "") || "/jobs"; }

async function refresh() {
  clearTimeout(timer);
  const r = route();
  if (r !== view.route) view = { route: r, selectedCheckpoint: null, lastRequest: null };
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", r.startsWith(a.getAttribute("href").slice(1)));
  const main = document.getElementById("main");
  try {
    let content;
    const m = r.match(/^\/jobs\/([^/]+)$/);
    if (m) content = await jobPage(decodeURIComponent(m[1]));
    else if (r === "/workers") content = await workersPage();
    else content = await jobsPage();
    main.replaceChildren(content);
    document.getElementById("conn").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    if (e.status === 401) return;
    main.replaceChildren(h("p", { class: "error", id: "page-error" }, String(e.message)));
  }
  timer = setTimeout(refresh, POLL_MS);
}

window.addEventListener("hashchange", refresh);

async function jobsPage() {
  const [ov, jobs] = await Promise.all([api("/v1/overview"), api("/v1/jobs")]);
  const who = document.getElementById("who");
  who.replaceChildren();
  if (ov.tenant || ov.tenants || token) {
    who.append(h("span", { id: "who-name" }, "signed in as " + (ov.tenant || "admin")), " ",
      h("button", { id: "sign-out", onclick: () => { token = ""; localStorage.removeItem("wstream-token"); showLogin(); } }, "sign out"));
  }
  document.getElementById("nav-workers").hidden = !ov.workers;
  const cards = h("div", { class: "cards" });
  const card = (k, v, id) => h("div", { class: "card" }, h("div", { class: "v", id }, v), h("div", { class: "k" }, k));
  if (ov.workers) {
    cards.append(card("live workers", ov.workers.live, "ov-workers"),
      card("slots used", ov.workers.slotsUsed + " / " + (ov.workers.unlimited ? "∞" : ov.workers.slots), "ov-slots"));
  }
  for (const [s, n] of Object.entries(ov.jobs).sort()) cards.append(card(s.toLowerCase() + " jobs", n));
  const rows = jobs.jobs.slice().reverse().map((j) => h("tr", { class: "clickable", onclick: () => { location.hash = "#/jobs/" + encodeURIComponent(j.jobId); } },
    h("td", {}, h("a", { class: "job-link", "data-job": j.jobId, href: "#/jobs/" + encodeURIComponent(j.jobId) }, j.jobId)),
    h("td", {}, j.name),
    h("td", {}, stateBadge(j.state)),
    h("td", { class: "num" }, j.attempt),
    h("td", { class: "num" }, j.restarts || 0),
    h("td", {}, fmtTime(j.started)),
    h("td", {}, j.tenant || ""),
    h("td", { class: "error" }, j.cause || j.error || "")));
  return h("div", {}, h("h1", {}, "Cluster"), cards, h("h2", {}, "Jobs"),
    h("table", { id: "jobs" }, h("thead", {}, h("tr", {}, ["job", "name", "state", "attempt", "restarts", "started", "tenant", "latest cause"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 8, class: "muted" }, "no jobs")))));
}

async function workersPage() {
  const data = await api("/v1/workers");
  const rows = data.workers.map((w) => h("tr", {},
    h("td", {}, w.id), h("td", {}, w.live ? "live" : "lost"),
    h("td", { class: "num" }, w.slots === 0 ? "unlimited" : w.slots), h("td", { class: "num" }, w.used),
    h("td", {}, fmtTime(w.lastSeen)),
    h("td", {}, w.subtasks.map((s) => s.jobId + " " + s.chain + "/" + s.subtask).join(", "))));
  return h("div", {}, h("h1", {}, "Workers"),
    h("table", { id: "workers" }, h("thead", {}, h("tr", {}, ["worker", "status", "slots", "used", "last heartbeat", "subtasks"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 6, class: "muted" }, "no workers")))));
}

async function jobPage(id) {
  const base = "/v1/jobs/" + encodeURIComponent(id);
  const [job, exc, sps] = await Promise.all([api(base), api(base + "/exceptions"), api(base + "/savepoints")]);
  let ck = null, hist = null, sum = null, detail = null;
  if (job.checkpointing) {
    [ck, hist, sum] = await Promise.all([api(base + "/checkpoints"), api(base + "/checkpoints/history?limit=20"), api(base + "/checkpoints/summary")]);
    if (view.selectedCheckpoint) {
      try { detail = await api(base + "/checkpoints/" + view.selectedCheckpoint); } catch (e) { detail = null; }
    }
  }
  const running = !["FINISHED", "FAILED", "CANCELED", "SUSPENDED"].includes(job.state);
  const out = h("div", { id: "job", "data-job": job.jobId });
  out.append(h("h1", {}, job.name, " ", stateBadge(job.state)),
    h("div", { class: "muted" }, job.jobId, " · attempt ", job.attempt, " · restarts ", job.restarts || 0, " · running for ", fmtMs(job.durationMillis),
      job.module ? " · module " + job.module : ""));
  if (job.error) out.append(h("pre", { class: "error msg" }, job.error));

  // Actions.
  const status = h("span", { id: "savepoint-status" });
  const latest = sps.requests[0];
  if (latest) {
    status.setAttribute("data-status", latest.status);
    status.setAttribute("data-request", latest.requestId);
    status.textContent = latest.kind + (latest.savepointId ? " " + latest.savepointId : "") + ": " + latest.status +
      (latest.location ? " — " + latest.location : "") + (latest.error ? " — " + latest.error : "");
  }
  const act = async (path, body, confirmText) => {
    if (confirmText && !confirm(confirmText)) return;
    try {
      await api(base + path, { method: "POST", body });
    } catch (e) {
      status.setAttribute("data-status", "ERROR");
      status.textContent = e.message;
      return;
    }
    refresh();
  };
  if (running && job.checkpointing) {
    out.append(h("div", { class: "actions" },
      h("button", { id: "trigger-savepoint", onclick: () => act("/savepoints", {}) }, "Trigger savepoint"),
      h("button", { id: "stop-job", onclick: () => act("/stop", {}, "Stop job " + job.jobId + " with a savepoint?") }, "Stop with savepoint"),
      h("button", { id: "cancel-job", class: "danger", onclick: () => act("/cancel", {}, "Cancel job " + job.jobId + "?") }, "Cancel"),
      status));
  } else if (running) {
    out.append(h("div", { class: "actions" },
      h("button", { id: "cancel-job", class: "danger", onclick: () => act("/cancel", {}, "Cancel job " + job.jobId + "?") }, "Cancel"), status));
  } else {
    out.append(h("div", { class: "actions" }, status));
  }

  out.append(h("h2", {}, "Graph"), graph(job));
  out.append(h("h2", {}, "Vertices"), verticesTable(job));
  if (job.checkpointing) out.append(checkpointsSection(job, ck, hist, sum, detail));
  out.append(exceptionsSection(exc));
  return out;
}

// graph draws the job's vertices by level (longest path from a source),
// left to right, each with its rates and backpressure.
function graph(job) {
  const level = {};
  const byId = Object.fromEntries(job.vertices.map((v) => [v.id, v]));
  const inputs = {};
  for (const e of job.edges) (inputs[e.to] = inputs[e.to] || []).push(e.from);
  const lvl = (id, seen = new Set()) => {
    if (level[id] !== undefined) return level[id];
    if (seen.has(id)) return 0;
    seen.add(id);
    const ins = inputs[id] || [];
    level[id] = ins.length ? Math.max(...ins.map((f) => lvl(f, seen))) + 1 : 0;
    return level[id];
  };
  job.vertices.forEach((v) => lvl(v.id));
  const cols = {};
  const pos = {};
  const W = 210, H = 92, GX = 70, GY = 26;
  for (const v of job.vertices) {
    const l = level[v.id];
    cols[l] = (cols[l] || 0) + 1;
    pos[v.id] = { x: 20 + l * (W + GX), y: 20 + (cols[l] - 1) * (H + GY) };
  }
  const width = 40 + (Math.max(0, ...Object.keys(cols).map(Number)) + 1) * (W + GX);
  const height = 40 + Math.max(1, ...Object.values(cols)) * (H + GY);
  const s = svg("svg", { width, height, id: "graph-svg" },
    svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
      svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#7d8896" }))));
  for (const e of job.edges) {
    const a = pos[e.from], b = pos[e.to];
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    s.append(svg("path", { class: "edge", d: `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}`, "marker-end": "url(#arrow)" }));
    s.append(svg("text", { x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 4, "text-anchor": "middle", fill: "#5b6675" }, e.partition || "forward"));
  }
  for (const v of job.vertices) {
    const p = pos[v.id], m = v.metrics;
    const g = svg("g", { class: "node " + bpClass(m.backpressure), "data-vertex": v.id, transform: `translate(${p.x},${p.y})` },
      svg("rect", { width: W, height: H }),
      svg("text", { x: 10, y: 18, class: "title" }, v.id),
      svg("text", { x: 10, y: 35, fill: "#5b6675" }, v.kind + (v.connector ? " · " + v.connector : v.operator ? " · " + v.operator : "") + " · p=" + v.parallelism),
      svg("text", { x: 10, y: 53 }, m.sampled ? "in " + fmtRate(m.recordsInPerSec) + "  out " + fmtRate(m.recordsOutPerSec) : "no sample yet"),
      svg("text", { x: 10, y: 71, class: bpClass(m.backpressure) }, m.sampled ? "backpressure " + m.backpressure + " (" + pct(m.backpressureRatio) + ") · busy " + pct(m.busyRatio) : ""));
    s.append(g);
  }
  return h("div", { id: "graph" }, s);
}

function verticesTable(job) {
  const rows = [];
  for (const v of job.vertices) {
    const m = v.metrics;
    rows.push(h("tr", { "data-vertex": v.id },
      h("td", {}, v.id), h("td", {}, v.kind), h("td", { class: "num" }, v.parallelism),
      h("td", { class: "num" }, m.sampled ? m.recordsIn : ""), h("td", { class: "num" }, m.sampled ? m.recordsOut : ""),
      h("td", { class: "num" }, m.sampled ? fmtBytes(m.bytesIn) : ""), h("td", { class: "num" }, m.sampled ? fmtBytes(m.bytesOut) : ""),
      h("td", { class: "num" }, m.sampled ? fmtRate(m.recordsInPerSec) : ""), h("td", { class: "num" }, m.sampled ? fmtRate(m.recordsOutPerSec) : ""),
      h("td", { class: bpClass(m.backpressure) }, bpText(m.backpressure)), h("td", { class: "num" }, m.sampled ? pct(m.busyRatio) : ""),
      h("td", {}, m.watermark !== null && m.watermark !== undefined ? fmtTime(m.watermark) : ""),
      h("td", {}, v.subtasks.map((st) => h("div", {},
        st.subtask + " @ " + (st.worker || "—") + ": " + (st.metrics ? "bp " + st.backpressure + " " + pct(st.backpressureRatio) + ", busy " + pct(st.busyRatio) : "no sample yet"))))));
  }
  return h("table", { id: "vertices" },
    h("thead", {}, h("tr", {}, ["vertex", "kind", "parallelism", "records in", "records out", "bytes in", "bytes out", "in rate", "out rate", "backpressure", "busy", "watermark", "subtasks"].map((t) => h("th", {}, t)))),
    h("tbody", {}, rows));
}

function checkpointsSection(job, ck, hist, sum, detail) {
  const c = ck.counts;
  const card = (k, v, id) => h("div", { class: "card" }, h("div", { class: "v", id }, v), h("div", { class: "k" }, k));
  const latest = (label, x) => h("tr", {}, h("th", {}, label),
    h("td", {}, x ? x.id + " · " + fmtTime(x.endTime || x.triggerTime) + " · " + fmtMs(x.durationMillis) + " · " + fmtBytes(x.stateSize) + (x.reason ? " · " + x.reason : "") : "none"));
  const restored = ck.latest.restored;
  const mam = (label, x, f) => h("tr", {}, h("th", {}, label), h("td", { class: "num" }, f(x.min)), h("td", { class: "num" }, f(x.avg)), h("td", { class: "num" }, f(x.max)));
  const rows = hist.history.map((x) => h("tr", {
    class: "clickable" + (String(x.id) === String(view.selectedCheckpoint) ? " selected" : ""), "data-checkpoint": x.id, "data-status": x.status,
    onclick: () => { view.selectedCheckpoint = x.id; refresh(); },
  },
  h("td", { class: "num" }, x.id), h("td", {}, x.kind), h("td", {}, x.status), h("td", {}, fmtTime(x.triggerTime)),
  h("td", { class: "num" }, fmtMs(x.durationMillis)), h("td", { class: "num" }, fmtBytes(x.stateSize)), h("td", { class: "num" }, fmtBytes(x.uploaded)),
  h("td", { class: "num" }, fmtBytes(x.inFlightBytes)), h("td", { class: "num" }, fmtMs(x.alignmentMillis)), h("td", { class: "error" }, x.reason || "")));
  const sec = h("section", { id: "checkpoints" }, h("h2", {}, "Checkpoints"),
    h("div", { class: "cards" }, card("completed", c.completed, "ckpt-completed"), card("failed", c.failed, "ckpt-failed"),
      card("in progress", c.inProgress, "ckpt-inprogress"), card("restored", c.restored, "ckpt-restored")),
    h("table", {}, h("tbody", {}, latest("latest completed", ck.latest.completed), latest("latest savepoint", ck.latest.savepoint), latest("latest failed", ck.latest.failed),
      h("tr", {}, h("th", {}, "restored"), h("td", {}, restored ? restored.kind + " " + restored.id + " from " + restored.location + " (attempt " + restored.attempt + ")" : "none")),
      h("tr", {}, h("th", {}, "settings"), h("td", {}, "every " + fmtMs(ck.settings.intervalMillis) + ", " + ck.settings.mode + ", storage " + ck.settings.storage)))),
    h("h2", {}, "Summary"),
    h("table", { id: "ckpt-summary" }, h("thead", {}, h("tr", {}, ["", "min", "avg", "max"].map((t) => h("th", { class: t ? "num" : "" }, t)))),
      h("tbody", {}, mam("duration", sum.durationMillis, fmtMs), mam("state size", sum.stateSize, fmtBytes), mam("uploaded", sum.uploaded, fmtBytes),
        mam("in-flight", sum.inFlightBytes, fmtBytes), mam("alignment", sum.alignmentMillis, fmtMs))),
    h("h2", {}, "History"),
    h("table", { id: "ckpt-history" }, h("thead", {}, h("tr", {}, ["id", "kind", "status", "triggered", "duration", "state", "uploaded", "in-flight", "alignment", "reason"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 10, class: "muted" }, "no checkpoint has ended yet")))));
  if (detail) {
    const srows = detail.subtasks.map((s) => h("tr", {},
      h("td", {}, s.chain), h("td", { class: "num" }, s.subtask), h("td", {}, s.acknowledged ? "yes" : "finished before"),
      h("td", { class: "num" }, fmtMs(s.startDelayMillis)), h("td", { class: "num" }, fmtMs(s.alignmentMillis)), h("td", { class: "num" }, fmtMs(s.syncMillis)),
      h("td", { class: "num" }, fmtMs(s.asyncMillis)), h("td", { class: "num" }, fmtBytes(s.stateSize)), h("td", { class: "num" }, fmtBytes(s.uploaded)),
      h("td", { class: "num" }, fmtBytes(s.inFlightBytes)), h("td", {}, s.unaligned ? "unaligned" : "aligned")));
    sec.append(h("h2", {}, "Checkpoint " + detail.id + " by subtask"),
      h("table", { id: "ckpt-detail", "data-checkpoint": detail.id }, h("thead", {}, h("tr", {}, ["chain", "subtask", "acknowledged", "start delay", "alignment", "sync", "async", "state", "uploaded", "in-flight", "mode"].map((t) => h("th", {}, t)))),
        h("tbody", {}, srows.length ? srows : h("tr", {}, h("td", { colspan: 11, class: "muted" }, "no subtask figures are kept for this checkpoint")))));
  }
  return sec;
}

function exceptionsSection(exc) {
  const rows = exc.entries.map((e) => h("tr", {},
    h("td", {}, fmtTime(e.time)), h("td", {}, e.kind), h("td", { class: "num" }, e.attempt),
    h("td", {}, e.chain ? e.chain + "/" + e.subtask + (e.worker ? " @ " + e.worker : "") + (e.afterPeer ? " (after a peer)" : "") : ""),
    h("td", {}, h("pre", { class: "msg" }, e.message))));
  return h("section", { id: "exceptions" }, h("h2", {}, "Exceptions"),
    exc.truncated ? h("p", { class: "muted" }, "older failures were dropped") : null,
    h("table", {}, h("thead", {}, h("tr", {}, ["time", "kind", "attempt", "where", "message"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 5, class: "muted" }, "no exceptions")))));
}

refresh();
