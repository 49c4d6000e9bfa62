// Certificate authorities: the CAs whose client certificates an HTTPS edge's mutual TLS
// module requires (Edges page). Upload one (PEM), see it, delete it.
import * as api from "../api.js";
import { h, code, field, form, confirmButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, DESCRIPTION, section } from "./common.js";
import { validityCell } from "./tls_certificates.js";

function usages(ca) {
  const all = [...(ca.key_usages || []), ...(ca.extended_key_usages || [])];
  return all.length ? h("ul", { class: "plain" }, all.map((u) => h("li", {}, code(u)))) : h("span", { class: "muted" }, "—");
}

export default {
  route: "certificate_authorities",
  title: "Certificate authorities",
  render(container) {
    const list = listView({
      path: "/certificate_authorities", key: "certificate_authorities", what: "certificate authorities",
      emptyText: "No certificate authority yet.",
      columns: [ID, DESCRIPTION, { label: "Subject", cell: (ca) => code(ca.subject_common_name || "—") },
                { label: "Status", cell: validityCell }, { label: "Usages", cell: usages }],
      actions: (ca, reload) => confirmButton("Delete", `Delete certificate authority ${ca.id}? An edge's mutual TLS that uses it refuses the deletion.`,
        async () => { await api.del(`/certificate_authorities/${ca.id}`); await reload(); }),
    });
    const upload = form("Upload a certificate authority", [
      field("description", "Description"),
      field("ca_pem", "CA certificate (PEM)", { kind: "textarea", rows: 6, required: true,
        hint: "One -----BEGIN CERTIFICATE----- block of a CA (basic constraints CA:TRUE)." })],
      "Upload certificate authority", async (values, node) => {
        await api.post("/certificate_authorities", values);
        node.reset();
        await list.reload();
      });
    container.append(pageHead("Certificate authorities", "CAs whose client certificates an HTTPS edge's mutual TLS requires."),
                     upload, section("Certificate authorities", list.node));
    list.reload();
  },
};
