// PAVE Dock's pages: the few behaviours htmx does not cover. No inline scripts (the CSP
// allows only this file and htmx), no storage: the session is an httpOnly cookie.
"use strict";

document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const code = document.getElementById(button.dataset.copy);
  if (!code) return;
  const done = () => {
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(code.textContent).then(done, () => selectText(code));
  } else {
    selectText(code);
    document.execCommand("copy");
    done();
  }
});

function selectText(node) {
  const range = document.createRange();
  range.selectNodeContents(node);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
}

// Forms that destroy something ask first.
document.addEventListener("submit", (event) => {
  const form = event.target.closest("form[data-confirm]");
  if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
}, true);

// The package upload's progress bar (htmx sends multipart forms with XMLHttpRequest).
document.addEventListener("htmx:xhr:progress", (event) => {
  const box = document.getElementById("upload");
  if (!box || !event.target.closest("#submit-form") || !event.detail.lengthComputable) return;
  const pct = Math.round((100 * event.detail.loaded) / event.detail.total);
  box.hidden = false;
  document.getElementById("upload-progress").value = pct;
  document.getElementById("upload-pct").textContent = pct === 100 ? "100%, checking the package…" : `${pct}%`;
});

// Drag and drop onto the package field.
document.addEventListener("dragover", (event) => {
  const zone = event.target.closest("[data-dropzone]");
  if (!zone) return;
  event.preventDefault();
  zone.classList.add("over");
});
document.addEventListener("dragleave", (event) => {
  const zone = event.target.closest("[data-dropzone]");
  if (zone) zone.classList.remove("over");
});
document.addEventListener("drop", (event) => {
  const zone = event.target.closest("[data-dropzone]");
  if (!zone) return;
  event.preventDefault();
  zone.classList.remove("over");
  const input = zone.querySelector("input[type=file]");
  if (input && event.dataTransfer.files.length) input.files = event.dataTransfer.files;
});

// A task's ranking arrived: show what can be done with it.
document.body.addEventListener("task-ranked", () => {
  const reuse = document.getElementById("reuse");
  if (reuse) reuse.hidden = false;
});

// After htmx replaces the page's content, move focus to it (screen readers and keyboards
// start from the new content, as after a page load).
document.body.addEventListener("htmx:afterSwap", (event) => {
  if (event.detail.target && event.detail.target.id === "page") {
    const main = document.getElementById("main");
    if (main) main.focus();
  }
});
