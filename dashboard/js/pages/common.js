// Cells and small pieces several pages share.
import * as api from "../api.js";
import { ApiError } from "../api.js";
import { h, code, field, form } from "../dom.js";

export const ID = { label: "ID", cell: (item) => code(item.id) };
export const DESCRIPTION = { label: "Description", cell: (item) => item.description || h("span", { class: "muted" }, "—") };

export function ref(value) {
  return value && value.id ? code(value.id) : h("span", { class: "muted" }, "—");
}

export function section(title, ...children) {
  return h("section", { class: "block" }, h("h2", {}, title), children);
}

// Live updates: `tick` now and every `seconds` while the page is shown and the tab visible.
export function poll(tick, seconds) {
  const timer = window.setInterval(() => {
    if (document.visibilityState === "visible") tick();
  }, seconds * 1000);
  return () => window.clearInterval(timer);
}

// Authtokens named by their description (the id below it): a session's `credential` is a Ref
// (id and uri only), so each authtoken seen is read once (GET /credentials/{id}) while the
// page is open; `changed` is called when one arrives, to draw the rows again.
export function credentialNames(changed) {
  const known = new Map(); // id -> description ("" when none or unreadable); absent: not asked
  function learn(items) {
    for (const item of items) {
      const id = item.credential && item.credential.id;
      if (!id || known.has(id)) continue;
      known.set(id, null);
      api.get(`/credentials/${encodeURIComponent(id)}`)
        .then((credential) => { known.set(id, credential.description || ""); })
        .catch(() => { known.set(id, ""); })
        .then(() => changed());
    }
  }
  function cell(value) {
    if (!value || !value.id) return h("span", { class: "muted" }, "—");
    const description = known.get(value.id);
    if (!description) return code(value.id);
    return h("div", { class: "named" }, h("span", { class: "name" }, description),
             h("div", { class: "muted" }, code(value.id)));
  }
  return { learn, cell };
}

// Text areas of one entry per line: the lines, trimmed, empty ones dropped.
export function lines(text) {
  return String(text || "").split("\n").map((line) => line.trim()).filter(Boolean);
}

// "name<sep>value" lines as an object; a line without the separator is an error at `field`
// (the API's words are for what it receives; this one is the form's own).
export function pairs(text, sep, field, what) {
  const out = {};
  for (const line of lines(text)) {
    const at = line.indexOf(sep);
    if (at < 1) {
      throw new ApiError(400, { msg: `Each line is ${what}: "${line}" is not`, details: { field } });
    }
    out[line.slice(0, at).trim()] = line.slice(at + sep.length).trim();
  }
  return out;
}

// A number typed in a form: sent as a number when it is one, else as typed (the API says why
// it is refused, at its field).
export function number(text) {
  const value = String(text || "").trim();
  return /^-?\d+$/.test(value) ? Number(value) : value;
}

// Every item of a collection (following next_page_uri), for choices in a form.
export async function everything(path, key) {
  let page = await api.get(path);
  const items = [...(page[key] || [])];
  while (page.next_page_uri && items.length < 1000) {
    page = await api.get(page.next_page_uri);
    items.push(...(page[key] || []));
  }
  return items;
}

// A choice's text: "description (id)", or the id.
export function named(item, extra) {
  const label = item.description || extra || "";
  return label ? `${label} (${item.id})` : item.id;
}

// Validity of a certificate now: [word, class] for a badge.
export function validity(cert) {
  const now = Date.now();
  if (cert.not_before && Date.parse(cert.not_before) > now) return ["not yet valid", "bad"];
  if (cert.not_after && Date.parse(cert.not_after) < now) return ["expired", "bad"];
  return ["valid", "ok"];
}

// An inline editor in a row's action cell (the credentials' ACL editor pattern): `build`
// makes the form; Cancel (or a save) draws the list again.
export function editInRow(button, formNode, reload) {
  const cell = button.closest("td") || button.parentNode;
  formNode.classList.add("inline");
  formNode.querySelector(".actions").append(
    h("button", { type: "button", class: "secondary", onclick: () => reload() }, "Cancel"));
  cell.replaceChildren(formNode);
  const first = formNode.querySelector("input, textarea, select");
  if (first) first.focus();
}

// A resource's own words under its name: its description and metadata (each only when set).
export function describedBy(item) {
  return [item.description ? h("div", { class: "description" }, item.description) : null,
          item.metadata ? h("div", { class: "muted metadata" }, "Metadata ", code(item.metadata)) : null];
}

// The row's Edit button of a resource whose PATCH takes description and metadata only (SSH
// CAs and certificates, agent ingresses): the editor opens in the row (editInRow).
export function editDescriptionButton(item, path, reload) {
  return h("button", { type: "button", class: "secondary small", dataset: { action: "edit" }, onclick: (event) => {
    const editor = form(`Edit ${item.id}`, [
      field("description", "Description", { value: item.description }),
      field("metadata", "Metadata", { value: item.metadata, hint: "Free text for your own tools (at most 4096 bytes)." })],
      "Save", async (values) => {
        await api.patch(`${path}/${item.id}`, { description: values.description, metadata: values.metadata });
        await reload();
      });
    editInRow(event.target, editor, reload);
  } }, "Edit");
}
