// Priority sliders: while dragging, preview the scheduler's answer ("B 5, A 3"); on release,
// apply it. Nothing restarts: the scheduler moves slots between iterations.
(function () {
  "use strict";
  function csrf() {
    const m = document.cookie.match(/csrftoken=([^;]+)/);
    return m ? m[1] : "";
  }
  let timer = null;
  for (const slider of document.querySelectorAll("input.priority")) {
    const job = slider.dataset.job;
    const output = slider.parentElement.querySelector("output") || document.getElementById("priority-value");
    const preview = document.getElementById("preview");
    slider.addEventListener("input", () => {
      if (output) output.textContent = slider.value;
      clearTimeout(timer);
      timer = setTimeout(async () => {
        const r = await fetch("/jobs/" + job + "/priority/preview?priority=" + slider.value, { credentials: "same-origin" });
        const data = await r.json();
        const text = data.text ? "would give: " + data.text : data.error || "";
        if (preview) preview.textContent = text;
        slider.title = text;
      }, 120);
    });
    slider.addEventListener("change", async () => {
      const body = new URLSearchParams({ priority: slider.value });
      const r = await fetch("/jobs/" + job + "/priority", { method: "POST", body, credentials: "same-origin",
        headers: { "X-CSRFToken": csrf() } });
      const data = await r.json();
      if (preview) preview.textContent = r.ok ? "priority set to " + data.priority : data.error;
    });
  }
})();
