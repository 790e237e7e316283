// Cluster page: renders hosts and slots, kept live by the /ws/cluster/ WebSocket.
(function () {
  "use strict";
  const hostsEl = document.getElementById("hosts");
  const names = new Map(); // job id -> name, for this user's jobs
  const summaryEl = document.getElementById("summary");
  const liveEl = document.getElementById("live");

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function bytes(n) {
    if (!n) return "0 B";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + " " + units[i];
  }

  function meter(percent, label) {
    const wrap = el("div", { class: "meter", title: label });
    const bar = el("span", { style: "width:" + Math.max(0, Math.min(100, percent)) + "%" });
    wrap.append(bar, el("em", {}, label));
    return wrap;
  }

  function telemetryCell(slot) {
    const t = slot.telemetry || {};
    const td = el("td", { class: "telemetry" });
    if (slot.state !== "alive") { td.textContent = "—"; return td; }
    if (t.kind === "gpu") {
      td.append(meter(t.gpu_util, "GPU " + t.gpu_util + "%"));
      td.append(meter(100 * t.mem_used / t.mem_total, bytes(t.mem_used) + " / " + bytes(t.mem_total)));
    } else if (t.kind === "cpu") {
      td.append(meter(Math.min(100, t.cpu_percent), "CPU " + t.cpu_percent.toFixed(0) + "% of a core"));
      td.append(el("small", {}, "memory " + bytes(t.rss)));
    }
    return td;
  }

  function ago(seconds) {
    if (seconds === undefined) return "—";
    const s = Math.max(0, Date.now() / 1000 - seconds);
    return s < 1.5 ? "just now" : s.toFixed(0) + " s ago";
  }

  let lastSlots = null;
  function render(slots) {
    lastSlots = slots;
    const hosts = new Map();
    for (const s of slots) {
      if (!hosts.has(s.host)) hosts.set(s.host, []);
      hosts.get(s.host).push(s);
    }
    hostsEl.replaceChildren();
    if (!slots.length) {
      hostsEl.append(el("p", { class: "empty" },
        "No slots have registered yet. Start a worker host with `python manage.py edt_worker` (make run starts one)."));
    }
    for (const [host, list] of hosts) {
      const card = el("section", { class: "card host", "data-host": host });
      const alive = list.filter((s) => s.state === "alive").length;
      card.append(el("h2", {}, host + "  ·  " + alive + " of " + list.length + " slots alive"));
      const table = el("table", { class: "slots", tabindex: "0", "aria-label": "slots of " + host });
      const head = el("tr");
      for (const h of ["Slot", "Device", "State", "Utilisation", "Job", "Heartbeat"]) head.append(el("th", {}, h));
      const thead = el("thead");
      thead.append(head);
      table.append(thead);
      const body = el("tbody");
      for (const s of list) {
        const tr = el("tr", { "data-slot-id": s.slot_id, "data-state": s.state });
        tr.append(el("td", {}, s.slot_id));
        tr.append(el("td", { class: "device" }, s.device === "cpu" ? "CPU" : s.device));
        const state = el("td");
        state.append(el("span", { class: "badge " + s.state }, s.state));
        if (s.refusing && s.state === "alive") {
          // Its worker starts no learner (a Redis without a password): say so, and why.
          state.append(" ", el("span", { class: "badge refusing" }, "refusing user code"));
          state.append(el("small", { class: "refusing-reason" }, s.refusing.charAt(0).toUpperCase() + s.refusing.slice(1)));
        }
        const job = s.job ? (names.get(String(s.job)) || "job " + s.job) : s.busy ? "another user's job" : "free";
        const jobCell = el("td", { class: s.job ? "" : "muted", "data-label": "job" }, job);
        if (s.busy && s.job_idle) {
          // The scheduler flagged the job idle: its slots stayed under the idle utilisation.
          jobCell.append(" ", el("span", { class: "badge idle-job", title: "every slot of this job stayed under the idle utilisation for the idle time" }, "idle"));
        }
        tr.append(state, telemetryCell(s), jobCell);
        tr.append(el("td", { class: "muted", "data-label": "heartbeat" }, ago((s.telemetry || {}).at)));
        body.append(tr);
      }
      table.append(body);
      card.append(table);
      hostsEl.append(card);
    }
    const alive = slots.filter((s) => s.state === "alive").length;
    const lost = slots.filter((s) => s.state === "lost").length;
    const refusing = slots.filter((s) => s.state === "alive" && s.refusing).length;
    summaryEl.textContent = hosts.size + " host(s) · " + slots.length + " slot(s) · " +
      alive + " alive" + (lost ? " · " + lost + " lost" : "") +
      (refusing ? " · " + refusing + " refusing user code" : "");
  }

  function setLive(state, text) {
    liveEl.className = "live " + state;
    liveEl.textContent = text;
  }

  // Slots per job over time: a stacked step chart from the jobs' allocation history, then
  // extended by live allocation messages (redraws coalesced).
  const series = new Map();
  let decisions = [], redraw = null;
  function point(job, at, workers) {
    if (!series.has(job)) series.set(job, []);
    series.get(job).push([at, workers]);
  }
  // Each job keeps one colour, far from its neighbours' (golden-angle hues by job id).
  const colour = (job) => "hsl(" + Math.round((Number(job) * 137.508) % 360) + ", 65%, 42%)";
  const rangeEl = document.getElementById("allocation-range");
  function drawAllocation() {
    redraw = null;
    const now = Date.now() / 1000;
    const span = Number(rangeEl ? rangeEl.value : 0);
    const all = [...new Set([...series.values()].flat().map((p) => p[0]).concat([now]))].sort((a, b) => a - b);
    // The range starts where the history does when that is later: a cluster that ran its
    // first job a minute ago shows that minute, not an hour of nothing before it.
    const first = all[0];
    let from = span ? now - span : first;
    if (first > from) from = first - Math.max(10, (now - first) * 0.05);
    const times = all.filter((t) => t >= from);
    times.unshift(from);
    // Only jobs that held slots in the range shown: the legend does not keep every job ever run.
    const traces = [...series.entries()].map(([job, points]) => {
      let i = 0, value = 0;
      const y = times.map((t) => { while (i < points.length && points[i][0] <= t) value = points[i++][1]; return value; });
      return { x: times.map((t) => new Date(t * 1000)), y, name: names.get(job) || "job " + job,
        stackgroup: "slots", mode: "lines", line: { shape: "hv", width: 0.5, color: colour(job) }, fillcolor: colour(job) };
    }).filter((t) => t.y.some((v) => v > 0));
    const chart = document.getElementById("chart-allocation");
    if (!traces.length) {
      if (chart.data) Plotly.purge(chart);
      chart.dataset.empty = "1";
      chart.replaceChildren(el("p", { class: "chart-empty" }, series.size
        ? "No job held a slot in this time range." : "No job has run yet: the chart fills as jobs get slots."));
    } else {
      if (chart.dataset.empty) { delete chart.dataset.empty; chart.replaceChildren(); }
      const narrow = chart.clientWidth < 640;
      const legend = narrow ? { orientation: "h", x: 0, y: -0.25, yanchor: "top" } : { x: 1.02, xanchor: "left", y: 1 };
      Plotly.react(chart, traces, { margin: { l: 50, r: 10, t: 10, b: narrow ? 40 : 40 }, height: narrow ? 320 : 260,
        yaxis: { title: { text: "slots" }, rangemode: "tozero", dtick: 1 },
        xaxis: { type: "date", range: [new Date(from * 1000), new Date(now * 1000)] },
        showlegend: true, legend }, { displayModeBar: false, responsive: true, showLink: false, showSendToCloud: false, topojsonURL: "/static/vendor/plotly-basic/" /* nothing from a CDN */ });
    }
    const ol = document.getElementById("decisions");
    if (!decisions.length) {
      ol.replaceChildren(el("li", { class: "empty" }, "None yet: each time the scheduler gives or takes slots, it says why here."));
      return;
    }
    ol.replaceChildren(...decisions.slice(0, 12).map((d) => {
      const li = el("li", {});
      li.append(el("time", {}, new Date(d.at * 1000).toLocaleTimeString()), " ", el("strong", {}, d.job), " ", el("span", {}, d.message));
      return li;
    }));
  }
  function later() { if (!redraw) redraw = setTimeout(drawAllocation, 300); }
  // One history load at a time: allocations that arrive meanwhile are kept and applied
  // after it.
  let loading = false, again = false, heldAllocations = [];
  async function loadAllocation() {
    if (loading) { again = true; return; }
    loading = true; again = false;
    try {
      const r = await fetch("/api/cluster/allocations", { credentials: "same-origin" });
      if (r.ok) {
        const data = await r.json();
        series.clear();
        for (const [job, points] of Object.entries(data.series)) for (const p of points) point(job, p[0], p[1]);
        for (const [job, name] of Object.entries(data.names)) names.set(job, name);
        decisions = data.decisions;
        drawAllocation();
        if (lastSlots) render(lastSlots); // now with the names of the jobs on the slots
      }
    } finally {
      loading = false;
    }
    const replay = heldAllocations;
    heldAllocations = [];
    for (const data of replay) onAllocation(data);
    if (again) loadAllocation();
  }
  function onAllocation(data) {
    if (loading) { heldAllocations.push(data); return; }
    const job = String(data.job);
    // Each allocation names its job (from the job's row): its first one can come before
    // any of its events is stored, and so before the history names it.
    if (data.name && names.get(job) !== data.name) {
      names.set(job, data.name);
      if (lastSlots) render(lastSlots); // the slots table names the job at once too
    }
    if (data.workers !== undefined) point(job, data.at, data.workers);
    if (data.state && ["COMPLETED", "FAILED", "STOPPED", "SUSPENDED"].includes(data.state)) point(job, data.at, 0);
    if (data.decision) decisions.unshift({ at: data.at, job: names.get(job), message: data.decision });
    later();
    if (data.state || data.decision) queueSoon();
  }
  // A step's changes arrive together: one queue refresh for all of them.
  let queueSoonTimer = null;
  function queueSoon() {
    if (!queueSoonTimer) queueSoonTimer = setTimeout(() => { queueSoonTimer = null; refreshQueue(); }, 100);
  }

  // The queue: your waiting jobs in their place in the whole queue, each with why it waits
  // (in the words of its job page); refreshed when the scheduler decides something and
  // every few seconds.
  let queueTimer = null;
  async function refreshQueue() {
    clearTimeout(queueTimer);
    queueTimer = setTimeout(refreshQueue, 5000);
    const r = await fetch("/api/v1/cluster/queue/", { credentials: "same-origin" });
    if (!r.ok) return;
    const jobs = await r.json();
    const ol = document.getElementById("queue");
    ol.replaceChildren(...jobs.map((j) => {
      const li = el("li", { "data-job": j.id });
      const why = j.reason ? j.reason[0].toUpperCase() + j.reason.slice(1) : `#${j.position} in the queue`;
      li.append(el("a", { href: "/jobs/" + j.id + "/" }, j.name),
        ` · ${j.state.toLowerCase()} · priority ${j.priority}`, el("small", { class: "reason" }, why));
      return li;
    }));
    if (!jobs.length) ol.append(el("li", { class: "empty" }, "Nothing waits."));
  }

  if (rangeEl) rangeEl.addEventListener("change", drawAllocation);
  EDT.live("/ws/cluster/", {
    open() { setLive("up", "live"); loadAllocation(); refreshQueue(); },
    message(data) {
      if (data.type === "slots") render(data.slots);
      else if (data.type === "allocation") onAllocation(data);
      else if (data.type === "allocations") for (const change of data.changes) onAllocation(change);
    },
    closed() { setLive("down", "reconnecting…"); },
  });
  setInterval(later, 5000); // keep the time axis moving
})();
