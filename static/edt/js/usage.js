// Usage page: slot-hours per period as stacked bars, one colour per team (or user), from
// the answer the page was rendered with (edtweb/tenancy/usage.py, the API's own).
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("usage-data").textContent);
  const chart = document.getElementById("chart-usage");
  const by = data.by;
  const label = (key) => (by === "team" && !key ? "no team" : key);
  const periods = JSON.parse(document.getElementById("usage-periods").textContent); // every one, empty too
  const keys = [...new Set(data.rows.map((r) => r[by]))].sort();
  if (!data.rows.length) {
    chart.dataset.empty = "1";
    const p = document.createElement("p");
    p.className = "chart-empty";
    p.textContent = "No job held a slot in this span.";
    chart.replaceChildren(p);
    return;
  }
  const hue = (i) => "hsl(" + Math.round((i * 137.508) % 360) + ", 60%, 45%)";
  const traces = keys.map((key, i) => {
    const hours = new Map(data.rows.filter((r) => r[by] === key).map((r) => [r.period, r.slot_hours]));
    return { type: "bar", name: label(key), x: periods, y: periods.map((p) => hours.get(p) || 0),
      marker: { color: hue(i) }, hovertemplate: "%{x}: %{y} slot-hours<extra>" + label(key) + "</extra>" };
  });
  const narrow = chart.clientWidth < 640;
  Plotly.newPlot(chart, traces, {
    barmode: "stack", height: narrow ? 340 : 300, margin: { l: 60, r: 10, t: 10, b: 50 },
    yaxis: { title: { text: "slot-hours" }, rangemode: "tozero" },
    xaxis: { type: "category", title: { text: data.period === "week" ? "week of" : "day" } },
    showlegend: true, legend: narrow ? { orientation: "h", y: -0.3 } : { x: 1.02, xanchor: "left", y: 1 },
  }, { displayModeBar: false, responsive: true, showLink: false, showSendToCloud: false });
})();
