// Compare page: the picked jobs' curves overlaid (train loss, test loss or test accuracy;
// by iteration or by time), refreshed every 5 s while any of them is active.
(function () {
  "use strict";
  const ids = document.getElementById("compare").dataset.ids;
  const ACTIVE = ["QUEUED", "RUNNING", "SUSPENDED"];
  let curves = [];
  function draw() {
    EDTCurves.draw(document.getElementById("chart-compare"), curves, {
      metric: document.getElementById("curves-metric").value, axis: document.getElementById("curves-axis").value,
      label: (c) => (c.trial !== null ? c.name : c.name + " (job " + c.job + ")"), emptyText: "None of these jobs has trained yet." });
  }
  for (const id of ["curves-metric", "curves-axis"]) document.getElementById(id).addEventListener("change", draw);
  async function load() {
    let again = true;
    try {
      const r = await fetch("/compare/curves?ids=" + encodeURIComponent(ids), { credentials: "same-origin" });
      if (r.ok) { curves = (await r.json()).curves; draw(); again = curves.some((c) => ACTIVE.includes(c.state)); }
    } finally { if (again) setTimeout(load, 5000); }
  }
  load();
})();
