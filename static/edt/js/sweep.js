// A sweep's page: its state polled every 2 s while it is queued or running (the server's
// view, edtweb/sweeps/state.py, shown as it is) and its trials' curves every 5 s; the
// trials' table, the best trial, the objective over time, the parallel coordinates of the
// trials' hyperparameters and objective, and their curves overlaid. Trials ticked in the
// table open the compare page.
(function () {
  "use strict";
  const root = document.getElementById("sweep");
  const id = root.dataset.sweep;
  const ACTIVE = ["QUEUED", "RUNNING"];
  let state = JSON.parse(document.getElementById("sweep-initial").textContent);
  let curves = [];
  const picked = new Set();
  const params = Object.keys(state.space);
  const num = (v) => (typeof v === "number" ? String(Number(v.toPrecision(4))) : v === null || v === undefined || v === "" ? "—" : String(v));
  const COLORS = { COMPLETE: "#067647", PRUNED: "#98a2b3", FAIL: "#b42318", RUNNING: "#2457c5" };

  function cell(text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }

  function table() {
    const body = document.querySelector("#trials tbody");
    if (!state.trials.length) return;
    body.replaceChildren(...state.trials.map((t) => {
      const tr = document.createElement("tr");
      tr.dataset.job = t.job; tr.dataset.trial = t.number; tr.dataset.state = t.trial_state;
      const pick = document.createElement("input");
      pick.type = "checkbox"; pick.className = "pick"; pick.value = t.job;
      pick.checked = picked.has(String(t.job));
      pick.setAttribute("aria-label", "select trial " + t.number);
      const first = document.createElement("td"); first.append(pick);
      const link = document.createElement("a"); link.href = t.url; link.textContent = "#" + t.number;
      const second = document.createElement("td"); second.append(link);
      const badge = document.createElement("span");
      badge.className = "badge " + t.state.toLowerCase(); badge.textContent = t.state.toLowerCase();
      const small = document.createElement("small"); small.textContent = " " + t.trial_state.toLowerCase();
      const third = document.createElement("td"); third.append(badge, small);
      tr.append(first, second, third, ...params.map((p) => cell(num(t.hparams[p]))),
        cell(num(t.objective)), cell(t.workers + "/" + t.max_workers), cell(t.duration || "—"), cell(t.note, "note"));
      return tr;
    }));
  }

  document.querySelector("#trials").addEventListener("change", (e) => {
    if (!e.target.classList.contains("pick")) return;
    if (e.target.checked) picked.add(e.target.value); else picked.delete(e.target.value);
    const button = document.getElementById("compare-trials");
    button.disabled = picked.size < 2;
    document.getElementById("picked-count").textContent = picked.size ? picked.size + " selected" : "";
  });
  document.getElementById("compare-trials").addEventListener("click", () => {
    location.href = "/compare/?ids=" + [...picked].join(",");
  });

  function summary() {
    const badge = document.getElementById("sweep-state");
    badge.textContent = state.state.toLowerCase();
    badge.className = "badge " + state.state.toLowerCase();
    root.dataset.state = state.state;
    const bar = document.getElementById("sweep-progress");
    bar.querySelector("span").style.width = 100 * state.progress + "%";
    bar.querySelector("em").textContent = state.done + "/" + state.total + " trials ended";
    for (const k of ["running", "completed", "pruned", "failed"]) document.getElementById("count-" + k).textContent = state[k];
    document.getElementById("elapsed").textContent = state.elapsed_text;
    const error = document.getElementById("sweep-error");
    error.textContent = state.error; error.hidden = !state.error;
    const active = ACTIVE.includes(state.state);
    document.getElementById("live").hidden = !active;
    const hide = (elId, hidden) => { const el = document.getElementById(elId); if (el) el.hidden = hidden; };
    hide("stop-form", !active);
    hide("resume-form", state.state !== "STOPPED");
  }

  function best() {
    const box = document.getElementById("best-body");
    const b = state.best;
    if (!b) return;
    const p = document.createElement("p");
    const a = document.createElement("a"); a.href = b.url; a.textContent = "Trial " + b.number;
    const strong = document.createElement("strong"); strong.textContent = num(b.objective);
    p.append(a, ": " + state.objective + " ", strong);
    const dl = document.createElement("dl"); dl.className = "facts";
    for (const [k, v] of Object.entries(b.hparams)) {
      const dt = document.createElement("dt"); dt.textContent = k;
      const dd = document.createElement("dd"); dd.textContent = num(v);
      dl.append(dt, dd);
    }
    const parts = [p, dl];
    if (b.download) {
      const link = document.createElement("a");
      link.className = "button"; link.id = "best-download"; link.href = b.download;
      link.textContent = "Download its model (model.pt)";
      parts.push(link);
    }
    box.replaceChildren(...parts);
  }

  function empty(el, text) {
    if (el.data) Plotly.purge(el);
    el.dataset.empty = "1";
    const p = document.createElement("p"); p.className = "chart-empty"; p.textContent = text;
    el.replaceChildren(p);
  }
  function ready(el) { if (el.dataset.empty) { delete el.dataset.empty; el.replaceChildren(); } }

  // Each trial's objective when it ended (or now, while it runs), by its state; the best
  // so far among the completed ones as a step line.
  function objectiveChart() {
    const el = document.getElementById("chart-objective");
    const seen = state.trials.filter((t) => t.objective !== null);
    if (!seen.length) { empty(el, "No objective reported yet."); return; }
    ready(el);
    const when = (t) => new Date((t.finished_at || Date.now() / 1000) * 1000);
    const traces = Object.keys(COLORS).map((s) => {
      const ts = seen.filter((t) => t.trial_state === s);
      return { x: ts.map(when), y: ts.map((t) => t.objective), text: ts.map((t) => "trial " + t.number),
        name: s.toLowerCase(), mode: "markers", type: "scatter", marker: { color: COLORS[s], size: 9 } };
    }).filter((t) => t.x.length);
    const done = seen.filter((t) => t.trial_state === "COMPLETE").sort((a, b) => a.finished_at - b.finished_at);
    let bestSoFar = null;
    const better = (v) => bestSoFar === null || (state.direction === "maximize" ? v > bestSoFar : v < bestSoFar);
    const line = { x: [], y: [], name: "best so far", mode: "lines", type: "scatter", line: { shape: "hv", color: "#101828" } };
    for (const t of done) { if (better(t.objective)) bestSoFar = t.objective; line.x.push(when(t)); line.y.push(bestSoFar); }
    if (line.x.length) traces.push(line);
    Plotly.react(el, traces, { margin: { l: 60, r: 20, t: 10, b: 50 }, height: 280, showlegend: true,
      legend: { orientation: "h", x: 0, y: -0.3 }, xaxis: { type: "date", title: { text: "time" } },
      yaxis: { title: { text: state.objective } } }, EDTCurves.config);
  }

  // Parallel coordinates: one axis per hyperparameter (a log scale's as log10, a choice's
  // by its position in the list), then the objective; each line a trial, coloured by it.
  function parcoords() {
    const el = document.getElementById("chart-parcoords");
    const seen = state.trials.filter((t) => t.objective !== null);
    if (!seen.length) { empty(el, "The plot fills in as trials report their objective."); return; }
    ready(el);
    const dims = params.map((name) => {
      const spec = state.space[name];
      if (spec.type === "choice") {
        const labels = spec.choices.map(String);
        return { label: name, values: seen.map((t) => labels.indexOf(String(t.hparams[name]))),
          tickvals: labels.map((_, i) => i), ticktext: labels, range: [0, Math.max(labels.length - 1, 1)] };
      }
      if (spec.type === "loguniform") {
        return { label: name + " (log10)", values: seen.map((t) => Math.log10(t.hparams[name])),
          range: [Math.log10(spec.low), Math.log10(spec.high)] };
      }
      return { label: name, values: seen.map((t) => t.hparams[name]), range: [spec.low, spec.high] };
    });
    const objective = seen.map((t) => t.objective);
    dims.push({ label: state.objective, values: objective });
    Plotly.react(el, [{ type: "parcoords", dimensions: dims,
      line: { color: objective, colorscale: "Viridis", reversescale: state.direction === "minimize", showscale: true,
        colorbar: { title: { text: state.objective } } } }],
    { margin: { l: 60, r: 60, t: 40, b: 20 }, height: 300 }, EDTCurves.config);
  }

  function curvesChart() {
    const best = state.best ? state.best.job : null;
    const shown = curves.map((c) => Object.assign({}, c, { highlight: c.job === best, dim: c.trial_state === "PRUNED" || c.trial_state === "FAIL" }));
    EDTCurves.draw(document.getElementById("chart-curves"), shown, {
      metric: document.getElementById("curves-metric").value, axis: document.getElementById("curves-axis").value,
      label: (c) => "trial " + c.trial + (c.job === best ? " (best)" : ""), emptyText: "No trial has trained yet." });
  }
  for (const elId of ["curves-metric", "curves-axis"]) document.getElementById(elId).addEventListener("change", curvesChart);

  function drawAll() { summary(); table(); best(); objectiveChart(); parcoords(); }

  async function poll() {
    let active = ACTIVE.includes(state.state);
    try {
      const r = await fetch("/sweeps/" + id + "/state", { credentials: "same-origin" });
      if (r.ok) { state = await r.json(); drawAll(); active = ACTIVE.includes(state.state); }
    } finally { if (active) setTimeout(poll, 2000); else loadCurves(); }
  }

  let curvesTimer = null;
  async function loadCurves() {
    clearTimeout(curvesTimer);
    try {
      const r = await fetch("/sweeps/" + id + "/curves", { credentials: "same-origin" });
      if (r.ok) { curves = (await r.json()).curves; curvesChart(); }
    } finally { if (ACTIVE.includes(state.state)) curvesTimer = setTimeout(loadCurves, 5000); }
  }

  drawAll();
  loadCurves();
  if (ACTIVE.includes(state.state)) setTimeout(poll, 2000);
})();
