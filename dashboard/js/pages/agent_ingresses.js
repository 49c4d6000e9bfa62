// Agent ingresses (the hosted service's custom connect URL): a domain of the user's own that
// agents connect to instead of the service's, with the name servers and connect names the API
// gives and the certificate the edge serves for it; description and metadata edited in the
// row; deleted.
import * as api from "../api.js";
import { h, code, time, field, form, confirmButton, breakable } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { section, describedBy, editDescriptionButton } from "./common.js";

const PATH = "/agent_ingresses";

// The example domain: one the account has no ingress for yet (one ingress per domain).
function example(items) {
  const taken = new Set(items.map((i) => i.domain));
  for (let n = 1; ; n += 1) {
    const name = n === 1 ? "connect.example.com" : `connect-${n}.example.com`;
    if (!taken.has(name)) return name;
  }
}

// The API's ns_targets: the service's name servers, for the domain's NS records.
function nameServersCell(ingress) {
  if (!(ingress.ns_targets || []).length) return h("span", { class: "muted" }, "—");
  return h("div", {}, h("ul", { class: "plain" }, ingress.ns_targets.map((target) => h("li", {}, code(target)))),
           h("p", { class: "hint" }, "The service's name servers, for the domain's NS records."));
}

function connectCell(ingress) {
  return h("div", {}, h("ul", { class: "plain" }, (ingress.region_domains || []).map((d) => h("li", {}, code(d)))),
           h("p", { class: "hint" }, "The agent CLI's connect_url, an SDK's server_addr: this name with the edge's agent port."));
}

// The API's certificate status when there is one (as a reserved domain's), else what the
// edge serves (docs/DATA_PLANE.md, "Agent ingresses").
function certificateCell(ingress) {
  const status = ingress.certificate_management_status;
  const job = status && status.provisioning_job;
  if (!status) {
    return h("div", { class: "cert" }, h("div", { class: "served" }, "Served: a reserved domain's certificate covering the name, else one of the edge's own CA"),
             h("div", { class: "muted" }, "Not managed (agents trust the edge's own CA by root_cas)"));
  }
  return h("div", { class: "cert" },
    job ? h("div", { class: `job ${job.error_code ? "bad" : ""}` }, job.msg || "Provisioning", job.error_code ? ` (${job.error_code})` : "") : null,
    status.renews_at ? h("div", { class: "muted" }, "Renews at ", time(status.renews_at)) : null);
}

export default {
  route: "agent_ingresses",
  title: "Agent ingresses",
  render(container) {
    const create = form("New agent ingress", [
      field("domain", "Domain", { required: true, placeholder: "connect.example.com",
        hint: "A domain of your own (not one of the service's) that your agents connect to; it cannot change later." }),
      field("description", "Description"),
      field("metadata", "Metadata", { hint: "Free text for your own tools (at most 4096 bytes)." })],
      "Create agent ingress", async (values, node) => {
        await api.post(PATH, { domain: values.domain.trim(), description: values.description, metadata: values.metadata });
        node.reset();
        await list.reload();
      });
    const domainInput = create.querySelector("input[name=domain]");
    const list = listView({
      path: PATH, key: "ingresses", what: "agent ingresses",
      emptyText: "No agent ingress yet: agents connect at the service's own address.",
      columns: [{ label: "Domain", cell: (i) => h("div", {}, h("strong", { class: "domain-name" }, breakable(i.domain)),
                                                 describedBy(i), h("div", { class: "muted" }, code(i.id))) },
                { label: "Name servers", cell: nameServersCell },
                { label: "Agents connect at", cell: connectCell },
                { label: "Certificate", cell: certificateCell },
                { label: "Created", cell: (i) => time(i.created_at) }],
      actions: (i, reload) => [
        editDescriptionButton(i, PATH, reload),
        confirmButton("Delete", `Delete the agent ingress ${i.domain}? Agents connecting at it are refused from then on.`,
          async () => { await api.del(`${PATH}/${i.id}`); await reload(); })],
      onItems: (items) => { domainInput.placeholder = example(items); },
    });
    container.append(pageHead("Agent ingresses", "Domains of your own that your agents connect to, instead of the service's address."),
                     create, section("Agent ingresses", list.node));
    list.reload();
  },
};
