// Reserved domains: the CNAME records to add, a DNS check of them, the certificate status.
import * as api from "../api.js";
import { h, clear, code, time, field, form, confirmButton, errorBox, breakable } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { section } from "./common.js";

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

export default {
  route: "reserved_domains",
  title: "Domains",
  render(container) {
    const list = listView({
      path: "/reserved_domains", key: "reserved_domains", what: "reserved domains",
      emptyText: "No reserved domain yet.",
      columns: [{ label: "Domain", cell: (d) => h("div", {}, h("strong", { class: "domain-name" }, breakable(d.domain)),
                                                 d.description ? h("div", { class: "description" }, d.description) : null,
                                                 h("div", { class: "muted" }, code(d.id))) },
                { label: "CNAME records to add", cell: recordsCell },
                { label: "DNS", cell: dnsCheckCell },
                { label: "Certificate", cell: (d) => certificateCell(d, () => list.reload()) },
                { label: "Created", cell: (d) => time(d.created_at) }],
      actions: (d, reload) => confirmButton("Delete", `Delete the reservation of ${d.domain}?`,
        async () => { await api.del(`/reserved_domains/${d.id}`); await reload(); }),
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
