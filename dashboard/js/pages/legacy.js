// The legacy edges, routes, backends and modules: read and delete.
import * as api from "../api.js";
import { h, code, time, confirmButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, DESCRIPTION, section } from "./common.js";

const EDGE_MODULES = ["backend", "ip_restriction", "traffic_policy", "mutual_tls", "tls_termination"];
const ROUTE_MODULES = ["backend", "ip_restriction", "user_agent_filter", "request_headers",
                       "response_headers", "traffic_policy"];

// Each module set on an edge (or route), with a button that removes it.
function moduleList(names, owner, base, reload) {
  const set = names.filter((name) => owner[name]);
  if (!set.length) return h("span", { class: "muted" }, "no module");
  return h("ul", { class: "plain modules" }, set.map((name) => h("li", {}, code(name), " ",
    confirmButton("Remove", `Remove the ${name} module of ${owner.id}?`,
      async () => { await api.del(`${base}/${name}`); await reload(); }))));
}

function edgeModules(path) {
  return (edge, reload) => moduleList(EDGE_MODULES, edge, `${path}/${edge.id}`, reload);
}

function routesOf(edge, reload) {
  if (!edge.routes || !edge.routes.length) return h("span", { class: "muted" }, "no route");
  return h("ul", { class: "plain routes" }, edge.routes.map((route) => {
    const base = `/edges/https/${edge.id}/routes/${route.id}`;
    return h("li", { dataset: { route: route.id } }, `${route.match_type} `, code(route.match), " ",
      confirmButton("Delete route", `Delete the route ${route.match} of ${edge.id}?`,
        async () => { await api.del(base); await reload(); }),
      moduleList(ROUTE_MODULES, route, base, reload));
  }));
}

const KINDS = [
  ["HTTPS edges", "/edges/https", "https_edges", [
    { label: "Hostports", cell: (e) => (e.hostports || []).join(", ") || "—" },
    { label: "Modules", cell: edgeModules("/edges/https"), withReload: true },
    { label: "Routes", cell: routesOf, withReload: true }]],
  ["TCP edges", "/edges/tcp", "tcp_edges", [
    { label: "Hostports", cell: (e) => (e.hostports || []).join(", ") || "—" },
    { label: "Modules", cell: edgeModules("/edges/tcp"), withReload: true }]],
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
      let list = null;
      const columns = extra.map((column) => (column.withReload
        ? { label: column.label, cell: (item) => column.cell(item, () => list.reload()) } : column));
      list = listView({
        path, key, what: lower, emptyText: `No ${lower}.`,
        columns: [ID, DESCRIPTION, ...columns, { label: "Created", cell: (x) => time(x.created_at) }],
        actions: (x, reload) => confirmButton("Delete", `Delete ${x.id}?`, async () => { await api.del(`${path}/${x.id}`); await reload(); }),
      });
      list.node.dataset.list = key === "backends" ? path.slice(1).replace("/", "_") : key;
      container.append(section(title, list.node));
      list.reload();
    }
  },
};
