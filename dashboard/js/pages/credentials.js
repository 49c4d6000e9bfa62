// Authtokens (tunnel credentials): create with an ACL, the token shown once; edit the ACL.
import * as api from "../api.js";
import { h, clear, code, time, field, form, secretOnce, confirmButton, uid } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, DESCRIPTION, section } from "./common.js";

// The ACL editor: one input per rule ("bind:<hostname or wildcard>"), add and remove rows.
// `what` names the credential in the hint (authtokens, SSH credentials).
export function aclEditor(rules, what = "authtoken") {
  const id = uid("acl");
  const list = h("ul", { class: "acl-rules", id });
  const errId = `${id}-error`;
  function addRow(value) {
    const inputId = uid("acl-rule");
    const row = h("li", {},
      h("label", { for: inputId, class: "visually-hidden" }, "ACL rule"),
      h("input", { id: inputId, type: "text", value: value || "", class: "acl-rule",
                   placeholder: "bind:app.example.com", spellcheck: "false",
                   "aria-describedby": errId }),
      h("button", { type: "button", class: "secondary small", "aria-label": "Remove this rule",
                    onclick: () => { row.remove(); } }, "Remove"));
    list.append(row);
    return row;
  }
  (rules || []).forEach(addRow);
  const node = h("fieldset", { class: "field acl-editor", dataset: { field: "acl" } },
    h("legend", {}, "ACL (bind rules)"),
    h("p", { class: "hint" }, `Empty: the ${what} may bind any name of the account. ` +
      "Each rule is bind:<name>, bind:*.<domain> or bind:*."),
    list,
    h("button", { type: "button", class: "secondary small add-rule",
                  onclick: () => addRow("").querySelector("input").focus() }, "Add rule"),
    h("p", { class: "field-error", id: errId, role: "alert" }));
  return { node, value: () => [...list.querySelectorAll("input")].map((i) => i.value.trim()).filter(Boolean) };
}

export default {
  route: "credentials",
  title: "Authtokens",
  render(container) {
    const secretSlot = h("div", { class: "secret-slot" });
    const list = listView({
      path: "/credentials", key: "credentials", what: "authtokens",
      emptyText: "No authtoken yet: create one to connect an agent.",
      columns: [ID, DESCRIPTION,
                { label: "ACL", cell: (c) => (c.acl && c.acl.length ? h("ul", { class: "plain" }, c.acl.map((r) => h("li", {}, code(r)))) : h("span", { class: "muted" }, "any name")) },
                { label: "Created", cell: (c) => time(c.created_at) }],
      actions: (c, reload) => [
        h("button", { type: "button", class: "secondary small", onclick: (event) => editAcl(event.target.closest("tr"), c, reload) }, "Edit ACL"),
        confirmButton("Delete", `Delete authtoken ${c.id}? Agents using it are refused from now on.`,
          async () => { await api.del(`/credentials/${c.id}`); await reload(); })],
    });
    const acl = aclEditor([]);
    const create = form("New authtoken", [
      field("description", "Description", { placeholder: "laptop agent" }),
      field("metadata", "Metadata"), acl.node], "Create authtoken",
      async (values, node) => {
        const created = await api.post("/credentials", { description: values.description, metadata: values.metadata, acl: acl.value() });
        node.reset();
        acl.node.querySelectorAll(".acl-rules li").forEach((li) => li.remove());
        clear(secretSlot, secretOnce("authtoken", created.token));
        secretSlot.querySelector(".secret-value").focus();
        await list.reload();
      });
    container.append(pageHead("Authtokens", "Credentials agents connect with. A new token is shown once, at creation."),
                     secretSlot, create, section("Authtokens", list.node));
    list.reload();
  },
};

function editAcl(row, credential, reload) {
  const cell = row.querySelector(".row-actions");
  const editor = aclEditor(credential.acl || []);
  const editForm = form(`ACL of ${credential.id}`, [editor.node], "Save ACL", async () => {
    await api.patch(`/credentials/${credential.id}`, { acl: editor.value() });
    await reload();
  });
  editForm.classList.add("inline");
  editForm.querySelector(".actions").append(h("button", { type: "button", class: "secondary", onclick: () => reload() }, "Cancel"));
  clear(cell, editForm);
  const first = editForm.querySelector("input");
  if (first) first.focus();
}
