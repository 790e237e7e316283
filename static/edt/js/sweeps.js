// Sweeps list: while a sweep is queued or running, the page takes fresh rows every 3 s
// (the server computed them: edtweb/sweeps/state.py), as the jobs list does for new jobs.
(function () {
  "use strict";
  const body = document.querySelector("#sweeps tbody");
  const active = () => [...body.querySelectorAll("tr[data-sweep]")].some((tr) => ["queued", "running"].includes(tr.dataset.state));
  async function refresh() {
    try {
      if (!active()) return;
      const r = await fetch(location.pathname, { credentials: "same-origin" });
      if (!r.ok) return;
      const fresh = new DOMParser().parseFromString(await r.text(), "text/html").querySelector("#sweeps tbody");
      if (fresh) body.replaceChildren(...fresh.children);
    } finally { setTimeout(refresh, 3000); }
  }
  setTimeout(refresh, 3000);
})();
