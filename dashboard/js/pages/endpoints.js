// Endpoints: agent endpoints (online) and cloud endpoints, with their traffic policy; a cloud
// endpoint's policy is edited here and the API's validation error is shown at the element.
import * as api from "../api.js";
import { h, clear, code, time, field, form, confirmButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ref, section, everything } from "./common.js";
import { endpointUrl } from "./overview.js";

const POLICY_HINT = "A traffic policy document, YAML or JSON (on_http_request, on_http_response, on_tcp_connect).";

function policyCell(endpoint, reload) {
  const text = endpoint.traffic_policy || "";
  const shown = h("pre", { class: "policy" }, text || "(none)");
  if (endpoint.type !== "cloud") return shown;
  const edit = h("button", { type: "button", class: "secondary small edit-policy" }, "Edit policy");
  const wrap = h("div", {}, shown, edit);
  edit.addEventListener("click", () => {
    const editor = form(`Traffic policy of ${endpoint.url}`, [
      field("traffic_policy", "Traffic policy", { kind: "textarea", rows: 10, value: text, hint: POLICY_HINT })],
      "Save policy", async (values) => {
        await api.patch(`/endpoints/${endpoint.id}`, { traffic_policy: values.traffic_policy });
        await reload();
      });
    editor.classList.add("inline");
    editor.querySelector(".actions").append(h("button", { type: "button", class: "secondary", onclick: () => reload() }, "Cancel"));
    clear(wrap, editor);
    editor.querySelector("textarea").focus();
  });
  return wrap;
}

export default {
  route: "endpoints",
  title: "Endpoints",
  render(container) {
    const list = listView({
      path: "/endpoints", key: "endpoints", what: "endpoints",
      emptyText: "No endpoint: agents' endpoints show here while they are online; cloud endpoints are created below.",
      columns: [{ label: "URL", cell: (e) => h("div", {}, endpointUrl(e), h("div", { class: "muted" }, code(e.id))) },
                { label: "Type", cell: (e) => e.type },
                { label: "Agent session", cell: (e) => ref(e.tunnel_session) },
                { label: "Traffic policy", cell: (e) => policyCell(e, list.reload) },
                { label: "Created", cell: (e) => time(e.created_at) }],
      actions: (e, reload) => (e.type === "cloud"
        ? confirmButton("Delete", `Delete the cloud endpoint ${e.url}?`, async () => { await api.del(`/endpoints/${e.id}`); await reload(); })
        : null),
    });
    const create = form("New cloud endpoint", [
      field("url", "URL", { required: true,
        hint: "An https or http URL whose host is under a domain you reserved (Domains) or under the service's own domain, or tcp:// and a TCP address you reserved. The API shows it with the port the edge serves it on." }),
      field("traffic_policy", "Traffic policy", { kind: "textarea", rows: 8, hint: POLICY_HINT,
        placeholder: "on_http_request:\n  - actions:\n      - type: custom-response\n        config:\n          status_code: 200\n          body: Hello from a cloud endpoint" }),
      field("description", "Description")], "Create cloud endpoint",
      async (values, node) => {
        await api.post("/endpoints", { url: values.url.trim(), type: "cloud", traffic_policy: values.traffic_policy, description: values.description });
        node.reset();
        await list.reload();
      });
    // the URL's example: a domain of the account that no endpoint has yet
    Promise.all([everything("/reserved_domains", "reserved_domains"), everything("/endpoints", "endpoints")])
      .then(([domains, endpoints]) => {
        const used = new Set(endpoints.map((e) => e.host));
        const host = domains.map((d) => d.domain.replace(/^\*\./, "app.")).find((name) => !used.has(name));
        if (host) create.querySelector("input[name=url]").placeholder = `https://${host}`;
      }).catch(() => {});
    container.append(pageHead("Endpoints", "Agent endpoints while their agent is online, and cloud endpoints served from their traffic policy alone."),
                     create, section("Endpoints", list.node));
    list.reload();
  },
};
