// Teams page (staff): every change goes through the REST API (/api/v1/teams/, /users/), and
// while a team's weight, guarantee, limit or parent is being changed the page previews the
// shares the scheduler's own policy would give (/api/v1/cluster/shares/preview/).
(function () {
  "use strict";
  const API = "/api/v1/";
  const FLASH = "edt-teams-flash";

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function api(method, path, body) { return EDT.api(method, API + path, body); }
  function teamPath(name) { return "teams/" + encodeURIComponent(name) + "/"; }
  function say(text) { // after a reload too
    sessionStorage.setItem(FLASH, text);
  }
  function showError(id, message) {
    const p = document.getElementById(id);
    if (!p) return;
    p.textContent = message || "";
    p.hidden = !message;
  }
  function done(text, url) {
    say(text);
    if (url !== undefined) location.assign(url); else location.reload();
  }
  const statusEl = document.getElementById("team-status");
  const flashed = sessionStorage.getItem(FLASH);
  if (flashed && statusEl) { statusEl.textContent = flashed; sessionStorage.removeItem(FLASH); }
  function whole(value) { return value === "" ? null : Number(value); }

  // A new team -------------------------------------------------------------------------
  const newTeam = document.getElementById("new-team-form");
  if (newTeam) newTeam.addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = newTeam.elements;
    const body = { name: f.name.value.trim(), parent: f.parent.value, weight: whole(f.weight.value),
      guarantee: whole(f.guarantee.value) || 0, limit: whole(f.limit.value), resource_group: f.resource_group.value };
    const r = await api("POST", "teams/", body);
    if (!r.ok) { showError("new-team-error", r.data.error); return; }
    done("Team " + r.data.name + " created: set its members, and its guarantee with the preview.",
      "?team=" + encodeURIComponent(r.data.name));
  });
  if (newTeam) EDT.ready(newTeam);

  // A new user -------------------------------------------------------------------------
  const newUser = document.getElementById("new-user-form");
  if (newUser) newUser.addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = newUser.elements;
    const body = { username: f.username.value.trim(), password: f.password.value, is_staff: f.is_staff.checked };
    const r = await api("POST", "users/", body);
    if (!r.ok) { showError("new-user-error", r.data.error); return; }
    done("User " + r.data.username + " added: add them to a team.");
  });
  if (newUser) EDT.ready(newUser);

  // The chosen team ----------------------------------------------------------------------
  const editor = document.getElementById("team-editor");
  if (!editor) return;
  const team = editor.dataset.team;
  const form = document.getElementById("team-form");
  const previewEl = document.getElementById("shares-preview");
  const SHARED = ["weight", "guarantee", "limit", "parent", "resource_group"]; // what changes the shares

  function values() {
    const f = form.elements;
    return {
      weight: whole(f.weight.value), guarantee: whole(f.guarantee.value), limit: whole(f.limit.value),
      parent: f.parent.value, resource_group: f.resource_group.value,
      allowed_groups: [...form.querySelectorAll("input[name=allowed_groups]:checked")].map((c) => c.value),
      shrink_idle: f.shrink_idle.checked,
    };
  }
  const saved = values();
  function changes() {
    const now = values(), out = {};
    for (const key of SHARED) if (now[key] !== saved[key]) out[key] = now[key];
    return out;
  }

  function delta(a, b) {
    if (a === b) return String(b);
    const d = b - a;
    return a + " → " + b + " (" + (d > 0 ? "+" : "") + (Number.isInteger(d) ? d : d.toFixed(2)) + ")";
  }
  function exact(x) { return String(Number(x.toFixed(2))); } // 3.5, 2.67: slots, exact

  function drawPreview(data) {
    previewEl.replaceChildren();
    if (data.note) previewEl.append(el("p", { class: "warn" }, data.note));
    const groups = data.groups.filter((g) => g.teams.length);
    if (!groups.length) {
      previewEl.append(el("p", { class: "muted" },
        "No job is active in any group: every team's slots stay 0 whatever the change. Its guarantee counts from its jobs' first request."));
      return;
    }
    for (const g of groups) {
      const wrap = el("div", { class: "scroll-x preview-group", "data-group": g.group });
      const table = el("table", { class: "list preview", tabindex: "0", "aria-label": "shares in group " + g.group });
      const caption = el("caption", {}, "Group " + g.group + ": " + g.capacity + " slot" + (g.capacity === 1 ? "" : "s") +
        ", " + g.jobs + " active job" + (g.jobs === 1 ? "" : "s"));
      table.append(caption);
      const head = el("tr");
      for (const [h, title] of [["Team", ""], ["Asks for", "slots its active jobs ask for"],
        ["Holds now", "slots its jobs hold now"], ["Before", "slots the policy gives it with the teams as they are"],
        ["After", "slots the policy would give it with your change"],
        ["Entitled before → after", "its fair share of the group for what its jobs ask, exact"]]) {
        head.append(el("th", title ? { scope: "col", title } : { scope: "col" }, h));
      }
      const thead = el("thead"); thead.append(head); table.append(thead);
      const body = el("tbody");
      for (const t of g.teams) {
        const tr = el("tr", { "data-team": t.team, class: t.changed ? "chosen" : "" });
        tr.append(el("td", {}, t.team || "no team"), el("td", {}, String(t.demand)), el("td", {}, String(t.now)),
          el("td", {}, String(t.before)), el("td", { class: "after" + (t.after !== t.before ? " moved" : "") }, delta(t.before, t.after)),
          el("td", { class: "entitled" }, exact(t.entitled_before) + " → " + exact(t.entitled_after)));
        body.append(tr);
      }
      table.append(body);
      wrap.append(table);
      previewEl.append(wrap);
    }
  }

  let previewTimer = null, asked = 0;
  function previewSoon() {
    clearTimeout(previewTimer);
    previewTimer = setTimeout(async () => {
      const mine = ++asked;
      const change = changes();
      const r = await api("POST", "cluster/shares/preview/", { teams: { [team]: change } });
      if (mine !== asked) return; // a later change is being previewed
      if (!r.ok) {
        previewEl.replaceChildren(el("p", { class: "error", role: "alert" }, r.data.error));
        return;
      }
      drawPreview(r.data);
      previewEl.dataset.shown = JSON.stringify(change);
    }, 150);
  }
  for (const name of SHARED) form.elements[name].addEventListener("input", previewSoon);
  previewSoon(); // the shares as they are, before any change

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const r = await api("PATCH", teamPath(team), values());
    if (!r.ok) { showError("team-form-error", r.data.error); return; }
    done("Team " + team + " saved.");
  });
  EDT.ready(form);
  document.getElementById("team-reset").addEventListener("click", () => {
    form.reset();
    showError("team-form-error", "");
    previewSoon();
  });
  document.getElementById("team-delete").addEventListener("click", async () => {
    if (!confirm("Delete team " + team + "? Its members stay users.")) return;
    const r = await api("DELETE", teamPath(team));
    if (!r.ok) { showError("team-form-error", r.data.error); return; }
    done("Team " + team + " deleted.", location.pathname);
  });

  // Members ----------------------------------------------------------------------------
  for (const box of document.querySelectorAll(".lead-toggle")) {
    box.addEventListener("change", async () => {
      const user = box.dataset.user;
      const r = await api("PATCH", teamPath(team) + "members/" + encodeURIComponent(user) + "/", { lead: box.checked });
      if (!r.ok) { box.checked = !box.checked; statusEl.textContent = r.data.error; return; }
      statusEl.textContent = user + (box.checked ? " leads " : " no longer leads ") + team + ".";
    });
  }
  for (const button of document.querySelectorAll(".remove-member")) {
    button.addEventListener("click", async () => {
      const user = button.dataset.user;
      const r = await api("DELETE", teamPath(team) + "members/" + encodeURIComponent(user) + "/");
      if (!r.ok) { statusEl.textContent = r.data.error; return; }
      done(user + " is no longer in " + team + " (their jobs stay in it).");
    });
  }
  const memberForm = document.getElementById("member-form");
  memberForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = memberForm.elements;
    const r = await api("POST", teamPath(team) + "members/", { username: f.username.value, lead: f.lead.checked });
    if (!r.ok) { showError("member-form-error", r.data.error); return; }
    done(f.username.value + " added to " + team + (f.lead.checked ? " as a lead." : "."));
  });
  EDT.ready(memberForm);
})();
