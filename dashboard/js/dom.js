// DOM helpers: elements are built with textContent only (never innerHTML with data).

export function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      node.className = value;
    } else if (name === "dataset") {
      Object.assign(node.dataset, value);
    } else if (value === true) {
      node.setAttribute(name, "");
    } else {
      node.setAttribute(name, String(value));
    }
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

let uniqueCounter = 0;
export function uid(prefix) {
  uniqueCounter += 1;
  return `${prefix}-${uniqueCounter}`;
}

// A time the API gave (RFC 3339, UTC), shown in the browser's own zone.
export function time(value) {
  if (!value) return h("span", { class: "muted" }, "—");
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) return h("span", {}, value);
  return h("time", { datetime: value, title: `${value} (UTC)` },
           date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" }));
}

// Break points for long names (host names, CNAME targets, URLs): after a dot, dash, slash,
// colon or @; never inside a word, nor inside an id (rd_…, one word). app.css breaks a word
// only when that one piece is wider than the whole line.
export function breakable(text) {
  const parts = String(text).split(/(?<=[.\/:@-])/);
  return parts.flatMap((part, i) => (i ? [h("wbr"), part] : [part]));
}

export function code(text) {
  return h("code", {}, text === undefined || text === null || text === "" ? "—" : breakable(text));
}

export function loading(what) {
  return h("p", { class: "state loading", role: "status" }, `Loading ${what}…`);
}

export function empty(message) {
  return h("p", { class: "state empty" }, message);
}

// "ERR_…, operation op_…": what an error line adds to the API's message.
export function errorFacts(err) {
  const facts = [];
  if (err.code) facts.push(err.code);
  if (err.operationId) facts.push(`operation ${err.operationId}`);
  return facts;
}

// The API's own error message, with its code and operation id.
export function errorBox(err) {
  const parts = [err.message];
  const facts = errorFacts(err);
  return h("div", { class: "state error", role: "alert" }, h("strong", {}, "Error: "), parts,
           facts.length ? h("span", { class: "muted" }, ` (${facts.join(", ")})`) : null);
}

// A labelled form field. kind: text | textarea | select | checkbox.
export function field(name, label, opts = {}) {
  const id = uid(`f-${name}`);
  const hintId = `${id}-hint`;
  const errId = `${id}-error`;
  let input;
  if (opts.kind === "textarea") {
    input = h("textarea", { id, name, rows: opts.rows || 6, spellcheck: "false",
                            placeholder: opts.placeholder }, opts.value || "");
  } else if (opts.kind === "select") {
    const chosen = (value) => (Array.isArray(opts.value) ? opts.value.includes(value) : value === opts.value);
    input = h("select", { id, name, multiple: opts.multiple, size: opts.multiple ? 4 : null },
              opts.options.map(([value, text]) =>
                h("option", { value, selected: chosen(value) }, text)));
  } else if (opts.kind === "checkbox") {
    input = h("input", { id, name, type: "checkbox", checked: !!opts.value });
  } else {
    input = h("input", { id, name, type: opts.type || "text", value: opts.value || "",
                         placeholder: opts.placeholder, required: opts.required,
                         autocomplete: opts.autocomplete || "off", spellcheck: "false" });
  }
  input.setAttribute("aria-describedby", `${opts.hint ? hintId + " " : ""}${errId}`);
  const wrap = h("div", { class: `field field-${opts.kind || "text"}`, dataset: { field: name } },
                 h("label", { for: id }, label), input,
                 opts.hint ? h("p", { class: "hint", id: hintId }, opts.hint) : null,
                 h("p", { class: "field-error", id: errId, role: "alert" }));
  return wrap;
}

// The form element an error's field names: the field itself ("hostports"), else the nearest
// one that holds it ("backend.backend_id", "user_agent_filter.allow[0]", "labels.a b" are
// shown at backend.backend_id, user_agent_filter.allow, labels); a module the API names as a
// whole ("mutual_tls") at the form's first field of that module (mutual_tls.certificate_authority_ids).
function fieldFor(form, name) {
  let rest = name;
  while (rest) {
    const found = form.querySelector(`[data-field="${CSS.escape(rest)}"]`)
      || form.querySelector(`[data-field^="${CSS.escape(rest + ".")}"]`);
    if (found) return found;
    const cut = Math.max(rest.lastIndexOf("."), rest.lastIndexOf("["));
    rest = cut > 0 ? rest.slice(0, cut) : "";
  }
  return null;
}

