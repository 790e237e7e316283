// Jobs list: workers n/max, progress and ETA of the running jobs, refreshed every 2 s.
(function () {
  "use strict";
  function eta(seconds) {
    if (seconds === null || seconds === undefined) return "";
    return "ETA " + (seconds > 90 ? Math.round(seconds / 60) + " min" : Math.round(seconds) + " s");
  }
  async function refresh() {
    for (const row of document.querySelectorAll("#jobs tr[data-job]")) {
      const badge = row.querySelector(".badge");
      if (!badge || !["running", "queued", "suspended"].includes(badge.textContent)) continue;
      const r = await fetch("/jobs/" + row.dataset.job + "/state", { credentials: "same-origin" });
      if (!r.ok) continue;
      const s = await r.json();
      const cell = row.querySelector(".workers");
      cell.textContent = s.workers + "/" + cell.dataset.max;
      badge.textContent = s.state.toLowerCase();
      badge.className = "badge " + s.state.toLowerCase();
      const bar = row.querySelector(".progress");
      const pct = s.total_steps ? Math.min(100, 100 * s.steps_done / s.total_steps) : 0;
      bar.querySelector("span").style.width = pct + "%";
      bar.querySelector("em").textContent = s.steps_done + "/" + (s.total_steps || "?");
      row.querySelector(".eta").textContent = eta(s.eta);
    }
  }
  setInterval(refresh, 2000);
})();
