// Curves of several jobs overlaid (a sweep's trials, or jobs picked to compare): one trace
// per job of the chosen metric (train loss, test loss, test accuracy), by iteration or by
// time. Each curve is [[step, time, value], ...] (edtweb/sweeps/compare.py, curves).
window.EDTCurves = (function () {
  "use strict";
  const config = { displayModeBar: false, responsive: true, showLink: false, showSendToCloud: false };
  const LABELS = { loss: "train loss", test_loss: "test loss", test_accuracy: "test accuracy" };

  function empty(el, text) {
    if (el.data) Plotly.purge(el);
    el.dataset.empty = "1";
    const p = document.createElement("p");
    p.className = "chart-empty";
    p.textContent = text;
    el.replaceChildren(p);
  }

  function draw(el, curves, opts) {
    const metric = opts.metric || "loss", axis = opts.axis || "step";
    const traces = curves.map((c) => {
      const rows = (c[metric] || []).filter((r) => r[2] !== null && r[2] !== undefined);
      return { x: rows.map((r) => (axis === "time" ? new Date(r[1] * 1000) : r[0])), y: rows.map((r) => r[2]),
        name: opts.label(c), mode: metric === "loss" ? "lines" : "lines+markers", type: "scatter",
        line: { width: c.highlight ? 3 : 1.5 }, opacity: c.dim ? 0.45 : 1 };
    }).filter((t) => t.x.length);
    if (!traces.length) { empty(el, opts.emptyText || "No records yet."); return; }
    if (el.dataset.empty) { delete el.dataset.empty; el.replaceChildren(); }
    const layout = { margin: { l: 60, r: 20, t: 10, b: 50 }, height: 320, showlegend: true,
      legend: { orientation: "h", x: 0, y: -0.25 },
      xaxis: axis === "time" ? { type: "date", title: { text: "time" } } : { title: { text: "iteration" } },
      yaxis: metric === "test_accuracy" ? { title: { text: LABELS[metric] }, tickformat: ".0%" } : { title: { text: LABELS[metric] } } };
    Plotly.react(el, traces, layout, config);
  }

  return { draw, config };
})();
