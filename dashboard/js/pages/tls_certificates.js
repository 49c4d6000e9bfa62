// TLS certificates: upload one (PEM certificate chain and private key), see what it is and
// whether it is valid, attach it to a reserved domain (the edge then serves it for that
// name), delete it. Certificates the service issued by ACME for a domain are listed too.
import * as api from "../api.js";
import { h, code, time, field, form, confirmButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, DESCRIPTION, section, everything, validity, editInRow } from "./common.js";

function names(cert) {
  const dns = (cert.subject_alternative_names && cert.subject_alternative_names.dns_names) || [];
  const ips = (cert.subject_alternative_names && cert.subject_alternative_names.ips) || [];
  return h("div", {}, cert.subject_common_name ? h("div", {}, "CN ", code(cert.subject_common_name)) : null,
    dns.length || ips.length ? h("ul", { class: "plain" }, [...dns, ...ips].map((n) => h("li", {}, code(n)))) : null);
}

// 64 hex digits in four groups of 16, which may wrap between groups (never inside one).
function fingerprint(hex) {
  if (!hex) return code("");
  const groups = hex.match(/.{1,16}/g);
  return h("code", { class: "fingerprint", title: hex }, groups.flatMap((g, i) => (i ? [h("wbr"), g] : [g])));
}

export function validityCell(cert) {
  const [word, cls] = validity(cert);
  return h("div", {}, h("span", { class: `badge badge-${cls}` }, word),
           h("div", { class: "muted" }, "from ", time(cert.not_before)),
           h("div", { class: "muted" }, "until ", time(cert.not_after)));
}

export default {
  route: "tls_certificates",
  title: "TLS certificates",
  render(container) {
    let domains = []; // the account's reserved domains: which use which certificate
    const usedBy = (cert) => domains.filter((d) => d.certificate && d.certificate.id === cert.id);
    const list = listView({
      path: "/tls_certificates", key: "tls_certificates", what: "TLS certificates",
      emptyText: "No TLS certificate: upload one above, or reserve a domain with managed certificates.",
      columns: [ID, DESCRIPTION, { label: "Names", cell: names },
                { label: "Status", cell: validityCell },
                { label: "Origin", cell: (c) => h("div", {},
                  c.issued_at ? h("div", {}, "Issued by ACME ", time(c.issued_at)) : h("div", {}, "Uploaded"),
                  h("div", { class: "muted" }, "Issuer ", code(c.issuer_common_name || "—"))) },
                { label: "Served for", cell: (c) => {
                  const using = usedBy(c);
                  return using.length ? h("ul", { class: "plain" }, using.map((d) => h("li", {}, code(d.domain))))
                    : h("span", { class: "muted" }, "no domain");
                } },
                { label: "Fingerprint (SHA-256)", cell: (c) => fingerprint(c.fingerprint) }],
      actions: (c, reload) => [
        h("button", { type: "button", class: "secondary small", dataset: { action: "attach" }, onclick: (event) => {
          const choices = domains.filter((d) => !(d.certificate && d.certificate.id === c.id));
          const editor = form(`Attach ${c.id} to a domain`, [
            field("certificate_id", "Reserved domain", { kind: "select",
              options: choices.map((d) => [d.id, d.domain]),
              hint: choices.length ? "The edge serves this certificate for that domain from then on (managed certificates stop for it)."
                                   : "No reserved domain to attach it to (Domains page)." })],
            "Attach", async (values) => {
              const domainId = values.certificate_id;
              if (!domainId) throw new api.ApiError(400, { msg: "Choose a reserved domain", details: { field: "certificate_id" } });
              await api.patch(`/reserved_domains/${domainId}`, { certificate_id: c.id });
              await refresh();
            });
          editInRow(event.target, editor, () => refresh());
        } }, "Attach to domain"),
        confirmButton("Delete", `Delete TLS certificate ${c.id}?`, async () => { await api.del(`/tls_certificates/${c.id}`); await reload(); })],
    });
    async function refresh() {
      try {
        domains = await everything("/reserved_domains", "reserved_domains");
      } catch (err) {
        domains = [];
      }
      await list.reload();
    }
    const upload = form("Upload a TLS certificate", [
      field("description", "Description"),
      field("certificate_pem", "Certificate chain (PEM)", { kind: "textarea", rows: 6, required: true,
        hint: "The certificate first, then its intermediates: -----BEGIN CERTIFICATE----- blocks, at most 10." }),
      field("private_key_pem", "Private key (PEM)", { kind: "textarea", rows: 6, required: true,
        hint: "The certificate's unencrypted key (RSA 2048 to 8192 bits, or ECDSA P-256/P-384). The API stores it sealed and never returns it." })],
      "Upload certificate", async (values, node) => {
        await api.post("/tls_certificates", values);
        node.reset();
        await refresh();
      });
    upload.classList.add("grid");
    container.append(pageHead("TLS certificates", "Certificates the edge serves for your reserved domains: uploaded here, or issued by ACME for a domain with managed certificates."),
                     upload, section("TLS certificates", list.node));
    refresh();
  },
};
