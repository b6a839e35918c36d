// The wstream web UI: plain JavaScript over the REST API (/v1/), built
// anew from each poll and patched into the page (patch): only what
// changed is touched, so a selection, the scroll position and what is
// typed in a form survive the refresh. Every text that comes from the
// cluster goes in as textContent, never as HTML: job names, vertex ids
// and error messages are data.
"use strict";

let POLL_MS = 1000;
let token = localStorage.getItem("wstream-token") || "";
let timer = null;
let view = { route: "", selectedCheckpoint: null, lastRequest: null };
let serverConfig = null;

// h builds an element: h("td", {class: "num"}, "12"). Handlers are
// properties (onclick...), so that patch can hand them to the element
// the page keeps.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el[k] = v;
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

// patch makes the children of parent those of next (a fresh tree),
// changing the page's nodes in place: a node of the same kind (and the
// same data-key, when it has one) is kept and updated, its text changed
// only when it differs. What the user selected, scrolled or typed stays.
function patch(parent, next) {
  const want = Array.from(next.childNodes);
  let cur = parent.firstChild;
  for (const n of want) {
    if (cur && same(cur, n)) {
      update(cur, n);
      cur = cur.nextSibling;
    } else {
      parent.insertBefore(n, cur);
    }
  }
  while (cur) {
    const after = cur.nextSibling;
    parent.removeChild(cur);
    cur = after;
  }
}

function same(a, b) {
  if (a.nodeType !== b.nodeType || a.nodeName !== b.nodeName) return false;
  if (a.nodeType !== 1) return true;
  return a.getAttribute("data-key") === b.getAttribute("data-key") && a.id === b.id;
}

