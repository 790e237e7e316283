// Resource groups page (staff): groups made, changed and deleted through the REST API
// (/api/v1/groups/); the page is read again after each change, with the slots each group
// now holds by the new rules.
(function () {
  "use strict";
  const FLASH = "edt-groups-flash";
  function api(method, path, body) { return EDT.api(method, "/api/v1/groups/" + path, body); }
  function lines(text) { return text.split("\n").map((l) => l.trim()).filter(Boolean); }
  function done(text) { sessionStorage.setItem(FLASH, text); location.reload(); }
  function fail(form, message) {
    const p = form.querySelector(".field-error");
    p.textContent = message;
    p.hidden = !message;
  }
  const status = document.getElementById("group-status");
  const flashed = sessionStorage.getItem(FLASH);
  if (flashed) { status.textContent = flashed; sessionStorage.removeItem(FLASH); }

  for (const button of document.querySelectorAll(".edit-group")) {
    button.addEventListener("click", () => {
      const row = document.getElementById("edit-" + button.dataset.group);
      row.hidden = !row.hidden;
      button.setAttribute("aria-expanded", String(!row.hidden));
      if (!row.hidden) row.querySelector("textarea").focus();
    });
  }
  for (const form of document.querySelectorAll(".group-form")) {
    const name = form.dataset.group;
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const body = { position: Number(form.elements.position.value), rules: lines(form.elements.rules.value),
        shrink_idle: form.elements.shrink_idle.checked };
      const r = await api("PATCH", encodeURIComponent(name) + "/", body);
      if (!r.ok) { fail(form, r.data.error); return; }
      done("Group " + name + " saved: " + (r.data.rule_texts.length || "no") + " rule(s).");
    });
    EDT.ready(form);
  }
  for (const button of document.querySelectorAll(".delete-group")) {
    button.addEventListener("click", async () => {
      const name = button.dataset.group;
      if (!confirm("Delete resource group " + name + "? Its slots go to the next group whose rules match, else default.")) return;
      const r = await api("DELETE", encodeURIComponent(name) + "/");
      if (!r.ok) { fail(button.closest("form"), r.data.error); return; }
      done("Group " + name + " deleted.");
    });
  }
  const create = document.getElementById("new-group-form");
  create.addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = create.elements;
    const body = { name: f.name.value.trim(), position: Number(f.position.value), rules: lines(f.rules.value),
      shrink_idle: f.shrink_idle.checked };
    const r = await api("POST", "", body);
    if (!r.ok) { fail(create, r.data.error); return; }
    done("Group " + r.data.name + " created.");
  });
  EDT.ready(create);
})();
