"use strict";
// The queue by keyboard: j/k (or the arrow keys) move between runs, o or Enter opens one,
// x selects it, a approves and d denies it (through the bulk form: its confirmation
// page lists what will happen first). The current run is outlined and holds the focus.
(function () {
  const rows = document.getElementById("rows");
  const bulk = document.getElementById("bulk");
  if (!rows || !bulk) return;
  let current = null; // the run id, kept while the rows are redrawn

  function all() { return Array.from(rows.querySelectorAll("tr[data-run]")); }

  function show(row, focus) {
    all().forEach(function (r) { r.classList.toggle("current", r === row); });
    if (!row) return;
    current = row.dataset.run;
    const link = row.querySelector("a.open");
    if (focus && link) link.focus();
    row.scrollIntoView({ block: "nearest" });
  }

  function here() {
    return all().find(function (r) { return r.dataset.run === current; }) || null;
  }

  function move(step) {
    const list = all();
    if (!list.length) return;
    const at = list.indexOf(here());
    const next = at < 0 ? 0 : Math.min(list.length - 1, Math.max(0, at + step));
    show(list[next], true);
  }

  function decide(action) {
    const row = here();
    const box = row && row.querySelector("input[type=checkbox]");
    if (!box) return;
    all().forEach(function (r) {
      const other = r.querySelector("input[type=checkbox]");
      if (other) other.checked = r === row;
    });
    const reason = document.getElementById("bulk-reason");
    if (action === "deny" && !reason.value.trim()) {
      reason.focus();
      reason.setAttribute("aria-describedby", "deny-needs-reason");
      const hint = document.getElementById("deny-needs-reason");
      if (hint) hint.hidden = false;
      return;
    }
    bulk.requestSubmit(bulk.querySelector('button[value="' + action + '"]'));
  }

  const keys = {
    j: function () { move(1); },
    ArrowDown: function () { move(1); },
    k: function () { move(-1); },
    ArrowUp: function () { move(-1); },
    o: function () { const row = here(); if (row) row.querySelector("a.open").click(); },
    x: function () {
      const box = here() && here().querySelector("input[type=checkbox]");
      if (box) box.checked = !box.checked;
    },
    a: function () { decide("approve"); },
    d: function () { decide("deny"); },
  };

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target.closest && target.closest("input, textarea, select, [contenteditable]")) return;
    const act = keys[event.key];
    if (!act) return;
    event.preventDefault();
    act();
  });
  rows.addEventListener("focusin", function (event) {
    const row = event.target.closest("tr[data-run]");
    if (row) show(row, false);
  });
  new MutationObserver(function () {
    const row = here();
    const focused = rows.contains(document.activeElement) || document.activeElement === document.body;
    if (row) show(row, focused);
  }).observe(rows, { childList: true });
})();
