// Reserved domains: the CNAME records to add, a DNS check of them, the certificate status;
// a domain's description, metadata, certificate and points of presence edited in its row.
import * as api from "../api.js";
import { h, clear, code, time, field, form, confirmButton, errorBox, breakable } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { section, everything, named, editInRow } from "./common.js";

const STATUS_TEXT = { found: "Found", missing: "Missing", wrong_target: "Wrong target", unknown: "Not known" };

// The records a domain needs (the same rule as the API's DNS check).
export function cnameRecords(domain) {
  const records = [];
  if (domain.cname_target) records.push([domain.domain, domain.cname_target]);
  if (domain.acme_challenge_cname_target) {
    const suffix = domain.domain.replace(/^\*\./, "");
    records.push([`_acme-challenge.${suffix}`, domain.acme_challenge_cname_target]);
  }
  return records;
}

function recordsCell(domain) {
  const records = cnameRecords(domain);
  if (!records.length) return h("span", { class: "muted" }, "None needed (a name of the service's own domain)");
  return h("dl", { class: "records" }, records.map(([name, target]) => [
    h("dt", {}, code(name), " CNAME"), h("dd", {}, code(target))]));
}

// Which certificate the edge serves for the domain, and why (the API's provisioning job says
// why a managed one is not there: in progress, failed, or no ACME directory configured).
function certificateCell(domain, reload) {
  const status = domain.certificate_management_status;
  const job = status && status.provisioning_job;
  const parts = [];
  if (domain.certificate) {
    parts.push(h("div", { class: "served" }, "Served: certificate ", code(domain.certificate.id), " ",
      confirmButton("Detach", `Stop serving ${domain.certificate.id} for ${domain.domain}? An uploaded certificate stays in TLS certificates; an issued one is deleted.`,
        async () => { await api.del(`/reserved_domains/${domain.id}/certificate`); await reload(); })));
  } else if (!domain.cname_target) {
    parts.push(h("div", { class: "served" }, "Served: the service's own certificate"));
  } else {
    parts.push(h("div", { class: "served" }, "Served: the edge's fallback certificate (none of this domain's own yet)"));
  }
  if (domain.certificate_management_policy) {
    parts.push(h("div", { class: "muted" }, `Managed (${domain.certificate_management_policy.authority}, ${domain.certificate_management_policy.private_key_type})`));
  } else if (domain.cname_target && !domain.certificate) {
    parts.push(h("div", { class: "muted" }, "Not managed: attach one on the TLS certificates page."));
  }
  if (job) {
    parts.push(h("div", { class: `job ${job.error_code ? "bad" : ""}` }, job.msg || "Provisioning",
                 job.error_code ? ` (${job.error_code})` : ""));
    if (job.retries_at) parts.push(h("div", { class: "muted" }, "Retries at ", time(job.retries_at)));
  }
  if (status && status.renews_at) parts.push(h("div", { class: "muted" }, "Renews at ", time(status.renews_at)));
  return h("div", { class: "cert" }, parts);
}

function dnsCheckCell(domain) {
  const result = h("div", { class: "dns-result", "aria-live": "polite" });
  const button = h("button", { type: "button", class: "secondary small dns-check" }, "DNS check");
  button.addEventListener("click", async () => {
    button.disabled = true;
    clear(result, h("span", { role: "status" }, "Checking…"));
    try {
      const report = await api.post(`/reserved_domains/${domain.id}/dns_check`);
      clear(result, report.records.length
        ? h("ul", { class: "plain checks" }, report.records.map((r) => h("li", { class: `check check-${r.status}`, dataset: { status: r.status, name: r.name } },
            h("span", { class: `badge badge-${r.status}` }, STATUS_TEXT[r.status] || r.status), " ", code(r.name),
            r.msg ? h("div", { class: "muted" }, r.msg) : null)))
        : h("span", {}, "No record is needed."),
        h("div", { class: "muted" }, "Checked ", time(report.checked_at)));
    } catch (err) {
      clear(result, errorBox(err));
    } finally {
      button.disabled = false;
    }
  });
  return h("div", {}, button, result);
}

const RESOLVES_TO = [["global", "global"], ["au", "au (Australia)"], ["eu", "eu (Europe)"], ["ap", "ap (Asia/Pacific)"],
                     ["us", "us (United States)"], ["jp", "jp (Japan)"], ["in", "in (India)"], ["sa", "sa (South America)"]];

