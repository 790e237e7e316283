// Cluster page: per resource group, each team's slots held against its entitlement over
// time (one chart per group), and each team's queue, from the scheduler's shares stream
// read through /api/v1/cluster/shares/: the history once, then what came after the last
// answer's cursor every few seconds.
(function () {
  "use strict";
  const chartsEl = document.getElementById("share-charts");
  const queueEl = document.getElementById("team-queue");
  const updatedEl = document.getElementById("shares-updated");
  const rangeEl = document.getElementById("allocation-range"); // the page's one time range
  if (!chartsEl) return;
  const EVERY_MS = 3000;
  const groups = new Map(); // group -> {capacity: [[t, n]], held: [[t, n]], teams: Map(team -> [[t, held, entitled]])}
  const names = new Map(); // team id -> name
  let cursor = null, timer = null, loadedSpan = null;

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  const hue = (key) => { // each team keeps its colour (golden-angle hues by its id)
    const n = key === "" ? 0 : Number(key) || [...key].reduce((a, c) => a + c.charCodeAt(0), 0);
    return "hsl(" + Math.round((n * 137.508 + 200) % 360) + ", 65%, 40%)";
  };
  const label = (key) => names.get(key) || (key === "" ? "no team" : "team " + key);

  function add(entry) {
    for (const [name, g] of groups) { // a group the entry leaves out has no job active then
      const last = g.capacity.length ? g.capacity[g.capacity.length - 1][1] : 0;
      if (!(name in entry.groups)) entry.groups[name] = { capacity: last, held: 0, teams: {} };
    }
    for (const [name, body] of Object.entries(entry.groups)) {
      if (!groups.has(name)) groups.set(name, { capacity: [], held: [], teams: new Map() });
      const g = groups.get(name);
      g.capacity.push([entry.t, body.capacity]);
      g.held.push([entry.t, body.held]);
      for (const [team, points] of g.teams) {
        if (!(team in body.teams)) points.push([entry.t, 0, 0]); // no job of it active any more
      }
      for (const [team, share] of Object.entries(body.teams)) {
        if (!g.teams.has(team)) g.teams.set(team, []);
        g.teams.get(team).push([entry.t, share.held, share.entitled]);
      }
    }
  }

  function series(points, index, from, now) {
    // A step line: the value before the range starts, each change, and the value now.
    const x = [], y = [];
    let before = null;
    for (const p of points) {
      if (p[0] < from) { before = p[index]; continue; }
      if (!x.length && before !== null) { x.push(new Date(from * 1000)); y.push(before); }
      x.push(new Date(p[0] * 1000)); y.push(p[index]);
    }
    if (!x.length && before !== null) { x.push(new Date(from * 1000)); y.push(before); }
    if (x.length) { x.push(new Date(now * 1000)); y.push(y[y.length - 1]); }
    return { x, y };
  }

  function chartFor(name) {
    const id = "shares-" + name.replace(/[^A-Za-z0-9_-]/g, "_");
    let box = document.getElementById(id);
    if (!box) {
      const section = el("section", { class: "share-group", "data-group": name });
      section.append(el("h3", {}, "Group " + name));
      box = el("div", { id, class: "chart share-chart", "data-group": name, role: "img",
        "aria-label": "slots held and entitled per team in resource group " + name });
      section.append(box);
      chartsEl.append(section);
    }
    return box;
  }

  function draw() {
    const now = Date.now() / 1000;
    const span = Number(rangeEl ? rangeEl.value : 3600);
    const empty = document.getElementById("shares-empty");
    if (!groups.size) {
      if (empty) empty.textContent = "No shares yet: the scheduler writes each team's slots and entitlement here as it decides.";
      return;
    }
    if (empty) empty.remove();
    for (const [name, g] of [...groups.entries()].sort((a, b) => a[0].localeCompare(b[0]))) {
      const first = g.capacity.length ? g.capacity[0][0] : now;
      const from = span ? Math.max(now - span, first - Math.max(10, (now - first) * 0.05)) : first;
      const traces = [];
      const capacity = series(g.capacity, 1, from, now);
      traces.push({ ...capacity, name: "capacity", mode: "lines", line: { shape: "hv", color: "#98a2b3", dash: "dash", width: 1 } });
      const held = series(g.held, 1, from, now);
      traces.push({ ...held, name: "all teams' slots", mode: "lines", line: { shape: "hv", color: "#475467", width: 1 } });
      for (const [team, points] of [...g.teams.entries()].sort((a, b) => label(a[0]).localeCompare(label(b[0])))) {
        const colour = hue(team);
        const mine = series(points, 1, from, now), due = series(points, 2, from, now);
        if (!mine.y.some((v) => v > 0) && !due.y.some((v) => v > 0)) continue;
        traces.push({ ...mine, name: label(team) + " holds", legendgroup: team, mode: "lines",
          line: { shape: "hv", color: colour, width: 2.5 }, meta: { team: label(team), kind: "held" } });
        traces.push({ ...due, name: label(team) + " entitled", legendgroup: team, mode: "lines",
          line: { shape: "hv", color: colour, width: 1.5, dash: "dot" }, meta: { team: label(team), kind: "entitled" } });
      }
      const box = chartFor(name);
      const narrow = box.clientWidth < 640;
      Plotly.react(box, traces, {
        margin: { l: 50, r: 10, t: 10, b: 40 }, height: narrow ? 320 : 260,
        yaxis: { title: { text: "slots" }, rangemode: "tozero" },
        xaxis: { type: "date", range: [new Date(from * 1000), new Date(now * 1000)] },
        showlegend: true, legend: narrow ? { orientation: "h", x: 0, y: -0.25, yanchor: "top" } : { x: 1.02, xanchor: "left", y: 1 },
      }, { displayModeBar: false, responsive: true, showLink: false, showSendToCloud: false });
      box.dataset.teams = JSON.stringify([...g.teams.keys()].map(label));
    }
  }

  function drawQueue(queue) {
    if (!queue.length) {
      queueEl.replaceChildren(el("p", { class: "empty" }, "Nothing waits."));
      return;
    }
    queueEl.replaceChildren(...queue.map((q) => {
      const block = el("div", { class: "team-queue", "data-group": q.group, "data-team": q.team });
      block.append(el("h3", {}, q.team + " · group " + q.group));
      const ol = el("ol", { class: "queue" });
      for (const job of q.jobs) {
        const li = el("li", job.id ? { "data-job": job.id } : {});
        if (job.id) li.append(el("a", { href: "/jobs/" + job.id + "/" }, job.name));
        else li.append(el("span", { class: "muted" }, job.name));
        li.append(" · " + job.state.toLowerCase() + (job.priority ? " · priority " + job.priority : ""));
        ol.append(li);
      }
      block.append(ol);
      return block;
    }));
  }

  let busy = false, again = false;
  async function load() {
    if (busy) { again = true; return; } // one answer at a time: entries are added once
    busy = true; again = false;
    clearTimeout(timer);
    const span = Number(rangeEl ? rangeEl.value : 3600);
    if (loadedSpan !== null && span !== loadedSpan && (span === 0 || span > loadedSpan)) {
      cursor = null; // a longer range than the history loaded: load it again
      groups.clear();
    }
    let query = "";
    if (cursor) query = "?since=" + encodeURIComponent(cursor);
    else if (span) query = "?since=" + (Date.now() / 1000 - span).toFixed(3);
    try {
      const r = await fetch("/api/v1/cluster/shares/" + query, { credentials: "same-origin" });
      if (r.ok) {
        const data = await r.json();
        for (const [id, name] of Object.entries(data.teams)) names.set(id, name);
        for (const entry of data.entries) add(entry);
        if (!cursor) loadedSpan = span;
        cursor = data.cursor || cursor;
        draw();
        drawQueue(data.queue);
        if (updatedEl) updatedEl.textContent = "updated " + new Date().toLocaleTimeString();
      }
    } finally {
      busy = false;
      timer = setTimeout(load, again ? 0 : EVERY_MS);
    }
  }
  if (rangeEl) rangeEl.addEventListener("change", load);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) load(); });
  load();
})();
