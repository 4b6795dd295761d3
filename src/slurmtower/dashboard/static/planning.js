/* The reservation calendar's form and the requests' decisions (/ui/reservations, /ui/requests).
   "Check for conflicts" is the action's dry run: its conflicts (a 409's list) or what it would
   do are shown before anything is submitted; "Reserve" (or "Ask for it": a user's becomes a
   request, 202) acts. Approve, deny and withdraw post to /requests/{id}/...; the API decides
   again who may. No framework, no build. */
(function () {
  "use strict";
  const api = window.slurmtowerApi || ((p) => p);
  const CSRF = document.querySelector("main").dataset.csrfHeader;

  async function post(path, body) {
    const resp = await fetch(api(path), {method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", [CSRF]: "1"}, body: JSON.stringify(body || {})});
    let data = {};
    try { data = await resp.json(); } catch (e) { /* not JSON */ }
    return {resp, data};
  }
  const detail = (resp, data) => (data.error && data.error.detail) || data.detail || data.stderr || resp.statusText;

  /* --- the reservation form --- */
  const form = document.getElementById("reserve");
  const result = document.getElementById("reserve-result");
  const conflicts = document.getElementById("reserve-conflicts");
  function iso(value) { return value ? new Date(value).toISOString() : null; }
  function list(value) { return value.split(",").map((s) => s.trim()).filter(Boolean); }
  function params() {
    const f = new FormData(form);
    const out = {};
    for (const key of ["name", "nodes", "partition", "comment"]) {
      const v = (f.get(key) || "").trim();
      if (v) { out[key] = v; }
    }
    out.start_time = iso(f.get("start_time"));
    if (f.get("end_time")) { out.end_time = iso(f.get("end_time")); } else if (f.get("duration")) { out.duration = Number(f.get("duration")); }
    if (f.get("node_count")) { out.node_count = Number(f.get("node_count")); }
    out.users = list(f.get("users") || "");
    out.accounts = list(f.get("accounts") || "");
    out.flags = f.getAll("flags");
    if (!out.start_time) { delete out.start_time; }
    return out;
  }
  function show(kind, text, items) {
    result.className = kind;
    result.textContent = text;
    conflicts.replaceChildren(...(items || []).map((c) => {
      const li = document.createElement("li");
      li.dataset.kind = c.kind;
      if (c.accepted_by) { li.className = "accepted"; }
      li.textContent = (c.accepted_by ? "accepted (" + c.accepted_by + "): " : c.kind + ": ") + c.detail;
      return li;
    }));
    conflicts.hidden = !(items && items.length);
  }
  async function check() {
    show("", "checking\u2026");
    const {resp, data} = await post("/actions/slurm.reservation.create?dry_run=true", params());
    if (resp.status === 409 && data.conflicts) {
      show("error", "Conflicts: " + data.conflicts.length + " (nothing changed)", data.conflicts);
    } else if (!resp.ok || data.status === "failed") {
      show("error", "Refused: " + detail(resp, data));
    } else {
      const r = data.result || {};
      show("ok", "No conflict: " + (data.stdout || "it can be made").split("\n").pop(), r.accepted || []);
    }
  }
  if (form) {
    document.getElementById("reserve-check").addEventListener("click", check);
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      show("", form.dataset.asks === "true" ? "asking\u2026" : "reserving\u2026");
      const {resp, data} = await post("/actions/slurm.reservation.create", params());
      if (resp.status === 202) {
        show("ok", "Requested: request " + data.id + " waits for an " + data.approver_role + " (expires " +
             new Date(data.expires_at).toLocaleString() + ")");
        setTimeout(() => window.location.reload(), 1500);
      } else if (resp.status === 409 && data.conflicts) {
        show("error", "Conflicts: " + data.conflicts.length + " (nothing changed)", data.conflicts);
      } else if (!resp.ok || data.status === "failed") {
        show("error", "Refused: " + detail(resp, data));
      } else {
        show("ok", "Created " + data.result.name + " (execution " + data.execution_id + ")");
        setTimeout(() => window.location.reload(), 1500);
      }
    });
    const start = document.getElementById("r-start");
    if (!start.value) {  /* the next whole hour, local time */
      const d = new Date(Date.now() + 3600 * 1000);
      d.setMinutes(0, 0, 0);
      const pad = (n) => String(n).padStart(2, "0");
      start.value = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" + pad(d.getHours()) + ":00";
    }
  }

  /* --- decisions on /ui/requests --- */
  const said = document.getElementById("request-result");
  document.addEventListener("click", async (ev) => {
    const btn = ev.target.closest("button.decide");
    if (!btn) { return; }
    const verb = btn.dataset.verb;
    const id = btn.dataset.request;
    const comment = window.prompt(verb[0].toUpperCase() + verb.slice(1) + " request " + id + "? A comment (optional):", "");
    if (comment === null) { return; }
    btn.disabled = true;
    const {resp, data} = await post("/requests/" + id + "/" + verb, comment ? {comment: comment} : {});
    if (resp.ok) {
      const state = verb === "approve" ? data.request.state : data.state;
      said.className = "ok";
      said.textContent = "request " + id + ": " + state;
      setTimeout(() => window.location.reload(), 800);
    } else {
      said.className = "error";
      said.textContent = "request " + id + ": " + detail(resp, data);
      btn.disabled = false;
    }
  });
}());
