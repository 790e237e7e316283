// New sweep: rows of the search space added and removed in the page; a row shows the
// inputs its type takes (choices for a choice, low, high and step for the others); the
// others are hidden, not disabled, so that every row posts each of its fields in order.
(function () {
  "use strict";
  const body = document.getElementById("space-rows");
  document.getElementById("id_objective")?.setAttribute("list", "objectives");

  function fit(row) {
    const choice = row.querySelector("[name=p_type]").value === "choice";
    for (const name of ["p_low", "p_high", "p_step"]) row.querySelector(`[name=${name}]`).hidden = choice;
    row.querySelector("[name=p_choices]").hidden = !choice;
  }
  function bind(row) {
    row.querySelector("[name=p_type]").addEventListener("change", () => fit(row));
    row.querySelector(".remove-row").addEventListener("click", () => {
      if (body.children.length > 1) row.remove();
      else row.querySelectorAll("input").forEach((i) => { i.value = ""; });
    });
    fit(row);
  }
  body.querySelectorAll("tr").forEach(bind);
  document.getElementById("add-row").addEventListener("click", () => {
    const row = body.querySelector("tr").cloneNode(true);
    row.querySelectorAll("input").forEach((i) => { i.value = ""; });
    row.querySelector("[name=p_type]").value = "uniform";
    body.append(row);
    bind(row);
    row.querySelector("[name=p_name]").focus();
  });
})();
