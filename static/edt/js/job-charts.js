// The job page's charts: loss and accuracy (by iteration or time, smoothed, linear or log),
// workers, iterations and throughput over time, and for a goodput-mode job its global batch
// and statistical efficiency (its records' ``batch`` and ``efficiency``). The page hands it
// the history (reset) and live records (add); a chart without data says so instead of
// drawing empty axes.
window.JobCharts = (function () {
  "use strict";
  const config = { displayModeBar: false, responsive: true, showLink: false, showSendToCloud: false, topojsonURL: "/static/vendor/plotly-basic/" /* nothing from a CDN */ };
  const THROUGHPUT_SMOOTHING = 0.9;
  const ids = { loss: "chart-loss", workers: "chart-workers", steps: "chart-steps", throughput: "chart-throughput" };
  if (document.getElementById("chart-batch")) ids.batch = "chart-batch"; // goodput mode only
  const opts = { smooth: 0.6, log: false, axis: "step" };
  let train = [], test = [], events = [], endedAt = null, drawn = false, emptyText = "";
  let ema = {};

  // Exponential moving average, carried on across calls (so live points extend it).
  function smooth(key, values, weight) {
    return values.map((v) => {
      if (v === null || v === undefined || Number.isNaN(v)) return v;
      ema[key] = ema[key] === undefined || weight === 0 ? v : weight * ema[key] + (1 - weight) * v;
      return ema[key];
    });
  }

  function columns(records) {
    const trainRecs = records.filter((r) => r.type === "train");
    const testRecs = records.filter((r) => r.type === "test");
    const when = (r) => new Date(r.time * 1000);
    const x = (r) => (opts.axis === "time" ? when(r) : r.step);
    return {
      x: trainRecs.map(x), time: trainRecs.map(when),
      loss: smooth("loss", trainRecs.map((r) => r.loss), opts.smooth),
      workers: trainRecs.map((r) => r.workers), steps: trainRecs.map((r) => r.step),
      rate: trainRecs.map((r) => r.samples_per_s),
      rateSmooth: smooth("rate", trainRecs.map((r) => r.samples_per_s), THROUGHPUT_SMOOTHING),
      batch: trainRecs.map((r) => r.batch), efficiency: trainRecs.map((r) => r.efficiency),
      testX: testRecs.map(x), testLoss: testRecs.map((r) => r.test_loss), testAcc: testRecs.map((r) => r.test_accuracy),
    };
  }

  // On a phone, fewer time ticks: they stay level instead of tilting over the axis title.
  const ticks = () => (window.innerWidth < 600 ? 3 : 0);
  const HEIGHT = 250, PLOT = HEIGHT - 10 - 50;
  const base = (y, x) => ({ margin: { l: 60, r: 20, t: 10, b: 50 }, height: HEIGHT, showlegend: false,
    xaxis: x === "time" ? { type: "date", title: { text: "time" }, nticks: ticks() } : { title: { text: "iteration" } },
    yaxis: { title: { text: y } } });

  function marks() {
    return events.filter((e) => e.kind === "generation").map((e) => {
      const at = opts.axis === "time" ? new Date(e.at * 1000) : e.step || 0;
      return { type: "line", xref: "x", yref: "paper", x0: at, x1: at, y0: 0, y1: 1,
        line: { dash: "dot", color: "#98a2b3", width: 1 } };
    });
  }

  function lossLayout() {
    const l = base("loss", opts.axis);
    l.yaxis.type = opts.log ? "log" : "linear";
    // A little room above 100 % so a perfect accuracy stays visible inside the frame.
    l.yaxis2 = { overlaying: "y", side: "right", range: [0, 1.05], title: { text: "accuracy" },
      tickvals: [0, 0.25, 0.5, 0.75, 1], tickformat: ".0%", showgrid: false };
    l.margin = { l: 60, r: 55, t: 30, b: 50 };
    l.showlegend = true;
    l.legend = { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" };
    l.shapes = marks();
    return l;
  }

  // A legend above a chart takes its rows (one; up to three on a narrow card) from the plot:
  // the chart grows by as much, so its plot keeps the height of the others.
  function keepPlotHeight(el) {
    const full = el._fullLayout;
    const short = full && full._size ? PLOT - full._size.h : 0;
    if (Math.abs(short) > 1) return Plotly.relayout(el, { height: full.height + short });
  }

  function showEmpty() {
    for (const id of Object.values(ids)) {
      const el = document.getElementById(id);
      if (el.data) Plotly.purge(el);
      el.dataset.empty = "1";
      el.replaceChildren();
      const p = document.createElement("p");
      p.className = "chart-empty";
      p.textContent = emptyText;
      el.append(p);
    }
    drawn = false;
  }

  // With the job ended, workers and throughput end at 0 (they are not frozen at the last
  // value), at its end or just after its last record, whichever is later.
  const tail = (c, key) => (endedAt ? c[key].concat([0]) : c[key]);
  const tailTime = (c) => {
    if (!endedAt) return c.time;
    const last = c.time.length ? c.time[c.time.length - 1].getTime() / 1000 : endedAt;
    return c.time.concat([new Date(Math.max(endedAt, last) * 1000)]);
  };
  // The workers axis reaches a little past the job's maximum: a full job's line is not
  // drawn on the frame.
  const maxWorkers = Number(document.getElementById("job")?.dataset.max) || 1;

  function drawAll() {
    ema = {};
    if (!train.length && !test.length) { showEmpty(); return; }
    const c = columns(train.concat(test));
    for (const id of Object.values(ids)) {
      const el = document.getElementById(id);
      if (el.dataset.empty) { delete el.dataset.empty; el.replaceChildren(); }
    }
    Plotly.react(ids.loss, [
      { x: c.x, y: c.loss, name: "train loss" + (opts.smooth ? " (smoothed)" : ""), mode: "lines" },
      { x: c.testX, y: c.testLoss, name: "test loss", mode: "lines+markers" },
      { x: c.testX, y: c.testAcc, name: "test accuracy", mode: "lines+markers", yaxis: "y2" },
    ], lossLayout(), config).then(keepPlotHeight);
    const time = tailTime(c);
    Plotly.react(ids.workers, [{ x: time, y: tail(c, "workers"), name: "workers", mode: "lines", line: { shape: "hv" }, fill: "tozeroy" }],
      Object.assign(base("workers", "time"), { yaxis: { title: { text: "workers" }, dtick: 1,
        range: [0, Math.max(maxWorkers, ...c.workers) * 1.12] } }), config);
    Plotly.react(ids.steps, [{ x: c.time, y: c.steps, name: "iterations", mode: "lines" }], base("iterations", "time"), config);
    Plotly.react(ids.throughput, [
      { x: time, y: tail(c, "rate"), name: "each iteration", mode: "lines", line: { color: "#d0d5dd", width: 1 } },
      { x: time, y: tail(c, "rateSmooth"), name: "smoothed", mode: "lines", line: { color: "#2457c5" } },
    ], Object.assign(base("samples/s", "time"), { showlegend: true, margin: { l: 60, r: 20, t: 30, b: 50 },
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" }, yaxis: { title: { text: "samples/s" }, rangemode: "tozero" } }), config)
      .then(keepPlotHeight);
    if (ids.batch) {
      Plotly.react(ids.batch, [
        { x: c.time, y: c.batch, name: "global batch", mode: "lines", line: { shape: "hv", color: "#2457c5" } },
        { x: c.time, y: c.efficiency, name: "efficiency", mode: "lines", yaxis: "y2", line: { color: "#c4320a" } },
      ], Object.assign(base("global batch", "time"), { showlegend: true, margin: { l: 60, r: 55, t: 30, b: 50 },
        legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
        yaxis: { title: { text: "global batch" }, rangemode: "tozero" },
        yaxis2: { overlaying: "y", side: "right", range: [0, 1.05], title: { text: "efficiency" },
          tickvals: [0, 0.25, 0.5, 0.75, 1], tickformat: ".0%", showgrid: false } }), config)
        .then(keepPlotHeight);
    }
    drawn = true;
  }

  function extend(records) {
    const c = columns(records);
    if (c.x.length) {
      Plotly.extendTraces(ids.loss, { x: [c.x], y: [c.loss] }, [0]);
      Plotly.extendTraces(ids.workers, { x: [c.time], y: [c.workers] }, [0]);
      Plotly.extendTraces(ids.steps, { x: [c.time], y: [c.steps] }, [0]);
      Plotly.extendTraces(ids.throughput, { x: [c.time, c.time], y: [c.rate, c.rateSmooth] }, [0, 1]);
      if (ids.batch) Plotly.extendTraces(ids.batch, { x: [c.time, c.time], y: [c.batch, c.efficiency] }, [0, 1]);
    }
    if (c.testX.length) Plotly.extendTraces(ids.loss, { x: [c.testX, c.testX], y: [c.testLoss, c.testAcc] }, [1, 2]);
  }

  // The metrics' CSV holds every record (the charts hold a thinned history).
  function controls() {
    const bind = (id, key, parse) => {
      const el = document.getElementById(id);
      if (!el) return;
      el.addEventListener("change", () => { opts[key] = parse(el); drawAll(); });
      opts[key] = parse(el);
    };
    bind("opt-smooth", "smooth", (el) => Number(el.value));
    bind("opt-log", "log", (el) => el.checked);
    bind("opt-axis", "axis", (el) => el.value);
  }
  controls();

  return {
    reset(history, empty) {
      emptyText = empty;
      train = history.train.slice(); test = history.test.slice(); events = history.events;
      drawAll();
    },
    add(records) {
      train = train.concat(records.filter((r) => r.type === "train"));
      test = test.concat(records.filter((r) => r.type === "test"));
      if (drawn && !endedAt) extend(records); else drawAll();
    },
    events(list) { events = list; if (drawn) Plotly.relayout(ids.loss, { shapes: marks() }); },
    ended(at) { if (endedAt) return; endedAt = at; if (drawn) drawAll(); },
    empty(text) { emptyText = text; if (!drawn) showEmpty(); },
  };
})();
