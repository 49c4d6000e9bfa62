// SSH credentials: public keys OpenSSH's ssh -R authenticates with at the edge's SSH gateway
// (docs/SSH.md), each with an ACL as an authtoken has. Create one (the key, its ACL,
// description and metadata), see how to connect with it, edit what the API's PATCH takes
// (description, metadata, ACL) in its row, delete it.
import * as api from "../api.js";
import { h, code, time, field, form, copyable, confirmButton, breakable, uid } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { section, describedBy, editInRow } from "./common.js";
import { aclEditor } from "./credentials.js";

const PATH = "/ssh_credentials";

// The command forms of docs/SSH.md. The dashboard does not know the gateway's address (the
// API has no setting for it), so it is named by placeholders; the edge prints the whole
// command with its host and port when it starts ("edge SSH gateway: ssh -R …").
const COMMANDS = [
  ["An HTTPS endpoint with a generated name, to localhost:8080",
   "ssh -R 0:localhost:8080 -p <SSH port> v2@<edge host> http"],
  ["An endpoint at a domain of yours",
   "ssh -R 0:localhost:8080 -p <SSH port> v2@<edge host> http --url=https://app.example.com"],
  ["A TCP endpoint on a free port, to localhost:22",
   "ssh -R 0:localhost:22 -p <SSH port> v2@<edge host> tcp"],
];

function usage() {
  const id = uid("usage");
  return h("section", { class: "card usage", "aria-labelledby": id },
    h("h3", { id }, "Connecting with ssh"),
    h("p", {}, "Once its public key is an SSH credential, an unmodified OpenSSH client opens an endpoint with ssh -R (ssh offers the keys in ~/.ssh by itself; another key: -i <private key file>):"),
    h("ul", { class: "plain commands" }, COMMANDS.map(([what, command]) =>
      h("li", {}, h("div", { class: "muted" }, what), h("code", { class: "command" }, breakable(command))))),
    h("p", { class: "hint" }, "<edge host> is the edge's public host; <SSH port> its SSH gateway's port (EDGE_SSH_PORT, 2222 unless set). " +
      "The edge prints the whole command with both when it starts. The endpoint lives as long as the ssh session; what it may bind is the credential's ACL."));
}

// "SHA256:…", as ssh-keygen -l prints it and the SSH gateway names a key it refuses; computed
// in the browser (crypto.subtle: a secure context only, else not shown).
async function fingerprintOf(publicKey) {
  const blob = String(publicKey).trim().split(/\s+/)[1] || "";
  const bytes = Uint8Array.from(atob(blob), (c) => c.charCodeAt(0));
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return `SHA256:${btoa(String.fromCharCode(...digest)).replace(/=+$/, "")}`;
}

function keyCell(credential) {
  const print = h("code", { class: "fingerprint" });
  if (window.crypto && crypto.subtle) {
    fingerprintOf(credential.public_key).then((text) => { print.textContent = text; }, () => { print.textContent = "—"; });
  }
  return h("div", {},
    h("div", { class: "muted" }, code(credential.public_key.split(" ")[0]), " ", print),
    copyable(credential.public_key, `the public key of ${credential.id}`));
}

function aclCell(credential) {
  if (!(credential.acl || []).length) return h("span", { class: "muted" }, "any name");
  return h("ul", { class: "plain" }, credential.acl.map((rule) => h("li", {}, code(rule))));
}

export default {
  route: "ssh_credentials",
  title: "SSH credentials",
  render(container) {
    const list = listView({
      path: PATH, key: "ssh_credentials", what: "SSH credentials",
      emptyText: "No SSH credential yet: add a public key to connect with ssh -R.",
      columns: [{ label: "SSH credential", cell: (c) => h("div", {}, describedBy(c), h("div", { class: "muted" }, code(c.id))) },
                { label: "Public key", cell: keyCell },
                { label: "ACL", cell: aclCell },
                { label: "Owner", cell: (c) => code(c.owner_id) },
                { label: "Created", cell: (c) => time(c.created_at) }],
      actions: (c, reload) => [
        h("button", { type: "button", class: "secondary small", dataset: { action: "edit" }, onclick: (event) => {
          const acl = aclEditor(c.acl || [], "SSH credential");
          const editor = form(`Edit ${c.id}`, [
            field("description", "Description", { value: c.description }),
            field("metadata", "Metadata", { value: c.metadata, hint: "Free text for your own tools (at most 4096 bytes)." }),
            acl.node],
            "Save", async (values) => {
              await api.patch(`${PATH}/${c.id}`, { description: values.description, metadata: values.metadata, acl: acl.value() });
              await reload();
            });
          editInRow(event.target, editor, reload);
        } }, "Edit"),
        confirmButton("Delete", `Delete SSH credential ${c.id}? The SSH gateway refuses its key from then on, and ends the sessions open with it.`,
          async () => { await api.del(`${PATH}/${c.id}`); await reload(); })],
    });
    const acl = aclEditor([], "SSH credential");
    const create = form("New SSH credential", [
      field("public_key", "Public key", { kind: "textarea", rows: 3, required: true,
        hint: "One line of an OpenSSH public key file, e.g. ~/.ssh/id_ed25519.pub (ssh-ed25519, ecdsa-sha2-nistp256/384/521 or ssh-rsa of 2048 to 8192 bits). It cannot change later, and one key is one credential." }),
      field("description", "Description", { placeholder: "laptop" }),
      field("metadata", "Metadata", { hint: "Free text for your own tools (at most 4096 bytes)." }),
      acl.node], "Create SSH credential",
      async (values, node) => {
        await api.post(PATH, { public_key: values.public_key.trim(), description: values.description,
                               metadata: values.metadata, acl: acl.value() });
        node.reset();
        acl.node.querySelectorAll(".acl-rules li").forEach((li) => li.remove());
        await list.reload();
      });
    create.classList.add("grid");
    container.append(pageHead("SSH credentials", "Public keys that OpenSSH's ssh -R authenticates with at the edge's SSH gateway, instead of an agent's authtoken."),
                     create, usage(), section("SSH credentials", list.node));
    list.reload();
  },
};