// Show an API error at the form element it names (details.field), else at the form.
export function showFormError(form, err) {
  clearFormErrors(form);
  const target = err.field ? fieldFor(form, err.field) : null;
  if (target) {
    const input = target.querySelector("input, textarea, select");
    target.classList.add("invalid");
    if (input) input.setAttribute("aria-invalid", "true");
    const facts = errorFacts(err);
    target.querySelector(".field-error").textContent = `${err.message}${facts.length ? ` (${facts.join(", ")})` : ""}`;
    if (input) input.focus();
  } else {
    form.querySelector(".form-error").replaceChildren(errorBox(err));
  }
}

export function clearFormErrors(form) {
  form.querySelectorAll(".invalid").forEach((node) => node.classList.remove("invalid"));
  form.querySelectorAll("[aria-invalid]").forEach((node) => node.removeAttribute("aria-invalid"));
  form.querySelectorAll(".field-error").forEach((node) => { node.textContent = ""; });
  const box = form.querySelector(".form-error");
  if (box) box.replaceChildren();
}

// A form whose submit calls `onSubmit(values)`; API errors are shown at their element.
export function form(title, fields, submitLabel, onSubmit) {
  const node = h("form", { class: "card form", novalidate: true, "aria-label": title },
                 h("h3", {}, title), fields, h("div", { class: "form-error" }),
                 h("div", { class: "actions" }, h("button", { type: "submit" }, submitLabel)));
  node.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFormErrors(node);
    const button = node.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      await onSubmit(values(node), node);
    } catch (err) {
      showFormError(node, err);
    } finally {
      button.disabled = false;
    }
  });
  return node;
}

export function values(formNode) {
  const out = {};
  for (const input of formNode.querySelectorAll("input[name], textarea[name], select[name]")) {
    if (input.multiple) out[input.name] = [...input.selectedOptions].map((o) => o.value);
    else out[input.name] = input.type === "checkbox" ? input.checked : input.value;
  }
  return out;
}

// A Copy button for `text`; `status` (a role=status element) says whether it was copied.
// `what` names the value for screen readers when the page has several ("Copy the certificate
// of sucrt_…").
export function copyButton(text, status, what, cls = "") {
  return h("button", { type: "button", class: cls || null, dataset: { action: "copy" },
                       "aria-label": what ? `Copy ${what}` : null, onclick: async () => {
    try {
      await navigator.clipboard.writeText(text);
      status.textContent = "Copied";
    } catch (err) {
      status.textContent = "Copy failed: select the text and copy it";
    }
  } }, "Copy");
}

// A new secret: shown once, with a copy button; nothing keeps it after this view.
export function secretOnce(what, secret) {
  const id = uid("secret");
  const status = h("span", { class: "copy-status", role: "status" });
  return h("section", { class: "card secret", "aria-labelledby": `${id}-title` },
    h("h3", { id: `${id}-title` }, `Your new ${what}`),
    h("p", {}, "Copy it now: it is shown only this once and cannot be shown again."),
    h("div", { class: "secret-row" },
      h("code", { class: "secret-value", id, tabindex: "0" }, secret),
      copyButton(secret, status)),
    status);
}

// A value a person copies (an SSH certificate, a CA's public key): shown whole, wrapping
// anywhere (base64 has no break points; app.css), at most a few lines tall (it scrolls, and
// takes the keyboard focus to scroll), a Copy button below it. `what` names it for screen
// readers ("the certificate of sucrt_…").
export function copyable(text, what) {
  const status = h("span", { class: "copy-status", role: "status" });
  return h("div", { class: "copyable" },
    h("code", { class: "copy-value", tabindex: "0", role: "textbox", "aria-readonly": "true",
                "aria-multiline": "true", "aria-label": what }, text),
    h("div", { class: "copy-row" }, copyButton(text, status, what, "secondary small"), status));
}

// A button running an API call; its error is shown beside it. `question`: confirm first.
export function actionButton(label, action, { question = "", cls = "secondary small" } = {}) {
  const button = h("button", { type: "button", class: cls });
  button.textContent = label;
  button.addEventListener("click", async () => {
    if (question && !window.confirm(question)) return;
    const old = button.parentNode && button.parentNode.querySelector(".action-error");
    if (old) old.remove();
    button.disabled = true;
    try {
      await action();
    } catch (err) {
      if (button.isConnected) button.after(h("div", { class: "action-error" }, errorBox(err)));
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

export function confirmButton(label, question, action) {
  return actionButton(label, action, { question, cls: "danger small" });
}