function update(cur, n) {
  if (cur.nodeType === 3) {
    if (cur.nodeValue !== n.nodeValue) cur.nodeValue = n.nodeValue;
    return;
  }
  if (cur.nodeType !== 1) return;
  // A <details> the user opened stays open.
  for (const a of Array.from(cur.attributes)) if (!n.hasAttribute(a.name) && a.name !== "open") cur.removeAttribute(a.name);
  for (const a of Array.from(n.attributes)) if (cur.getAttribute(a.name) !== a.value) cur.setAttribute(a.name, a.value);
  for (const ev of ["onclick", "onsubmit", "onchange"]) cur[ev] = n[ev];
  // A form's fields keep what the user typed; a file input cannot be set.
  if (cur.nodeName === "INPUT" || cur.nodeName === "SELECT" || cur.nodeName === "TEXTAREA") return;
  patch(cur, n);
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
// Watermarks before 2000 are synthetic event time (gen's counts from 0):
// shown as a number, not as a date in 1970.
const MIN_WALL_CLOCK_MS = 946684800000;
function fmtWatermark(w) {
  if (w === undefined || w === null) return "";
  return w >= MIN_WALL_CLOCK_MS ? fmtTime(w) : "event time " + w + " ms";
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
  if (r !== view.route) view = { route: r, selectedCheckpoint: null, lastRequest: null, deploy: view.deploy };
  if (!serverConfig) {
    try {
      serverConfig = await api("/v1/config");
      POLL_MS = serverConfig.refreshMillis || POLL_MS;
    } catch (e) {
      if (e.status === 401) return;
    }
  }
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", r.startsWith(a.getAttribute("href").slice(1)));
  const main = document.getElementById("main");
  try {
    let content;
    const m = r.match(/^\/jobs\/([^/]+)$/);
    if (m) content = await jobPage(decodeURIComponent(m[1]));
    else if (r === "/workers") content = await workersPage();
    else content = await jobsPage();
    const holder = document.createElement("div");
    holder.append(content);
    patch(main, holder);
    document.getElementById("conn").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    if (e.status === 401) return;
    const holder = document.createElement("div");
    holder.append(h("p", { class: "error", id: "page-error" }, String(e.message)));
    patch(main, holder);
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
  // A row is opened by its link: a click on the row elsewhere may be the
  // end of a selection (of the job id, to copy it).
  const rows = jobs.jobs.slice().reverse().map((j) => h("tr", { "data-key": j.jobId },
    h("td", {}, h("a", { class: "job-link", "data-job": j.jobId, href: "#/jobs/" + encodeURIComponent(j.jobId) }, j.jobId)),
    h("td", {}, j.name),
    h("td", {}, stateBadge(j.state)),
    h("td", { class: "num" }, j.attempt),
    h("td", { class: "num" }, j.restarts),
    h("td", { class: "num" }, j.tasks ? j.tasks.deployed + " / " + j.tasks.total : ""),
    h("td", {}, fmtTime(j.startTime)),
    h("td", { class: "num" }, fmtMs(j.durationMillis)),
    h("td", {}, j.endTime ? fmtTime(j.endTime) : ""),
    h("td", {}, j.tenant),
    h("td", { class: "error" }, j.cause || j.error)));
  return h("div", { id: "jobs-page" }, h("h1", {}, "Cluster"), cards,
    serverConfig && serverConfig.features.includes("deploy") ? deployForm() : null,
    h("h2", {}, "Jobs"),
    h("table", { id: "jobs" }, h("thead", {}, h("tr", {}, ["job", "name", "state", "attempt", "restarts", "tasks", "started", "duration", "ended", "tenant", "latest cause"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 11, class: "muted" }, "no jobs")))));
}

// deployForm uploads a module with POST /v1/jobs (multipart).
function deployForm() {
  const submit = async (ev) => {
    ev.preventDefault();
    const form = ev.target;
    const out = { dataset: {} };
    const show = () => { view.deploy = { status: out.dataset.status, job: out.dataset.job, text: out.textContent }; refresh(); };
    const fd = new FormData();
    const mod = form.querySelector("#deploy-module").files[0];
    if (!mod) { out.dataset.status = "ERROR"; out.textContent = "choose a module (.wasm) first"; show(); return; }
    fd.append("module", mod, mod.name);
    const plan = form.querySelector("#deploy-plan").files[0];
    if (plan) fd.append("plan", plan, plan.name);
    for (const [k, sel] of [["name", "#deploy-name"], ["parallelism", "#deploy-parallelism"], ["checkpointInterval", "#deploy-interval"], ["source", "#deploy-source"]]) {
      const v = form.querySelector(sel).value.trim();
      if (v) fd.append(k, v);
    }
    out.dataset.status = "DEPLOYING";
    out.textContent = "deploying " + mod.name + "…";
    show();
    const headers = { "Accept": "application/json", "Wstream-Deploy": "1" };
    if (token) headers["Authorization"] = "Bearer " + token;
    let res, data = null;
    try {
      res = await fetch("/v1/jobs", { method: "POST", headers, body: fd });
      data = await res.json();
    } catch (e) {
      out.dataset.status = "ERROR"; out.textContent = String(e.message); show(); return;
    }
    if (!res.ok) { out.dataset.status = "ERROR"; out.textContent = (data && data.error) || res.statusText; show(); return; }
    out.dataset.status = "DEPLOYED";
    out.dataset.job = data.jobId;
    out.textContent = "deployed as " + data.jobId;
    view.deploy = { status: out.dataset.status, job: out.dataset.job, text: out.textContent };
    location.hash = "#/jobs/" + encodeURIComponent(data.jobId);
  };
  const d = view.deploy || {};
  return h("details", { id: "deploy" }, h("summary", {}, "Deploy a module"),
    h("form", { id: "deploy-form", onsubmit: submit },
      h("label", {}, "module (.wasm) ", h("input", { id: "deploy-module", type: "file", accept: ".wasm" })),
      h("label", {}, "plan (JSON, optional) ", h("input", { id: "deploy-plan", type: "file", accept: ".json" })),
      h("label", {}, "name ", h("input", { id: "deploy-name", type: "text", size: 14 })),
      h("label", {}, "parallelism ", h("input", { id: "deploy-parallelism", type: "number", min: 1, size: 4 })),
      h("label", {}, "checkpoint every (ms) ", h("input", { id: "deploy-interval", type: "number", min: 0, size: 6 })),
      h("label", {}, "source ", h("input", { id: "deploy-source", type: "text", size: 22, placeholder: "gen:rate=500" })),
      h("button", { type: "submit", id: "deploy-submit" }, "Deploy"),
      h("span", { id: "deploy-status", "data-status": d.status, "data-job": d.job }, d.text)));
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
  const [job, exc, sps, rescale] = await Promise.all([api(base), api(base + "/exceptions"), api(base + "/savepoints"),
    api(base + "/rescale").catch((e) => { if (e.status === 404) return null; throw e; })]);
  let ck = null, hist = null, sum = null, detail = null;
  if (job.checkpointing) {
    [ck, hist, sum] = await Promise.all([api(base + "/checkpoints"), api(base + "/checkpoints/history?limit=50"), api(base + "/checkpoints/summary")]);
    if (view.selectedCheckpoint) {
      try { detail = await api(base + "/checkpoints/" + view.selectedCheckpoint); } catch (e) { detail = null; }
    }
  }
  record(job);
  const running = job.endTime === null;
  const out = h("div", { id: "job", "data-job": job.jobId });
  out.append(h("h1", {}, job.name, " ", stateBadge(job.state)),
    h("div", { class: "muted", id: "job-header" }, h("span", { class: "job-id", id: "job-id" }, job.jobId), " · attempt ", job.attempt, " · restarts ", job.restarts,
      running ? " · running for " + fmtMs(job.durationMillis) : " · ran for " + fmtMs(job.durationMillis) + ", ended " + fmtTime(job.endTime),
      job.tasks ? " · tasks " + job.tasks.deployed + " / " + job.tasks.total : "",
      job.module ? " · module " + job.module : ""));
  if (job.error) out.append(h("pre", { class: "error msg" }, job.error));

  // Actions. Their outcome is what the server says, shown by the next
  // refresh; act writes into the element the page holds.
  const latest = sps.requests[0];
  const status = h("span", { id: "savepoint-status", "data-status": latest && latest.status, "data-request": latest && latest.requestId },
    latest ? latest.kind + (latest.savepointId ? " " + latest.savepointId : "") + ": " + latest.status +
      (latest.location ? " — " + latest.location : "") + (latest.error ? " — " + latest.error : "") : "");
  const act = async (path, body, confirmText) => {
    if (confirmText && !confirm(confirmText)) return;
    try {
      await api(base + path, { method: "POST", body });
    } catch (e) {
      const st = document.getElementById("savepoint-status");
      st.setAttribute("data-status", "ERROR");
      st.textContent = e.message;
      return;
    }
    refresh();
  };
  const rescaleStatus = h("span", { id: "rescale-status", "data-status": rescale && rescale.status, "data-attempt": rescale && rescale.attempt },
    rescale ? "rescale to " + (rescale.parallelism || JSON.stringify(rescale.vertices)) + ": " + rescale.status +
      (rescale.savepoint ? " (savepoint " + rescale.savepoint + ", attempt " + rescale.attempt + ")" : "") + (rescale.error ? " — " + rescale.error : "") : "");
  const rescaleBox = serverConfig && serverConfig.features.includes("rescale") && running && job.checkpointing ? h("form", {
    id: "rescale-form", class: "inline",
    onsubmit: (ev) => {
      ev.preventDefault();
      const n = Number(document.getElementById("rescale-parallelism").value);
      if (!(n >= 1)) return;
      act("/rescale", { parallelism: n }, null);
    },
  }, h("input", { id: "rescale-parallelism", type: "number", min: 1, max: job.maxParallelism, size: 4, placeholder: "p" }),
  h("button", { type: "submit", id: "rescale-job" }, "Rescale")) : null;
  if (running && job.checkpointing) {
    out.append(h("div", { class: "actions" },
      h("button", { id: "trigger-savepoint", onclick: () => act("/savepoints", {}) }, "Trigger savepoint"),
      h("button", { id: "stop-job", onclick: () => act("/stop", {}, "Stop job " + job.jobId + " with a savepoint?") }, "Stop with savepoint"),
      h("button", { id: "cancel-job", class: "danger", onclick: () => act("/cancel", {}, "Cancel job " + job.jobId + "?") }, "Cancel"),
      rescaleBox, status, rescaleStatus));
  } else if (running) {
    out.append(h("div", { class: "actions" },
      h("button", { id: "cancel-job", class: "danger", onclick: () => act("/cancel", {}, "Cancel job " + job.jobId + "?") }, "Cancel"), status, rescaleStatus));
  } else {
    out.append(h("div", { class: "actions" }, status, rescaleStatus));
  }

  out.append(h("h2", {}, "Graph"), graph(job));
  out.append(h("h2", {}, "Over the last minutes"), plots(job, hist));
  out.append(h("h2", {}, "Vertices"), verticesTable(job));
  if (job.checkpointing) out.append(checkpointsSection(job, ck, hist, sum, detail));
  out.append(exceptionsSection(exc));
  return out;
}

// The page keeps the samples it polled, per job, for PLOT_MS: the plots
// draw them.
const PLOT_MS = 5 * 60 * 1000;
const samples = {};

function record(job) {
  const list = samples[job.jobId] = samples[job.jobId] || [];
  if (list.length && list[list.length - 1].t === job.now) return;
  const s = { t: job.now, in: {}, out: {}, bp: {}, lag: null };
  for (const v of job.vertices) {
    const m = v.metrics;
    if (!m.sampled) continue;
    s.in[v.id] = m.recordsInPerSec;
    s.out[v.id] = m.recordsOutPerSec;
    s.bp[v.id] = m.backpressureRatio * 100;
    if (m.watermark !== null && m.watermark >= MIN_WALL_CLOCK_MS) {
      const lag = Math.max(0, job.now - m.watermark) / 1000;
      s.lag = s.lag === null ? lag : Math.max(s.lag, lag);
    }
  }
  list.push(s);
  while (list.length && list[0].t < job.now - PLOT_MS) list.shift();
}

const COLORS = ["#2f6fd6", "#2f9e55", "#d08a00", "#b02a37", "#7a4fc4", "#178c8c", "#8a5a2b"];

// plots draws the recorded samples and the checkpoint history.
function plots(job, hist) {
  const list = samples[job.jobId] || [];
  const perVertex = (key) => job.vertices.map((v) => ({ name: v.id, points: list.filter((s) => s[key][v.id] !== undefined).map((s) => [s.t, s[key][v.id]]) }))
    .filter((x) => x.points.length);
  const from = job.now - PLOT_MS;
  const ck = hist ? hist.history.filter((c) => c.status === "completed" && c.endTime).slice().reverse() : [];
  const ckFrom = ck.length ? Math.min(ck[0].endTime, from) : from;
  return h("div", { class: "plots", id: "plots" },
    plot("plot-in", "records in / s", perVertex("in"), from, job.now, fmtNum),
    plot("plot-out", "records out / s", perVertex("out"), from, job.now, fmtNum),
    plot("plot-bp", "backpressure %", perVertex("bp"), from, job.now, (v) => Math.round(v) + "%", 100),
    plot("plot-lag", "watermark lag", [{ name: "lag", points: list.filter((s) => s.lag !== null).map((s) => [s.t, s.lag]) }].filter((x) => x.points.length),
      from, job.now, (v) => v.toFixed(1) + " s", 0, "no wall-clock watermark"),
    job.checkpointing ? plot("plot-ckpt-duration", "checkpoint duration", [{ name: "duration", points: ck.map((c) => [c.endTime, c.durationMillis]) }].filter((x) => x.points.length),
      ckFrom, job.now, fmtMs, 0, "no checkpoint yet") : null,
    job.checkpointing ? plot("plot-ckpt-size", "checkpoint size", [{ name: "state", points: ck.map((c) => [c.endTime, c.stateSize]) }, { name: "uploaded", points: ck.map((c) => [c.endTime, c.uploaded]) }].filter((x) => x.points.length),
      ckFrom, job.now, fmtBytes, 0, "no checkpoint yet") : null);
}

function fmtNum(v) { return v >= 100 ? String(Math.round(v)) : v.toFixed(1); }

// plot draws series of [time ms, value] as lines over [t0, t1], with the
// largest value (at least minMax) at the top and the latest value of each
// series in its legend.
function plot(id, title, series, t0, t1, fmt, minMax = 0, empty = "no sample yet") {
  const W = 360, H = 150, L = 6, R = 6, T = 8, B = 18;
  let max = minMax;
  for (const x of series) for (const [, v] of x.points) max = Math.max(max, v);
  if (max <= 0) max = 1;
  const span = Math.max(1, t1 - t0);
  const X = (t) => L + (Math.min(Math.max(t, t0), t1) - t0) / span * (W - L - R);
  const Y = (v) => T + (1 - v / max) * (H - T - B);
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "plot-svg" },
    svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }),
    svg("line", { x1: L, y1: T, x2: W - R, y2: T, class: "grid" }),
    svg("text", { x: W - R, y: T + 10, "text-anchor": "end", class: "tick" }, fmt(max)),
    svg("text", { x: L, y: H - 4, class: "tick" }, "−" + fmtMs(t1 - t0)),
    svg("text", { x: W - R, y: H - 4, "text-anchor": "end", class: "tick" }, "now"));
  series.forEach((x, i) => {
    const d = x.points.map(([t, v], k) => (k ? "L" : "M") + X(t).toFixed(1) + "," + Y(v).toFixed(1)).join(" ");
    s.append(svg("path", { class: "line", d: x.points.length === 1 ? d + " l0.1,0" : d, stroke: COLORS[i % COLORS.length], "data-series": x.name, "data-points": x.points.length }));
  });
  if (!series.length) s.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "tick" }, empty));
  const legend = h("div", { class: "legend" }, series.map((x, i) => h("span", { style: "color:" + COLORS[i % COLORS.length] },
    x.name + " " + fmt(x.points[x.points.length - 1][1]))));
  return h("div", { class: "plot", id }, h("div", { class: "plot-title" }, title), s, legend);
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
  const W = 230, H = 106, GX = 70, GY = 26;
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
      svg("text", { x: 10, y: 53 }, m.sampled ? "in " + fmtRate(m.recordsInPerSec) + "  out " + fmtRate(m.recordsOutPerSec)
        : job.endTime !== null ? "in " + m.recordsIn + "  out " + m.recordsOut + " (final)" : "no sample yet"),
      // Backpressure and busy on lines of their own: "busy 100%" fits.
      svg("text", { x: 10, y: 71, class: bpClass(m.backpressure) }, m.sampled ? "backpressure " + m.backpressure + " " + pct(m.backpressureRatio) : ""),
      svg("text", { x: 10, y: 89, class: "busy" }, m.sampled ? "busy " + pct(m.busyRatio) : ""));
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
      h("td", { class: "num" }, m.sampled || job.endTime !== null ? m.recordsIn : ""), h("td", { class: "num" }, m.sampled || job.endTime !== null ? m.recordsOut : ""),
      h("td", { class: "num" }, m.sampled ? fmtBytes(m.bytesIn) : ""), h("td", { class: "num" }, m.sampled ? fmtBytes(m.bytesOut) : ""),
      h("td", { class: "num" }, m.sampled ? fmtRate(m.recordsInPerSec) : ""), h("td", { class: "num" }, m.sampled ? fmtRate(m.recordsOutPerSec) : ""),
      h("td", { class: bpClass(m.backpressure) }, job.endTime !== null && !m.sampled ? "ended" : bpText(m.backpressure)), h("td", { class: "num" }, m.sampled ? pct(m.busyRatio) : ""),
      h("td", {}, fmtWatermark(m.watermark)),
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

// exceptionsSection shows the failures grouped by cause: each message
// once, with how often, in which attempts and when it last happened.
function exceptionsSection(exc) {
  const rows = exc.groups.map((g, i) => h("tr", { "data-key": "g" + i, class: "exception-group", "data-count": g.count },
    h("td", { class: "num" }, g.count), h("td", {}, fmtTime(g.last)), h("td", {}, g.kinds.join(", ")),
    h("td", {}, g.attempts.join(", ")), h("td", {}, h("pre", { class: "msg" }, g.message))));
  return h("section", { id: "exceptions" }, h("h2", {}, "Exceptions"),
    exc.truncated ? h("p", { class: "muted" }, "older failures were dropped") : null,
    h("table", {}, h("thead", {}, h("tr", {}, ["count", "last", "as", "attempts", "cause"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 5, class: "muted" }, "no exceptions")))));
}

refresh();
