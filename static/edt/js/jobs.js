// Jobs list: workers n/max, progress and ETA of the active jobs refreshed every 2 s (each
// job's status as the server computed it, shown as it is: edtweb/training/status.py); new
// jobs appear without a reload; find, filter by state and sort by a column, in the page;
// jobs ticked (two or more) open the compare page.
(function () {
  "use strict";
  const table = document.getElementById("jobs");
  const body = table.querySelector("tbody");
  const find = document.getElementById("jobs-filter");
  const stateSel = document.getElementById("jobs-state");
  const countEl = document.getElementById("jobs-count");
  let sortKey = null, sortDir = 1;

  async function refresh() {
    for (const row of body.querySelectorAll("tr[data-job]")) {
      const badge = row.querySelector(".badge");
      if (!badge || !["running", "queued", "suspended"].includes(badge.textContent)) continue;
      const r = await fetch("/jobs/" + row.dataset.job + "/state", { credentials: "same-origin" });
      if (!r.ok) continue;
      const s = await r.json();
      const cell = row.querySelector(".workers");
      cell.textContent = s.workers + "/" + cell.dataset.max;
      badge.textContent = s.state.toLowerCase();
      badge.className = "badge " + s.state.toLowerCase();
      row.dataset.state = s.state.toLowerCase();
      const bar = row.querySelector(".progress");
      bar.querySelector("span").style.width = 100 * s.progress + "%";
      bar.querySelector("em").textContent = s.steps_done + "/" + (s.total_steps || "?");
      row.querySelector(".eta").textContent = s.eta_text ? "ETA " + s.eta_text : "";
      const estimate = row.querySelector(".estimate");
      if (estimate) estimate.textContent = s.estimate_text || "";
    }
  }

  // New jobs (submitted elsewhere: another tab, the CLI, the API): take the fresh rows.
  let checks = 0;
  async function newJobs() {
    if (++checks % 3) return; // every ~6 s
    const r = await fetch(location.pathname, { credentials: "same-origin" });
    if (!r.ok) return;
    const fresh = new DOMParser().parseFromString(await r.text(), "text/html").querySelector("#jobs tbody");
    const ids = (tb) => [...tb.querySelectorAll("tr[data-job]")].map((tr) => tr.dataset.job).join();
    if (!fresh || ids(fresh) === ids(body)) return;
    body.replaceChildren(...fresh.children);
    body.querySelectorAll("input.priority").forEach((s) => window.EDTPriority && window.EDTPriority.bind(s));
    body.querySelectorAll("input.pick").forEach((box) => { box.checked = picked.has(box.value); });
    arrange();
  }

  // Ticked jobs, kept across the rows' refreshes; two or more: Compare selected.
  const picked = new Set();
  const compareButton = document.getElementById("compare-jobs");
  body.addEventListener("change", (e) => {
    if (!e.target.classList.contains("pick")) return;
    if (e.target.checked) picked.add(e.target.value); else picked.delete(e.target.value);
    compareButton.disabled = picked.size < 2;
    compareButton.textContent = picked.size ? "Compare selected (" + picked.size + ")" : "Compare selected";
  });
  compareButton.addEventListener("click", () => { location.href = "/compare/?ids=" + [...picked].join(","); });

  function arrange() {
    const text = find.value.trim().toLowerCase(), state = stateSel.value;
    const rows = [...body.querySelectorAll("tr[data-job]")];
    let shown = 0;
    for (const row of rows) {
      const visible = (!text || row.dataset.text.includes(text)) && (!state || row.dataset.state === state);
      row.hidden = !visible;
      shown += visible;
    }
    if (sortKey) {
      const value = (row) => (sortKey === "name" ? row.dataset.name : Number(row.dataset[sortKey]));
      rows.sort((a, b) => (value(a) < value(b) ? -1 : value(a) > value(b) ? 1 : 0) * sortDir);
      body.append(...rows);
    }
    countEl.textContent = rows.length ? shown + " of " + rows.length + " jobs" : "";
  }
  for (const button of table.querySelectorAll("button.sort")) {
    button.addEventListener("click", () => {
      sortDir = sortKey === button.dataset.key ? -sortDir : (button.dataset.key === "name" ? 1 : -1);
      sortKey = button.dataset.key;
      for (const th of table.querySelectorAll("th[aria-sort]")) th.setAttribute("aria-sort", "none");
      button.parentElement.setAttribute("aria-sort", sortDir > 0 ? "ascending" : "descending");
      arrange();
    });
  }
  find.addEventListener("input", arrange);
  stateSel.addEventListener("change", arrange);
  arrange();

  // The next round starts 2 s after this one ends: a slow server never gets a pile-up.
  async function loop() {
    try { await refresh(); await newJobs(); } finally { setTimeout(loop, 2000); }
  }
  setTimeout(loop, 2000);
})();