// The certificate a domain is served with, as the editor's two choices: whether the service
// manages it (ACME, and the key type), and which certificate of the account is attached.
function certificateFields(domain, certificates) {
  if (!domain.cname_target) return []; // a name of the service's own domain: its certificate
  const policy = domain.certificate_management_policy;
  return [
    field("certificate_management_policy", "Managed certificate", { kind: "select",
      options: [["", "not managed"], ["ecdsa", "managed: Let's Encrypt, ECDSA key"], ["rsa", "managed: Let's Encrypt, RSA key"]],
      value: policy ? policy.private_key_type : "",
      hint: "The service obtains and renews a certificate by ACME for this domain." }),
    field("certificate_id", "Attached certificate", { kind: "select",
      options: [["", "none"], ...certificates.map((c) => [c.id, named(c, c.subject_common_name)])],
      value: domain.certificate ? domain.certificate.id : "",
      hint: "A TLS certificate of yours that covers the domain (TLS certificates page); attaching one stops managed certificates, choosing none detaches it." })];
}

function domainFields(domain, certificates) {
  return [
    field("description", "Description", { value: domain.description }),
    field("metadata", "Metadata", { value: domain.metadata, hint: "Free text for your own tools (at most 4096 bytes)." }),
    ...certificateFields(domain, certificates),
    field("resolves_to", "Resolves to", { kind: "select", multiple: true, options: RESOLVES_TO,
      value: (domain.resolves_to || []).map((r) => r.value),
      hint: "Points of presence the name resolves to; none selected: global." })];
}

// Only what changed of the certificate is sent: a PATCH sets a policy or attaches a
// certificate (the API refuses both at once), a DELETE stops management or detaches.
async function saveDomain(domain, values) {
  const path = `/reserved_domains/${domain.id}`;
  const body = { description: values.description, metadata: values.metadata,
                 resolves_to: (values.resolves_to || []).map((value) => ({ value })) };
  const policyBefore = domain.certificate_management_policy ? domain.certificate_management_policy.private_key_type : "";
  const certBefore = domain.certificate ? domain.certificate.id : "";
  const policyChanged = "certificate_management_policy" in values && values.certificate_management_policy !== policyBefore;
  const certChanged = "certificate_id" in values && values.certificate_id !== certBefore;
  if (policyChanged && values.certificate_management_policy) {
    body.certificate_management_policy = { authority: "letsencrypt", private_key_type: values.certificate_management_policy };
  }
  if (certChanged && values.certificate_id) body.certificate_id = values.certificate_id;
  await api.patch(path, body);
  if (certChanged && !values.certificate_id) await api.del(`${path}/certificate`);
  if (policyChanged && !values.certificate_management_policy) await api.del(`${path}/certificate_management_policy`);
}

export default {
  route: "reserved_domains",
  title: "Domains",
  render(container) {
    const list = listView({
      path: "/reserved_domains", key: "reserved_domains", what: "reserved domains",
      emptyText: "No reserved domain yet.",
      columns: [{ label: "Domain", cell: (d) => h("div", {}, h("strong", { class: "domain-name" }, breakable(d.domain)),
                                                 d.description ? h("div", { class: "description" }, d.description) : null,
                                                 d.metadata ? h("div", { class: "muted metadata" }, "Metadata ", code(d.metadata)) : null,
                                                 h("div", { class: "muted" }, code(d.id))) },
                { label: "CNAME records to add", cell: recordsCell },
                { label: "DNS", cell: dnsCheckCell },
                { label: "Certificate", cell: (d) => certificateCell(d, () => list.reload()) },
                { label: "Created", cell: (d) => time(d.created_at) }],
      actions: (d, reload) => [
        h("button", { type: "button", class: "secondary small", dataset: { action: "edit" }, onclick: async (event) => {
          const button = event.target;
          button.disabled = true;
          let certificates = [];
          try {
            if (d.cname_target) certificates = await everything("/tls_certificates", "tls_certificates");
          } catch (err) {
            button.disabled = false;
            button.after(errorBox(err));
            return;
          }
          const editor = form(`Edit ${d.domain}`, domainFields(d, certificates), "Save", async (values) => {
            await saveDomain(d, values);
            await reload();
          });
          editInRow(button, editor, reload);
        } }, "Edit"),
        confirmButton("Delete", `Delete the reservation of ${d.domain}?`,
          async () => { await api.del(`/reserved_domains/${d.id}`); await reload(); })],
    });
    const create = form("Reserve a domain", [
      field("domain", "Domain", { required: true, placeholder: "app.example.com or *.example.com",
        hint: "Your own domain (then add the CNAME records shown), or a name under the service's domain." }),
      field("description", "Description")], "Reserve domain",
      async (values, node) => {
        await api.post("/reserved_domains", { domain: values.domain.trim(), description: values.description });
        node.reset();
        await list.reload();
      });
    container.append(pageHead("Domains", "Reserved domains, the DNS records they need and their certificates."),
                     create, section("Reserved domains", list.node));
    list.reload();
  },
};
