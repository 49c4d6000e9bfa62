// The legacy edges, routes, backends and modules: read and delete.
import * as api from "../api.js";
import { h, code, time, confirmButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, DESCRIPTION, section } from "./common.js";

function modulesOf(item) {
  const names = ["backend", "ip_restriction", "traffic_policy", "mutual_tls", "tls_termination"]
    .filter((name) => item[name]);
  const routes = item.routes ? item.routes.map((r) => h("li", {}, `${r.match_type} `, code(r.match),
    h("span", { class: "muted" }, ` (${["backend", "ip_restriction", "user_agent_filter", "request_headers", "response_headers", "traffic_policy"].filter((n) => r[n]).join(", ") || "no module"})`))) : [];
  return h("div", {}, names.length ? names.join(", ") : h("span", { class: "muted" }, "no module"),
           routes.length ? h("ul", { class: "plain" }, routes) : null);
}

const KINDS = [
  ["HTTPS edges", "/edges/https", "https_edges", [{ label: "Hostports", cell: (e) => (e.hostports || []).join(", ") || "—" }, { label: "Modules and routes", cell: modulesOf }]],
  ["TCP edges", "/edges/tcp", "tcp_edges", [{ label: "Hostports", cell: (e) => (e.hostports || []).join(", ") || "—" }, { label: "Modules", cell: modulesOf }]],
  ["HTTP response backends", "/backends/http_response", "backends", [{ label: "Status", cell: (b) => b.status_code }]],
  ["Tunnel group backends", "/backends/tunnel_group", "backends", [{ label: "Labels", cell: (b) => Object.entries(b.labels || {}).map(([k, v]) => `${k}=${v}`).join(", ") || "—" }]],
  ["Failover backends", "/backends/failover", "backends", [{ label: "Backends", cell: (b) => (b.backends || []).join(", ") }]],
  ["Weighted backends", "/backends/weighted", "backends", [{ label: "Backends", cell: (b) => Object.entries(b.backends || {}).map(([k, v]) => `${k}: ${v}`).join(", ") }]],
];

export default {
  route: "legacy",
  title: "Edges & backends",
  render(container) {
    container.append(pageHead("Edges & backends", "The legacy edges, their routes and modules, and backends: read and delete."));
    for (const [title, path, key, extra] of KINDS) {
      // "HTTPS edges" keeps its acronym, "Failover backends" reads "failover backends"
      const first = title.split(" ")[0];
      const lower = first === first.toUpperCase() ? title : title[0].toLowerCase() + title.slice(1);
      const list = listView({
        path, key, what: lower, emptyText: `No ${lower}.`,
        columns: [ID, DESCRIPTION, ...extra, { label: "Created", cell: (x) => time(x.created_at) }],
        actions: (x, reload) => confirmButton("Delete", `Delete ${x.id}?`, async () => { await api.del(`${path}/${x.id}`); await reload(); }),
      });
      container.append(section(title, list.node));
      list.reload();
    }
  },
};
