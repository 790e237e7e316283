// Dataset upload: drag and drop or file picker; 4 MiB chunks with a progress bar; resumes
// from the server's offset after a dropped connection; then waits for the preparation.
(function () {
  "use strict";
  const CHUNK = 4 * 1024 * 1024;
  const drop = document.getElementById("drop");
  const input = document.getElementById("dataset-file");
  const nameInput = document.getElementById("dataset-name");
  // Two labelled phases, each with its own bar: the bytes going up, then the server's
  // preparation (extracting, checking); neither bar ever goes back.
  const bar = document.getElementById("upload-progress");
  const prepareBar = document.getElementById("prepare-progress");
  const message = document.getElementById("upload-message");

  async function call(method, url, body, headers) {
    const response = await fetch(url, { method, body, credentials: "same-origin",
      headers: Object.assign({ "X-CSRFToken": EDT.csrf() }, headers || {}) });
    const data = await response.json().catch(() => ({ error: "the server answered " + response.status }));
    return { ok: response.ok, status: response.status, data };
  }
  function show(fraction, text, which) {
    const shown = which || bar;
    shown.hidden = false;
    shown.querySelector("span").style.width = Math.round(100 * fraction) + "%";
    shown.querySelector("em").textContent = shown.dataset.phase + ": " + text;
  }
  function say(text, bad) {
    message.textContent = text;
    message.className = bad ? "error" : "muted";
  }
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  async function sendChunks(upload, file) {
    let offset = upload.offset, failures = 0;
    while (offset < file.size) {
      const end = Math.min(offset + CHUNK, file.size);
      try {
        const r = await call("PUT", "/datasets/uploads/" + upload.id, file.slice(offset, end),
          { "Content-Range": "bytes " + offset + "-" + (end - 1) + "/" + file.size });
        if (r.ok || r.status === 409) { offset = r.data.offset; failures = 0; }
        else if (r.status >= 400 && r.status < 500) { say(r.data.error, true); bar.hidden = true; return false; }
        else throw new Error(r.data.error);
      } catch (err) {
        failures += 1;
        if (failures > 20) { say("The upload stopped: " + err.message, true); return false; }
        say("Connection lost; resuming… (" + failures + ")");
        await sleep(Math.min(500 * failures, 5000));
        const r = await call("GET", "/datasets/uploads/" + upload.id);
        if (r.ok) offset = r.data.offset;
        continue;
      }
      show(offset / file.size, Math.round(100 * offset / file.size) + "% of " + (file.size / 1048576).toFixed(1) + " MiB");
    }
    return true;
  }

  // A file that is no zip, gzip or tar is refused before a byte is sent (the server checks
  // the first chunk again).
  async function looksLikeArchive(file) {
    const head = new Uint8Array(await file.slice(0, 512).arrayBuffer());
    const starts = (...bytes) => bytes.every((b, i) => head[i] === b);
    const ustar = String.fromCharCode(...head.slice(257, 262)) === "ustar";
    return starts(0x50, 0x4b, 0x03, 0x04) || starts(0x50, 0x4b, 0x05, 0x06) || starts(0x1f, 0x8b) || ustar;
  }

  async function upload(file) {
    if (!(await looksLikeArchive(file))) {
      say(file.name + " is not a zip, tar or tar.gz archive: choose the archive that holds the dataset.", true);
      return;
    }
    const name = nameInput.value.trim() || file.name.replace(/\.(zip|tar|tar\.gz|tgz)$/i, "");
    say("Uploading " + file.name + "…");
    show(0, "0%");
    const start = await call("POST", "/datasets/uploads", JSON.stringify({ name, filename: file.name, size: file.size }),
      { "Content-Type": "application/json" });
    if (!start.ok) { say(start.data.error, true); bar.hidden = true; return; }
    if (!(await sendChunks(start.data, file))) return;
    const done = await call("POST", "/datasets/uploads/" + start.data.id + "/complete");
    if (!done.ok) { say(done.data.error, true); return; }
    show(1, "done, " + (file.size / 1048576).toFixed(1) + " MiB");
    show(0, "starting", prepareBar);
    say("Uploaded. Now preparing it: extracting safely, detecting the format, counting the " +
      "samples and drawing thumbnails. A large archive takes a minute or so.");
    for (;;) {
      await sleep(500);
      const r = await call("GET", "/datasets/" + start.data.id + "/status");
      if (r.data.status === "READY") { location.href = r.data.url; return; }
      if (r.data.status === "FAILED") { say("This archive was refused: " + r.data.error, true); prepareBar.hidden = true; return; }
      show(r.data.progress, "extracting and checking " + Math.round(100 * r.data.progress) + "%", prepareBar);
    }
  }

  input.addEventListener("change", () => input.files[0] && upload(input.files[0]));
  // The keyboard starts an upload too: Enter or Space on the drop zone, or its button.
  document.getElementById("choose-file").addEventListener("click", (e) => { e.stopPropagation(); input.click(); });
  drop.addEventListener("click", (e) => { if (e.target === drop) input.click(); });
  drop.addEventListener("keydown", (e) => {
    if (e.target === drop && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); input.click(); }
  });
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    if (e.dataTransfer.files[0]) upload(e.dataTransfer.files[0]);
  });
})();
