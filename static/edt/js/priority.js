// Priority sliders: while moving (dragged, or with the arrow keys), preview the scheduler's
// answer ("B 5, A 3"); on release of the pointer, or on Enter, apply it. Nothing restarts:
// the scheduler moves slots between iterations.
(function () {
  "use strict";
  let timer = null;
  function bind(slider) {
    if (slider.dataset.bound) return;
    slider.dataset.bound = "1";
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
    let applied = slider.value, pointer = false;
    async function apply() {
      if (slider.value === applied) return;
      const body = new URLSearchParams({ priority: slider.value });
      const r = await fetch("/jobs/" + job + "/priority", { method: "POST", body, credentials: "same-origin",
        headers: { "X-CSRFToken": EDT.csrf() } });
      const data = await r.json();
      if (r.ok) applied = String(data.priority);
      if (preview) preview.textContent = r.ok ? "priority set to " + data.priority : data.error;
    }
    slider.addEventListener("pointerdown", () => { pointer = true; });
    // A pointer's release applies; the keyboard's steps only preview until Enter.
    slider.addEventListener("change", () => { if (pointer) { pointer = false; apply(); } });
    slider.addEventListener("keydown", (e) => {
      if (e.key === "Enter") { e.preventDefault(); apply(); return; }
      // Arrow keys move 100 (1000 with Shift, or Page Up/Down), to round values: one of
      // 10,000 per key press was no step at all. The number field beside takes any value.
      const dir = { ArrowRight: 1, ArrowUp: 1, ArrowLeft: -1, ArrowDown: -1, PageUp: 10, PageDown: -10 }[e.key];
      if (dir === undefined) return;
      e.preventDefault();
      const step = e.shiftKey ? 1000 : 100, low = Number(slider.min), high = Number(slider.max);
      const next = Math.round((Number(slider.value) + dir * step) / step) * step;
      slider.value = String(Math.min(high, Math.max(low, next)));
      slider.dispatchEvent(new Event("input"));
    });
    const number = slider.parentElement.querySelector("input.priority-number");
    if (number) {
      slider.addEventListener("input", () => { number.value = slider.value; });
      number.addEventListener("input", () => {
        if (number.value === "" || !number.checkValidity()) return;
        slider.value = number.value;
        slider.dispatchEvent(new Event("input"));
      });
      number.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); apply(); } });
      number.addEventListener("change", apply);
    }
    slider.addEventListener("blur", () => {
      if (slider.value !== applied && preview) preview.textContent += " · press Enter to apply";
    });
  }
  document.querySelectorAll("input.priority").forEach(bind);
  window.EDTPriority = { bind }; // for rows that appear later (the jobs list)
})();
