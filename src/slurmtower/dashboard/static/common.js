/* slurmtower pages: log out, the drain / resume buttons and the job actions (a dry run lists the
   jobs in the confirmation) with their confirmation dialog (rendered for those who may act; the
   API checks again), and parts of a page that keep themselves
   current: an element with an id and data-live="<seconds>" is fetched again from the page's own
   URL that often while the tab is visible (and right after a drain or resume) and swapped in,
   the keyboard focus kept. A page that shows node states may also listen for the
   "slurmtower:acted" event. No framework, no build. */
(function () {
  "use strict";

  /* --- the cluster a page is for (several clusters: ?cluster= in the page's URL) ---
     The API calls of a page go to /clusters/<name>/..., its links and forms to the same
     cluster's pages; the default cluster's pages keep their plain URLs. */
  const CLUSTER = document.body.dataset.cluster || "";
  const SCOPED = CLUSTER !== "" && CLUSTER !== document.body.dataset.defaultCluster;
  const api = (path) => (SCOPED ? "/clusters/" + encodeURIComponent(CLUSTER) + path : path);
  function uiUrl(href) {
    const url = new URL(href, window.location.origin);
    if (url.origin !== window.location.origin || !url.pathname.startsWith("/ui")) { return href; }
    if (/^\/ui\/(static|login|logout|clusters)(\/|$)/.test(url.pathname)) { return href; }
    url.searchParams.set("cluster", CLUSTER);
    return url.pathname + url.search + url.hash;
  }
  window.slurmtowerApi = api;
  window.slurmtowerUi = (href) => (SCOPED ? uiUrl(href) : href);
  if (SCOPED) {
    const scope = (a) => { if (!a.hasAttribute("data-all-clusters")) { a.setAttribute("href", uiUrl(a.getAttribute("href"))); } };
    document.querySelectorAll("a[href^='/ui']").forEach(scope);
    /* links swapped in later (live parts, fragments): scoped when followed */
    for (const kind of ["click", "auxclick"]) {
      document.addEventListener(kind, (ev) => {
        const a = ev.target.closest && ev.target.closest("a[href^='/ui']");
        if (a) { scope(a); }
      }, true);
    }
    document.addEventListener("submit", (ev) => {
      const form = ev.target;
      if ((form.method || "get").toLowerCase() !== "get" || !(form.getAttribute("action") || "").startsWith("/ui")) { return; }
      if (!form.querySelector("input[name=cluster]")) {
        const keep = document.createElement("input");
        Object.assign(keep, {type: "hidden", name: "cluster", value: CLUSTER});
        form.appendChild(keep);
      }
    }, true);
  }
  const switcher = document.getElementById("cluster-switch");
  if (switcher) {
    switcher.addEventListener("change", () => {
      const url = new URL(window.location.href);
      if (switcher.value === document.body.dataset.defaultCluster) { url.searchParams.delete("cluster"); }
      else { url.searchParams.set("cluster", switcher.value); }
      url.searchParams.delete("cursor");
      window.location.assign(url.pathname.startsWith("/ui/clusters") ? "/ui" + url.search : url.toString());
    });
  }

  const main = document.querySelector("main");
  const CSRF = main.dataset.csrfHeader;
  function refresh() { document.dispatchEvent(new CustomEvent("slurmtower:acted")); }

  /* --- drain / resume (rendered for operators only; the API checks again) --- */
  const dialog = document.getElementById("confirm");
  const result = document.getElementById("action-result");
  let pending = null;
  const jobList = document.getElementById("confirm-jobs");
  function post(action, params) {
    return fetch(api("/actions/" + action), {
      method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", [CSRF]: "1"}, body: JSON.stringify(params)});
  }
  async function answer(resp) {
    try { return await resp.json(); } catch (e) { return {}; }
  }
  function failed(resp, body) {
    return (body.error && body.error.detail) || body.detail || resp.statusText;
  }
  /* --- job actions: a dry run lists the jobs, the confirmation acts on the same selection --- */
  async function reviewJobs(btn) {
    const action = btn.dataset.actionFrom ? document.getElementById(btn.dataset.actionFrom).value : btn.dataset.action;
    const params = Object.assign({}, JSON.parse(btn.dataset.params || "{}"));
    if (btn.dataset.jobs) { params.jobids = [btn.dataset.jobs]; } else { params.criterias = JSON.parse(btn.dataset.criterias); }
    if (action !== "slurm.job.hold") { delete params.uhold; }
    const verb = action.split(".").pop();
    result.className = "";
    result.textContent = verb + ": listing the jobs\u2026";
    const resp = await post(action, Object.assign({dry_run: true}, params));
    const body = await answer(resp);
    if (!resp.ok) { result.className = "error"; result.textContent = verb + " refused: " + failed(resp, body); return; }
    result.textContent = "";
    const jobs = Object.entries(body.result.jobs);
    const acting = jobs.filter(([, j]) => j.would !== "unchanged");
    pending = {action: action, params: params, label: verb + " " + acting.length + " job" + (acting.length === 1 ? "" : "s")};
    document.getElementById("confirm-title").textContent = verb[0].toUpperCase() + verb.slice(1) + " " +
      acting.length + " of " + jobs.length + " job" + (jobs.length === 1 ? "" : "s") + "?";
    const reason = document.getElementById("confirm-reason");
    reason.required = false; reason.hidden = true;
    reason.parentElement.querySelector("label").hidden = true;
    document.getElementById("confirm-note").textContent = acting.length
      ? "The dry run lists what would happen to each job; nothing has changed yet." : "Nothing to do.";
    jobList.replaceChildren(...jobs.slice(0, 50).map(([id, j]) => {
      const li = document.createElement("li");
      li.dataset.job = id;
      li.textContent = id + " (" + (j.user || "?") + ", " + j.state + "): " +
        (j.would === "unchanged" ? "unchanged, " + j.why : j.would);
      return li;
    }));
    if (jobs.length > 50) { const li = document.createElement("li"); li.textContent = "\u2026 and " + (jobs.length - 50) + " more"; jobList.append(li); }
    jobList.hidden = false;
    dialog.showModal();
  }
  document.addEventListener("click", (ev) => {
    const jobBtn = ev.target.closest("button.act-jobs");
    if (jobBtn && dialog) { reviewJobs(jobBtn); return; }
    const btn = ev.target.closest("button.act");
    if (!btn || !dialog) { return; }
    if (jobList) { jobList.hidden = true; }
    pending = {action: btn.dataset.action, node: btn.dataset.node};
    const drain = pending.action === "slurm.node.drain";
    document.getElementById("confirm-title").textContent = (drain ? "Drain " : "Resume ") + pending.node + "?";
    const reason = document.getElementById("confirm-reason");
    reason.value = "";
    reason.required = drain;
    reason.parentElement.querySelector("label").hidden = !drain;
    reason.hidden = !drain;
    document.getElementById("confirm-note").textContent = drain
      ? "Running jobs finish; no new job starts on the node." : "The node takes jobs again.";
    dialog.showModal();
  });
  if (dialog) {
    document.getElementById("confirm-cancel").addEventListener("click", () => { pending = null; dialog.close(); });
    document.getElementById("confirm-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (!pending) { return; }
      if (pending.params) {  /* a job action, reviewed by its dry run */
        const job = pending;
        pending = null;
        dialog.close();
        result.textContent = job.label + "\u2026";
        const resp = await post(job.action, job.params);
        const body = await answer(resp);
        if (resp.ok && body.status !== "failed") {
          result.className = "ok";
          result.textContent = job.label + ": " + (body.stdout || "done") + " (execution " + (body.execution_id || "?") + ")";
        } else {
          result.className = "error";
          result.textContent = job.label + " failed: " + (body.stderr || failed(resp, body));
        }
        refresh();
        return;
      }
      const params = {nodes: pending.node};
      if (pending.action === "slurm.node.drain") { params.reason = document.getElementById("confirm-reason").value.trim(); }
      const todo = pending;
      pending = null;
      dialog.close();
      result.textContent = todo.action + " " + todo.node + "\u2026";
      const resp = await fetch(api("/actions/" + todo.action), {
        method: "POST", credentials: "same-origin",
        headers: {"Content-Type": "application/json", [CSRF]: "1"}, body: JSON.stringify(params)});
      let body = {};
      try { body = await resp.json(); } catch (e) { /* not JSON */ }
      if (resp.ok && body.status !== "failed") {
        result.className = "ok";
        result.textContent = todo.action + " " + todo.node + ": done (execution " + (body.execution_id || "?") + ")";
      } else {
        result.className = "error";
        result.textContent = todo.action + " " + todo.node + " failed: " +
          ((body.error && body.error.detail) || body.detail || resp.statusText);
      }
      refresh();
    });
  }

  /* --- parts that keep themselves current (data-live) --- */
  /* Swap ``fresh`` in for ``here``, the keyboard focus kept: on the element of the same id or
     link, else on the action button that replaced the one used. */
  function swapIn(here, fresh) {
    const active = document.activeElement;
    const inside = active && here.contains(active) && active !== here;
    const same = !inside ? null : active.id ? "#" + CSS.escape(active.id)
      : active.getAttribute("href") ? "[href=\"" + CSS.escape(active.getAttribute("href")) + "\"]" : null;
    here.replaceWith(fresh);
    if (inside) {
      const again = (same && fresh.querySelector(same)) || fresh.querySelector("button.act");
      if (again) { again.focus(); }
    }
  }
  /* Fetch the page again and swap in each live part that changed. Single-flight: callers at
     the same time (the timer, a page's own polling) share one fetch. */
  let inflight = null;
  function renew() {
    if (inflight) { return inflight; }
    inflight = (async () => {
      const resp = await fetch(window.location.href, {credentials: "same-origin", cache: "no-store"});
      if (resp.status === 401) { window.location.assign("/ui/login"); return; }
      if (!resp.ok) { return; }
      const page = new DOMParser().parseFromString(await resp.text(), "text/html");
      for (const here of document.querySelectorAll("[data-live][id]")) {
        const fresh = page.getElementById(here.id);
        if (fresh && fresh.innerHTML !== here.innerHTML) { swapIn(here, fresh); }
      }
    })().catch(() => { /* a network hiccup: the next round tries again */ })
      .finally(() => { inflight = null; });
    return inflight;
  }
  window.slurmtowerRenew = renew;
  const live = Array.from(document.querySelectorAll("[data-live][id]"));
  if (live.length) {
    const every = Math.min(...live.map((el) => Math.max(2, Number(el.dataset.live) || 30)));
    setInterval(() => { if (!document.hidden) { renew(); } }, every * 1000);
    document.addEventListener("visibilitychange", () => { if (!document.hidden) { renew(); } });
    document.addEventListener("slurmtower:acted", () => { setTimeout(renew, 800); });
  }

  /* The requests waiting for a decision (the caller's own, below operator), beside "Requests". */
  const badge = document.getElementById("nav-requests-count");
  if (badge) {
    fetch(api("/requests?state=pending&limit=1"), {credentials: "same-origin", cache: "no-store"})
      .then((resp) => (resp.ok ? resp.json() : null))
      .then((page) => {
        if (page && page.pending > 0) {
          badge.textContent = String(page.pending);
          badge.title = page.pending + " pending";
          badge.hidden = false;
        }
      })
      .catch(() => { /* no count: the link still leads there */ });
  }

  /* Log out: the server ends the session (every process) and says where to go next (the
     identity provider's logout for a single sign-on session, else the login page). */
  document.getElementById("logout").addEventListener("click", async () => {
    let next = "/ui/login";
    try {
      const resp = await fetch("/ui/logout", {method: "POST", credentials: "same-origin",
                                               headers: {[CSRF]: "1"}});
      if (resp.ok) { next = (await resp.json()).next || next; }
    } catch (e) { /* the server is away: its session ends on its own */ }
    window.location.assign(next);
  });
}());
