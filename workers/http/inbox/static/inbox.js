"use strict";
// The inbox's few lines of script: a decision's edits are checked and diffed before it
// is sent (live.js keeps the queue and a run's page current, from the event streams).
// Everything the server sent is already escaped; what this writes goes in as text.
(function () {
  const form = document.getElementById("decide");
  if (!form) return;

  function problem(input) {
    const kind = input.dataset.kind;
    const value = input.value;
    if (kind === "boolean") return null;
    if (value.trim() === "") {
      return input.dataset.required && kind !== "string" ? "is required" : null;
    }
    if (kind === "integer" && !/^-?\d+$/.test(value.trim())) return "must be a whole number";
    if (kind === "number" && !isFinite(Number(value))) return "must be a number";
    if (kind === "json") {
      try { JSON.parse(value); } catch (e) { return "is not valid JSON"; }
    }
    return null;
  }

  function check(input) {
    const shown = form.querySelector('[data-error-for="' + CSS.escape(input.id) + '"]');
    const found = problem(input);
    if (shown) {
      shown.textContent = found ? input.dataset.field + " " + found : "";
      shown.hidden = !found;
    }
    input.setAttribute("aria-invalid", found ? "true" : "false");
    return !found;
  }

  function current(input) {
    return input.dataset.kind === "boolean" ? (input.checked ? "true" : "") : input.value;
  }

  function diff(fieldset) {
    const box = fieldset.querySelector(".diff");
    box.replaceChildren();
    const changed = Array.from(fieldset.querySelectorAll("[data-field]")).filter(
      function (input) { return current(input) !== (input.dataset.original || ""); }
    );
    if (!changed.length) return;
    const title = document.createElement("strong");
    title.textContent = "Changes to the model's arguments:";
    box.appendChild(title);
    const list = document.createElement("ul");
    changed.forEach(function (input) {
      const item = document.createElement("li");
      const name = document.createElement("code");
      name.textContent = input.dataset.field;
      const was = document.createElement("del");
      was.textContent = input.dataset.original || "(empty)";
      const now = document.createElement("ins");
      now.textContent = current(input) || "(empty)";
      item.append(name, ": ", was, " → ", now);
      list.appendChild(item);
    });
    box.appendChild(list);
  }

  form.querySelectorAll('input[type=radio][name^="call."]').forEach(function (radio) {
    radio.addEventListener("change", function () {
      const id = radio.name.slice(5);
      const edit = form.querySelector('[data-edit="' + CSS.escape(id) + '"]');
      if (edit) edit.hidden = radio.value !== "edit";
    });
  });
  form.querySelectorAll("fieldset.edit").forEach(function (fieldset) {
    fieldset.querySelectorAll("[data-field]").forEach(function (input) {
      const update = function () {
        check(input);
        diff(fieldset);
        const error = document.getElementById("form-error");
        if (!form.querySelector('[aria-invalid="true"]')) error.hidden = true;
      };
      input.addEventListener("input", update);
      input.addEventListener("change", update);
    });
    diff(fieldset);
  });

  form.querySelectorAll("input[name=decision]").forEach(function (radio) {
    radio.addEventListener("change", function () {
      const error = document.getElementById("form-error");
      if (error.textContent.startsWith("Choose approve or deny")) error.hidden = true;
    });
  });

  form.addEventListener("submit", function (event) {
    const error = document.getElementById("form-error");
    let ok = true;
    let why = "";
    form.querySelectorAll("fieldset.edit").forEach(function (fieldset) {
      if (fieldset.hidden) return;
      fieldset.querySelectorAll("[data-field]").forEach(function (input) {
        if (!check(input)) ok = false;
      });
    });
    if (!ok) why = "Fix the edited arguments first: nothing was sent.";
    const whole = form.querySelector("input[name=decision]:checked");
    const reason = form.querySelector("#reason").value.trim();
    if (ok && !whole) {
      ok = false;
      why = "Choose approve or deny for the whole turn: nothing was sent.";
    }
    if (ok && whole && whole.value === "deny" && !reason) {
      ok = false;
      why = "A deny needs a reason (the model is told): nothing was sent.";
    }
    if (!ok) {
      event.preventDefault();
      error.textContent = why;
      error.hidden = false;
      error.focus();
    }
  });
})();
