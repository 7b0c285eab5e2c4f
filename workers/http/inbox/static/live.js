"use strict";
// The inbox's live updates, from the server's event streams (no polling, no reload):
// the queue's rows are fetched again when the waiting queue changes (/inbox/stream),
// and a run's page is shown anew as the run's events come (/inbox/runs/{id}/stream).
// What the server sends is already escaped: whole rows, or the page's <main>.
(function () {
  if (!window.EventSource) return;

  const rows = document.getElementById("rows");
  if (rows && rows.dataset.src) follow_queue(rows);
  const run = document.body.dataset.run;
  if (run) follow_run(run, document.body.dataset.seq || "0");

  function follow_queue(rows) {
    let stale = false;
    async function refresh() {
      stale = true;
      if (rows.querySelector("input[type=checkbox]:checked")) return; // keep a selection
      try {
        const answer = await fetch(rows.dataset.src, { credentials: "same-origin" });
        if (!answer.ok) return;
        const html = await answer.text();
        stale = false;
        if (html === rows.dataset.last) return;
        rows.innerHTML = html;
        rows.dataset.last = html;
        rows.dispatchEvent(new CustomEvent("inbox:rows", { bubbles: true }));
      } catch (e) { /* the next change tries again */ }
    }
    rows.addEventListener("change", function () { if (stale) refresh(); });
    new EventSource("/inbox/stream").addEventListener("queue", refresh);
  }

  function follow_run(id, seq) {
    const url = "/inbox/runs/" + encodeURIComponent(id) + "/stream?after=" + encodeURIComponent(seq);
    const source = new EventSource(url);
    let due = null;
    let touched = false;
    const form = document.getElementById("decide");
    if (form) {
      form.addEventListener("input", function () { touched = true; });
      form.addEventListener("change", function () { touched = true; });
    }
    function soon() { if (!due) due = setTimeout(show, 250); } // a burst of events: one update
    let moved = false;
    source.onmessage = function () { moved = true; soon(); };
    source.addEventListener("end", function () { source.close(); if (moved) soon(); });

    async function show() {
      due = null;
      if (touched && document.getElementById("decide")) { offer(); return; }
      let page;
      try {
        // with its query: a decision's notice (?notice=recorded) stays, as true of the run now
        const answer = await fetch(location.pathname + location.search, { credentials: "same-origin" });
        if (!answer.ok) return;
        page = new DOMParser().parseFromString(await answer.text(), "text/html");
      } catch (e) { return; }
      const fresh = page.querySelector("main");
      if (!fresh) return;
      if (fresh.querySelector("#decide")) { location.reload(); return; } // its form's script
      const nodes = Array.from(fresh.childNodes, function (n) { return document.importNode(n, true); });
      document.querySelector("main").replaceChildren.apply(document.querySelector("main"), nodes);
      document.title = page.title;
    }

    function offer() {
      // the approver is filling in the form: say the run moved on, do not take it away
      if (document.getElementById("moved-on")) return;
      const note = document.createElement("p");
      note.id = "moved-on";
      note.className = "notice";
      note.setAttribute("role", "status");
      note.textContent = "This run has moved on since this page was shown. ";
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = "Show it as it is now";
      button.addEventListener("click", function () { touched = false; show(); });
      note.appendChild(button);
      document.querySelector("main").prepend(note);
    }
  }
})();
