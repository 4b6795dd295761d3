/* slurmtower overview (/ui): refreshes the server-rendered fragments, follows the event stream
   and draws the load chart with uPlot. Drain/resume and log out: common.js. No build. */
(function () {
  "use strict";
  const main = document.querySelector("main");
  const REFRESH_MS = 3000;
  const FEED_MAX = 100;

  async function swap(id, url) {
    const resp = await fetch(window.slurmtowerUi(url), {credentials: "same-origin", cache: "no-store"});
    if (resp.status === 401) { window.location.assign("/ui/login"); return; }
    if (resp.ok) { document.getElementById(id).innerHTML = await resp.text(); }
  }
  let refreshing = false;
  async function refresh() {
    if (refreshing) { return; }
    refreshing = true;
    try {
      await Promise.all([swap("summary", "/ui/fragments/summary"), swap("nodes", "/ui/fragments/nodes"),
                         swap("queue", "/ui/fragments/queue")]);
    } catch (e) { /* network hiccup: next round */ } finally { refreshing = false; }
  }
  setInterval(refresh, REFRESH_MS);
  document.addEventListener("slurmtower:acted", refresh);

  /* --- live event feed (Server-Sent Events) --- */
  const feed = document.getElementById("feed");
  const feedStatus = document.getElementById("feed-status");
  function describe(ev) {
    const p = ev.payload || {};
    if (ev.type === "slurm.node.state") {
      const from = [p.previous_state].concat(p.previous_flags || []).filter(Boolean).join("+");
      const to = [p.state].concat(p.flags || []).filter(Boolean).join("+");
      let text = (from || "?") + " \u2192 " + (to || "gone");
      if (p.reason) { text += " (" + p.reason + (p.reason_owner ? ", " + p.reason_owner : "") + ")"; }
      return text;
    }
    if (p.type || p.class) { return [p.class, p.type, p.argument].filter(Boolean).join(" "); }
    return "";
  }
  function addEvent(raw) {
    let ev;
    try { ev = JSON.parse(raw.data); } catch (e) { return; }
    const li = document.createElement("li");
    li.className = "event " + String(ev.type).replace(/[^a-z0-9]+/gi, "-");
    li.dataset.node = ev.node || "";
    li.dataset.type = ev.type;
    const time = document.createElement("time");
    time.dateTime = ev.time;
    time.textContent = new Date(ev.time).toISOString().substring(11, 19);
    const type = document.createElement("span");
    type.className = "type";
    type.textContent = ev.type;
    const node = document.createElement("strong");
    node.textContent = ev.node || "";
    const text = document.createElement("span");
    text.className = "detail";
    text.textContent = describe(ev);
    li.append(time, " ", type, " ", node, " ", text);
    const empty = feed.querySelector("li.empty");
    if (empty) { empty.remove(); }
    if (ev.id !== undefined && feed.querySelector('li[data-id="' + ev.id + '"]')) { return; }
    li.dataset.id = ev.id === undefined ? "" : ev.id;
    feed.prepend(li);
    while (feed.children.length > FEED_MAX) { feed.lastElementChild.remove(); }
    if (ev.type === "slurm.node.state") { refresh(); }
  }
  if (window.EventSource) {
    const es = new EventSource(window.slurmtowerApi("/events/stream"));
    es.onopen = () => { feedStatus.textContent = "live"; };
    es.onerror = () => { feedStatus.textContent = "reconnecting"; };
    es.onmessage = addEvent;
    ["slurm.node.state", "slurm.sensor.trigger.up", "slurm.sensor.trigger.down",
     "slurm.sensor.trigger.triggered", "slurmtower.security"].forEach((t) => es.addEventListener(t, addEvent));
  }

  /* --- load chart from the archive (/load) --- */
  function timeOf(row) {
    for (const k of ["time", "at", "timestamp", "t", "start", "bucket"]) {
      if (row[k] !== undefined) {
        const v = row[k];
        return typeof v === "number" ? (v > 1e12 ? v / 1000 : v) : Date.parse(v) / 1000;
      }
    }
    return NaN;
  }
  function firstRows(body) {
    if (Array.isArray(body)) { return body; }
    for (const v of Object.values(body || {})) { if (Array.isArray(v) && v.length && typeof v[0] === "object") { return v; } }
    return [];
  }
  let loadSeconds = 3600;
  document.querySelectorAll("button.range").forEach((btn) => btn.addEventListener("click", () => {
    loadSeconds = Number(btn.dataset.seconds);
    document.querySelectorAll("button.range").forEach((b) => b.setAttribute("aria-pressed", String(b === btn)));
    drawLoad();
  }));
  async function drawLoad() {
    const note = document.getElementById("load-note");
    let resp;
    try { resp = await fetch(window.slurmtowerApi("/load?time=" + loadSeconds), {credentials: "same-origin"}); } catch (e) { note.textContent = "load unavailable"; return; }
    if (!resp.ok) { note.textContent = "no load archive (" + resp.status + ")"; return; }
    const rows = firstRows(await resp.json()).filter((r) => !isNaN(timeOf(r)));
    if (rows.length < 2) {
      note.textContent = rows.length ? "one sample so far; the chart starts with the second" : "the load archive is empty so far";
      return;
    }
    const preferred = ["cpus_used", "cpus_total", "jobs_running", "jobs_pending"].filter((k) => typeof rows[0][k] === "number");
    const keys = preferred.length ? preferred : Object.keys(rows[0]).filter((k) => typeof rows[0][k] === "number" &&
      !["time", "at", "timestamp", "t", "start", "bucket"].includes(k)).slice(0, 6);
    const data = [rows.map(timeOf)].concat(keys.map((k) => rows.map((r) => r[k])));
    const colours = ["#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c", "#0891b2"];
    const el = document.getElementById("load-chart");
    el.innerHTML = "";
    new uPlot({width: Math.max(280, el.clientWidth), height: 220,
      series: [{}].concat(keys.map((k, i) => ({label: k, stroke: colours[i % colours.length], width: 1.5}))),
      axes: [{}, {}]}, data, el);
    note.textContent = rows.length + " samples";
  }
  drawLoad();
  setInterval(drawLoad, 60000);

}());
