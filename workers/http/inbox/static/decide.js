"use strict";
// The run page's "what will happen": as the decision form changes, the server works out
// (with the code that applies a decision) which calls will run and which are denied,
// and the summary is replaced by its answer. The answer is the server's own escaped HTML.
(function () {
  const form = document.getElementById("decide");
  const box = document.getElementById("summary");
  if (!form || !box || !box.dataset.src) return;
  let asked = 0;
  let timer = null;

  async function refresh() {
    const mine = ++asked;
    try {
      const answer = await fetch(box.dataset.src, {
        method: "POST",
        body: new URLSearchParams(new FormData(form)),
        credentials: "same-origin",
      });
      if (answer.ok && mine === asked) box.innerHTML = await answer.text();
    } catch (e) { /* the next change asks again */ }
  }

  function soon() {
    clearTimeout(timer);
    timer = setTimeout(refresh, 200);
  }

  form.addEventListener("input", soon);
  form.addEventListener("change", soon);
})();
