// SSH certificate authorities: keys the service generates and keeps (the private key never
// leaves it) to sign SSH host and user certificates (SSH certificates page). Create one (its
// key type), copy its public key, edit its description and metadata, delete it.
import * as api from "../api.js";
import { h, code, time, field, form, copyable, confirmButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { section, number, describedBy, editDescriptionButton } from "./common.js";

const PATH = "/ssh_certificate_authorities";

export const KEY_TYPES = [["ed25519", "Ed25519 (default)"], ["ecdsa", "ECDSA"], ["rsa", "RSA"]];

// The CA's public key, and where OpenSSH takes it.
function publicKeyCell(ca) {
  return h("div", {}, copyable(ca.public_key, `the public key of ${ca.id}`),
           h("p", { class: "hint" }, "Servers trust user certificates with it in sshd's TrustedUserCAKeys file; clients trust host certificates with a known_hosts line: @cert-authority <host pattern> <this key>."));
}

export default {
  route: "ssh_certificate_authorities",
  title: "SSH CAs",
  render(container) {
    const list = listView({
      path: PATH, key: "ssh_certificate_authorities", what: "SSH certificate authorities",
      emptyText: "No SSH certificate authority yet.",
      columns: [{ label: "Certificate authority", cell: (ca) => h("div", {}, describedBy(ca), h("div", { class: "muted" }, code(ca.id))) },
                { label: "Key type", cell: (ca) => code(ca.key_type) },
                { label: "Public key", cell: publicKeyCell },
                { label: "Created", cell: (ca) => time(ca.created_at) }],
      actions: (ca, reload) => [
        editDescriptionButton(ca, PATH, reload),
        confirmButton("Delete", `Delete SSH certificate authority ${ca.id}? The certificates it signed stay listed but authenticate nowhere any more.`,
          async () => { await api.del(`${PATH}/${ca.id}`); await reload(); })],
    });
    const create = form("New SSH certificate authority", [
      field("description", "Description"),
      field("metadata", "Metadata", { hint: "Free text for your own tools (at most 4096 bytes)." }),
      field("private_key_type", "Key type", { kind: "select", options: KEY_TYPES, value: "ed25519",
        hint: "The service generates the private key and keeps it sealed; no call returns it." }),
      field("elliptic_curve", "Elliptic curve", { kind: "select", value: "",
        options: [["", "—"], ["p256", "P-256"], ["p384", "P-384"], ["p521", "P-521"]],
        hint: "ECDSA keys only; none chosen: P-256." }),
      field("key_size", "Key size", { kind: "select", value: "",
        options: [["", "—"], ["2048", "2048 bits"], ["4096", "4096 bits"]],
        hint: "RSA keys only; none chosen: 4096 bits (generating one takes a few seconds)." })],
      "Create SSH certificate authority", async (values, node) => {
        const body = { description: values.description, metadata: values.metadata,
                       private_key_type: values.private_key_type };
        if (values.elliptic_curve) body.elliptic_curve = values.elliptic_curve;
        if (values.key_size) body.key_size = number(values.key_size);
        await api.post(PATH, body);
        node.reset();
        await list.reload();
      });
    create.classList.add("grid");
    container.append(pageHead("SSH certificate authorities", "Keys that sign SSH host and user certificates. The service generates each private key and never returns it; copy the public key to where OpenSSH trusts it."),
                     create, section("SSH certificate authorities", list.node));
    list.reload();
  },
};
