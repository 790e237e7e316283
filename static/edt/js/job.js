// A job's page: history over HTTP, then live deltas over /ws/jobs/<id>/ with sequence
// numbers (a gap or a reconnect reloads the history, one reload at a time); redraws are
// coalesced to a few per second. A running job's history is fetched once its socket is
// open (nothing falls between them); an ended job's at once, and its page shows no "live"
// badge: nothing about it is live any more.
(function () {
  "use strict";
  const root = document.getElementById("job");
  const jobId = root.dataset.job;
  const liveEl = document.getElementById("live");
  const ACTIVE = ["QUEUED", "RUNNING", "SUSPENDED"];
  let jobState = root.dataset.state;
  const ended = () => !ACTIVE.includes(jobState);
  const endedAt = Number(root.dataset.finished) || null;
  let seq = null, pending = [], events = [], scheduled = false;
  // What an empty chart says (why the job waits is said once, in the Waiting card).
  const waitingText = () => (ended() ? "This job ended before its first iteration." :
    document.getElementById("waiting") && !document.getElementById("waiting").hidden
      ? "No iterations yet: the job waits for slots (see Waiting above)."
      : "No iterations yet: the learners are starting.");
  if (endedAt) JobCharts.ended(endedAt);

  function draw(history) {
    recent = [];
    JobCharts.reset(history, waitingText());
    summarize(history.train);
  }

  function extend(records) {
    JobCharts.add(records);
    summarize(records.filter((r) => r.type === "train"));
  }

  // The iteration and the throughput come from the training records; the workers and the
  // ETA are the server's (showStatus).
  let recent = [];
  function summarize(train) {
    if (!train.length) return;
    const last = train[train.length - 1];
    document.getElementById("step").textContent = last.step;
    const batch = document.getElementById("batch"); // a goodput-mode job's batch now
    if (batch && last.batch) batch.textContent = last.batch;
    recent = recent.concat(train).slice(-50);
    const rate = recent.reduce((s, r) => s + r.samples_per_s, 0) / recent.length;
    document.getElementById("throughput").textContent = ended() ? 0 : rate.toFixed(0);
  }

  // The job's status as the server computed it (edtweb/training/status.py: the jobs list,
  // the API and the CLI show the same), pushed after each change and polled every 2 s.
  // Shown as it is: nothing here computes workers or an ETA.
  function showStatus(s) {
    document.getElementById("workers").textContent = s.workers;
    document.getElementById("eta").textContent = s.eta_text || "–";
    const waiting = document.getElementById("waiting");
    if (waiting && s.waiting) waiting.querySelector("span").textContent = s.waiting;
    if (waiting) waiting.hidden = !s.waiting;
    const estimate = document.getElementById("estimate"); // when it should start and end
    if (estimate) estimate.textContent = s.estimate_text || "";
    const why = document.getElementById("why"); // the rule that set a running job's slots
    if (why) { why.querySelector("span").textContent = s.reason || ""; why.hidden = !s.reason || !!s.waiting; }
    const idle = document.getElementById("idle"); // the scheduler flagged it idle (its slots under the idle utilisation)
    if (idle) { idle.querySelector("span").textContent = s.idle || ""; idle.hidden = !s.idle; }
    if (s.state !== jobState || (s.error && !document.getElementById("job-error"))) showState(s.state, s.error);
  }

  function timeline() {
    const ol = document.getElementById("timeline");
    ol.replaceChildren();
    for (const e of events.slice().reverse()) {
      const li = document.createElement("li");
      li.dataset.kind = e.kind;
      li.innerHTML = "<time></time> <strong></strong> <span></span>";
      li.querySelector("time").textContent = new Date(e.at * 1000).toLocaleTimeString();
      li.querySelector("strong").textContent = e.kind;
      li.querySelector("span").textContent = e.message;
      ol.append(li);
    }
  }

  // History reloads: one at a time. Deltas that arrive while one runs wait in `held` and
  // are applied after it (those the history already holds are dropped); a gap seen then
  // is accepted rather than chased, so a busy server never sees a chain of reloads.
  let reloading = false, held = [], retryLoad = null;
  async function reload() {
    if (reloading) return;
    reloading = true;
    clearTimeout(retryLoad);
    let history = null;
    try {
      const r = await fetch("/jobs/" + jobId + "/metrics?points=2000", { credentials: "same-origin" });
      if (r.ok) history = await r.json();
    } catch (err) { /* the server is away: try again shortly */ }
    reloading = false;
    if (!history) { retryLoad = setTimeout(reload, 3000); return; }
    seq = history.seq;
    pending = []; // everything queued is part of the history now
    events = history.events;
    draw(history);
    timeline();
    const replay = held;
    held = [];
    for (const m of replay) onMetrics(m, true);
  }

  function onMetrics(m, afterReload) {
    if (reloading || seq === null) { held.push(m); return; }
    if (m.to <= seq) return; // already shown
    if (m.from > seq && !afterReload) { held.push(m); reload(); return; } // a gap
    pending = pending.concat(m.from < seq ? m.records.slice(seq - m.from) : m.records);
    seq = m.to;
    if (!scheduled) { scheduled = true; setTimeout(flush, 250); }
  }

  function flush() {
    scheduled = false;
    const batch = pending;
    pending = [];
    if (batch.length) extend(batch);
  }

  function onMessage(data) {
    if (data.type === "metrics") {
      onMetrics(data, false);
    } else if (data.type === "event") {
      events.push(data.event);
      JobCharts.events(events);
      timeline();
    } else if (data.type === "state") {
      showState(data.state);
    } else if (data.type === "status") {
      showStatus(data.status);
    }
  }

  // The socket's state, on the badge (data-socket: open or closed); shown while the job
  // is queued, running or suspended only.
  function badge(socket, cls, text) {
    liveEl.dataset.socket = socket;
    liveEl.className = "live " + cls;
    liveEl.textContent = text;
    liveEl.hidden = ended();
  }

  let loadedEarly = false;
  function connect() {
    EDT.live("/ws/jobs/" + jobId + "/", {
      open() {
        badge("open", "up", "live");
        if (loadedEarly) loadedEarly = false; // the first open of an ended job's page: loaded already
        else reload();
      },
      message: onMessage,
      closed() { badge("closed", "down", "reconnecting…"); },
    });
  }

  // Logs: one tab per learner, tailing its file.
  let logSlot = null, logOffset = -20000;
  async function tail() {
    if (logSlot) {
      const r = await fetch("/jobs/" + jobId + "/log?slot=" + encodeURIComponent(logSlot) + "&offset=" + logOffset, { credentials: "same-origin" });
      if (r.ok) { // not after a session ended (401)
        const data = await r.json();
        const pre = document.getElementById("log");
        if (data.text) { pre.textContent = (pre.textContent + data.text).slice(-200000); pre.scrollTop = pre.scrollHeight; }
        logOffset = data.offset;
      }
    }
    setTimeout(tail, 1000);
  }
  function logTab(button) {
    button.addEventListener("click", () => {
      logSlot = button.dataset.slot; logOffset = -20000;
      document.getElementById("log").textContent = "";
      for (const b of document.querySelectorAll("#log-tabs button")) b.classList.toggle("active", b === button);
    });
  }
  // Learners that start after the page opened get their tab too.
  function logTabs(names) {
    const tabs = document.getElementById("log-tabs");
    const have = new Set([...tabs.querySelectorAll("button")].map((b) => b.dataset.slot));
    for (const name of names.filter((n) => !have.has(n))) {
      const button = document.createElement("button");
      button.dataset.slot = name;
      button.textContent = name;
      logTab(button);
      tabs.querySelector(".muted")?.remove();
      tabs.append(button);
    }
    // Rank 0's learner first (the page says which): the others log little but start-up.
    const lead = tabs.dataset.lead && tabs.querySelector('button[data-slot="' + CSS.escape(tabs.dataset.lead) + '"]');
    if (!logSlot) (lead || tabs.querySelector("button"))?.click();
  }
  document.querySelectorAll("#log-tabs button").forEach(logTab);
  logTabs([]); // open the first learner's log

  // The job's status with its slots' telemetry, its files and times, every 2 s.
  async function slots() {
    const r = await fetch("/jobs/" + jobId + "/state", { credentials: "same-origin" });
    if (r.ok) {
      const s = await r.json();
      const body = document.querySelector("#job-slots tbody");
      const rows = s.telemetry.map((t) => {
        const tr = document.createElement("tr");
        const util = t.kind === "gpu" ? "GPU " + t.gpu_util + "%" : "CPU " + Math.round(t.cpu_percent || 0) + "% of a core";
        const mem = t.kind === "gpu" ? (t.mem_used / 2 ** 30).toFixed(1) + " / " + (t.mem_total / 2 ** 30).toFixed(1) + " GiB"
          : ((t.rss || 0) / 2 ** 20).toFixed(0) + " MiB";
        for (const text of [t.slot, t.state, util, mem]) {
          const td = document.createElement("td");
          td.textContent = text;
          tr.append(td);
        }
        return tr;
      });
      if (rows.length) body.replaceChildren(...rows);
      else body.innerHTML = '<tr><td colspan="4" class="muted">No slot held.</td></tr>';
      if (s.lead_log) document.getElementById("log-tabs").dataset.lead = s.lead_log;
      logTabs(s.logs || []);
      downloads(s);
      if (s.started) document.getElementById("started").textContent = s.started;
      if (s.ended) document.getElementById("ended").textContent = s.ended;
      if (s.duration) document.getElementById("duration").textContent = s.duration;
      showStatus(s);
    }
    setTimeout(slots, 2000);
  }

  // Files: checkpoints as they are written, the final model once the job completes.
  let shownFiles = null;
  function downloads(s) {
    const finalModel = s.state === "COMPLETED";
    const key = JSON.stringify([finalModel, s.checkpoints]);
    if (key === shownFiles) return;
    shownFiles = key;
    const box = document.getElementById("downloads");
    const link = (name, text) => {
      const a = document.createElement("a");
      a.href = "/jobs/" + jobId + "/files/" + encodeURIComponent(name);
      a.textContent = text;
      return a;
    };
    const parts = [];
    if (finalModel) {
      const a = link("model.pt", "Final model (model.pt)");
      a.className = "button"; a.id = "download-model";
      parts.push(a, " ");
    }
    for (const c of s.checkpoints) parts.push(link(c, c), " ");
    if (!s.checkpoints.length) {
      const none = document.createElement("span");
      none.className = "muted"; none.textContent = "No checkpoint yet.";
      parts.push(none);
    }
    box.replaceChildren(...parts);
  }

  // The job's state changed while the page is open (pushed, or seen by the poll): say so,
  // and once it has ended stop offering what no longer applies. Nothing needs a reload.
  function showState(state, error) {
    jobState = state;
    if (error && !document.getElementById("job-error")) {
      const p = document.createElement("p");
      p.className = "error"; p.id = "job-error"; p.setAttribute("role", "alert"); p.textContent = error;
      root.after(p);
    }
    const stateEl = document.getElementById("job-state");
    stateEl.textContent = state.toLowerCase();
    stateEl.className = "badge " + state.toLowerCase();
    liveEl.hidden = ended();
    if (!ended()) return;
    document.getElementById("throughput").textContent = 0;
    document.getElementById("waiting")?.remove();
    document.getElementById("why")?.remove();
    document.getElementById("idle")?.remove();
    JobCharts.ended(Date.now() / 1000);
    JobCharts.empty(waitingText());
    // The controls a viewer may use are on the page; a team member who only reads has none.
    const hide = (id, hidden) => { const el = document.getElementById(id); if (el) el.hidden = hidden; };
    hide("stop-form", true);
    hide("delete-form", false);
    // An ended job's priority cannot change: its plain value replaces the slider.
    const slider = document.getElementById("priority");
    if (slider) {
      slider.disabled = true;
      document.getElementById("priority-fixed").querySelector("strong").textContent = slider.value;
    }
    hide("priority-edit", true);
    hide("priority-fixed", false);
    hide("resume-form", !["STOPPED", "FAILED"].includes(state));
  }

  // An ended job's history does not wait for the socket (a record that still comes in
  // shows as a gap in the sequence, and reloads it).
  if (ended()) { loadedEarly = true; reload(); }
  connect();
  tail();
  slots();
})();
