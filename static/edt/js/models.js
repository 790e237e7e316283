// Models page: a file dropped on the upload card goes into the form's file field.
(function () {
  "use strict";
  const drop = document.getElementById("model-drop");
  const input = document.getElementById("model-file");
  if (!drop || !input) return;
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    if (!e.dataTransfer.files.length) return;
    input.files = e.dataTransfer.files;
    const name = document.getElementById("model-name");
    if (name && !name.value) name.value = input.files[0].name.replace(/\.(py|zip|tar|tar\.gz|tgz)$/i, "");
  });
})();
