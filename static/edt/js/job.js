// A job's page: history over HTTP, then live deltas over /ws/jobs/<id>/ with sequence
// numbers (a gap reloads the history); redraws are coalesced to a few per second.
(function () {
  "use strict";
  const root = document.getElementById("job");
  const jobId = root.dataset.job;
  const total = Number(root.dataset.total) || 0;
  const liveEl = document.getElementById("live");
  const ACTIVE = ["QUEUED", "RUNNING", "SUSPENDED"];
  let jobState = root.dataset.state;
  const ended = () => !ACTIVE.includes(jobState);
  const layout = (y) => ({ margin: { l: 60, r: 15, t: 10, b: 50 }, height: 250, xaxis: { title: { text: "iteration" } },
    yaxis: { title: { text: y } }, showlegend: true, legend: { orientation: "h", y: 1.15 } });
  const config = { displayModeBar: false, responsive: true };
  let seq = 0, pending = [], events = [], scheduled = false;

  const charts = {
    loss: { el: "chart-loss", traces: [{ name: "train loss", mode: "lines" }, { name: "test loss", mode: "lines+markers" },
      { name: "test accuracy", mode: "lines+markers", yaxis: "y2" }], y: "loss" },
    workers: { el: "chart-workers", traces: [{ name: "workers", mode: "lines", line: { shape: "hv" }, fill: "tozeroy" }], y: "workers" },
    steps: { el: "chart-steps", traces: [{ name: "iterations", mode: "lines" }], y: "iterations" },
    throughput: { el: "chart-throughput", traces: [{ name: "samples/s", mode: "lines" }], y: "samples/s" },
  };

  function columns(records) {
    const c = { trainStep: [], loss: [], testStep: [], testLoss: [], testAcc: [], time: [], workers: [], steps: [], rate: [] };
    for (const r of records) {
      if (r.type === "train") {
        c.trainStep.push(r.step); c.loss.push(r.loss); c.workers.push(r.workers);
        c.time.push(new Date(r.time * 1000)); c.steps.push(r.step); c.rate.push(r.samples_per_s);
      } else if (r.type === "test") {
        c.testStep.push(r.step); c.testLoss.push(r.test_loss); c.testAcc.push(r.test_accuracy);
      }
    }
    return c;
  }

  function scaleMarks() {
    return events.filter((e) => e.kind === "generation").map((e) => ({ type: "line", xref: "x", yref: "paper",
      x0: e.step || 0, x1: e.step || 0, y0: 0, y1: 1, line: { dash: "dot", color: "#98a2b3", width: 1 } }));
  }

  function draw(history) {
    const c = columns(history.train.concat(history.test));
    const loss = layout("loss");
    loss.yaxis2 = { overlaying: "y", side: "right", range: [0, 1], title: { text: "accuracy" },
      tickvals: [0, 0.25, 0.5, 0.75, 1], tickformat: ".0%", showgrid: false };
    loss.margin = Object.assign({}, loss.margin, { r: 55 });
    loss.shapes = scaleMarks();
    Plotly.react(charts.loss.el, [
      Object.assign({ x: c.trainStep, y: c.loss }, charts.loss.traces[0]),
      Object.assign({ x: c.testStep, y: c.testLoss }, charts.loss.traces[1]),
      Object.assign({ x: c.testStep, y: c.testAcc }, charts.loss.traces[2]),
    ], loss, config);
    const timeLayout = (y) => Object.assign(layout(y), { xaxis: { type: "date", title: { text: "time" } } });
    Plotly.react(charts.workers.el, [Object.assign({ x: c.time, y: c.workers }, charts.workers.traces[0])],
      Object.assign(timeLayout("workers"), { yaxis: { title: { text: "workers" }, rangemode: "tozero", dtick: 1 } }), config);
    Plotly.react(charts.steps.el, [Object.assign({ x: c.time, y: c.steps }, charts.steps.traces[0])], timeLayout("iterations"), config);
    Plotly.react(charts.throughput.el, [Object.assign({ x: c.time, y: c.rate }, charts.throughput.traces[0])], timeLayout("samples/s"), config);
    summarize(history.train);
  }

  function extend(records) {
    const c = columns(records);
    if (c.trainStep.length) {
      Plotly.extendTraces(charts.loss.el, { x: [c.trainStep], y: [c.loss] }, [0]);
      Plotly.extendTraces(charts.workers.el, { x: [c.time], y: [c.workers] }, [0]);
      Plotly.extendTraces(charts.steps.el, { x: [c.time], y: [c.steps] }, [0]);
      Plotly.extendTraces(charts.throughput.el, { x: [c.time], y: [c.rate] }, [0]);
    }
    if (c.testStep.length) Plotly.extendTraces(charts.loss.el, { x: [c.testStep, c.testStep], y: [c.testLoss, c.testAcc] }, [1, 2]);
    summarize(records.filter((r) => r.type === "train"));
  }

  let recent = [];
  function summarize(train) {
    if (!train.length) return;
    const last = train[train.length - 1];
    document.getElementById("workers").textContent = ended() ? 0 : last.workers;
    document.getElementById("step").textContent = last.step;
    recent = recent.concat(train).slice(-50);
    const rate = recent.reduce((s, r) => s + r.samples_per_s, 0) / recent.length;
    document.getElementById("throughput").textContent = rate.toFixed(0);
    if (ended()) {
      document.getElementById("eta").textContent = "–";
    } else if (total && recent.length > 1) {
      const span = recent[recent.length - 1].time - recent[0].time;
      const perStep = span / (recent[recent.length - 1].step - recent[0].step || 1);
      const left = Math.max(0, (total - last.step) * perStep);
      document.getElementById("eta").textContent = left > 90 ? Math.round(left / 60) + " min" : Math.round(left) + " s";
    }
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

  async function load() {
    const r = await fetch("/jobs/" + jobId + "/metrics?points=2000", { credentials: "same-origin" });
    const history = await r.json();
    seq = history.seq;
    events = history.events;
    draw(history);
    timeline();
  }

  function flush() {
    scheduled = false;
    const batch = pending;
    pending = [];
    if (batch.length) extend(batch);
  }

  function onMessage(msg) {
    const data = JSON.parse(msg.data);
    if (data.type === "metrics") {
      if (data.from !== seq) { load(); return; } // a gap: reload the history
      seq = data.to;
      pending = pending.concat(data.records);
      if (!scheduled) { scheduled = true; setTimeout(flush, 250); }
    } else if (data.type === "event") {
      events.push(data.event);
      timeline();
    } else if (data.type === "state") {
      showState(data.state);
    }
  }

  let retry = 500;
  function connect() {
    const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/jobs/" + jobId + "/");
    ws.onopen = () => { retry = 500; liveEl.className = "live up"; liveEl.textContent = "live"; load(); };
    ws.onmessage = onMessage;
    ws.onclose = () => {
      liveEl.className = "live down"; liveEl.textContent = "reconnecting…";
      setTimeout(connect, retry); retry = Math.min(retry * 2, 10000);
    };
  }

  // Logs: one tab per learner, tailing its file.
  let logSlot = null, logOffset = -20000;
  async function tail() {
    if (logSlot) {
      const r = await fetch("/jobs/" + jobId + "/log?slot=" + encodeURIComponent(logSlot) + "&offset=" + logOffset, { credentials: "same-origin" });
      const data = await r.json();
      const pre = document.getElementById("log");
      if (data.text) { pre.textContent = (pre.textContent + data.text).slice(-200000); pre.scrollTop = pre.scrollHeight; }
      logOffset = data.offset;
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
    if (!logSlot) tabs.querySelector("button")?.click();
  }
  document.querySelectorAll("#log-tabs button").forEach(logTab);
  logTabs([]); // open the first learner's log

  // Slot telemetry of the job's learners, every 2 s.
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
      logTabs(s.logs || []);
      downloads(s);
      if (s.state !== jobState || (s.error && !document.getElementById("job-error"))) showState(s.state, s.error);
      if (s.eta !== null && s.eta !== undefined) {
        document.getElementById("eta").textContent = s.eta > 90 ? Math.round(s.eta / 60) + " min" : Math.round(s.eta) + " s";
      }
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
    const badge = document.getElementById("job-state");
    badge.textContent = state.toLowerCase();
    badge.className = "badge " + state.toLowerCase();
    if (!ended()) return;
    document.getElementById("workers").textContent = 0;
    document.getElementById("eta").textContent = "–";
    document.getElementById("stop-form").hidden = true;
    document.getElementById("delete-form").hidden = false;
    document.getElementById("priority").disabled = true;
  }

  connect();
  tail();
  slots();
})();
