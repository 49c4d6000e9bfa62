// HTTPS, TCP and TLS edges: created and edited with their modules, an HTTPS edge's routes
// with theirs; a module is removed by emptying it in the editor or with its Remove button.
// The examples (hostports, backends) are the account's own reserved names and backends. The
// three lists are one list of edges (edgeList) with the kind's fields and modules.
import * as api from "../api.js";
import { h, clear, code, time, field, form, confirmButton, errorBox } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, DESCRIPTION, section, lines, pairs, everything, named, editInRow } from "./common.js";

const ROUTE_MODULES = ["backend", "ip_restriction", "user_agent_filter", "request_headers",
                       "response_headers", "traffic_policy"];
const TCP_MODULES = ["backend", "ip_restriction", "traffic_policy"];
const HTTPS_EDGE_MODULES = ["tls_termination", "mutual_tls"];
// the API's order, which is also the order emptied ones are removed in: mutual_tls before the
// tls_termination it needs (the API refuses mutual TLS without termination at the edge)
const TLS_MODULES = ["backend", "ip_restriction", "mutual_tls", "tls_termination", "traffic_policy"];
const POLICY_HINT = "A traffic policy document (YAML or JSON).";
const ROUTE_POLICY = "on_http_request:\n  - actions:\n      - type: add-headers\n        config:\n          headers:\n            x-served-by: edge";
const TCP_POLICY = "on_tcp_connect:\n  - actions:\n      - type: restrict-ips\n        config:\n          enforce: true\n          allow:\n            - 203.0.113.0/24";

function headersText(headers) {
  return Object.entries(headers || {}).map(([name, value]) => `${name}: ${value}`).join("\n");
}

function hostports(text) {
  return String(text || "").split(/[\s,]+/).filter(Boolean);
}

// ---- module fields: the form's names are the API's (an error's details.field lands there)
function backendField(choices, module) {
  return field("backend.backend_id", "Backend", { kind: "select",
    options: [["", "none"], ...choices.backends.map((b) => [b.id, `${b.kind}: ${named(b)}`])],
    value: module && module.backend ? module.backend.id : "",
    hint: "A backend of this account (Backends page)." });
}

function ipField(choices, module) {
  return field("ip_restriction.ip_policy_ids", "IP restriction", { kind: "select", multiple: true,
    options: choices.ipPolicies.map((p) => [p.id, named(p)]),
    value: module ? (module.ip_policies || []).map((p) => p.id) : [],
    hint: "IP policies whose rules are enforced (IP policies page); none selected: no restriction." });
}

function policyField(module, example) {
  return field("traffic_policy.value", "Traffic policy", { kind: "textarea", rows: 6,
    value: module ? module.value : "", placeholder: example, hint: POLICY_HINT });
}

// the modules a form's values set (a module whose fields are all empty is not sent)
function moduleBody(v) {
  const body = {};
  if (v["backend.backend_id"]) body.backend = { backend_id: v["backend.backend_id"] };
  if (v["ip_restriction.ip_policy_ids"] && v["ip_restriction.ip_policy_ids"].length) {
    body.ip_restriction = { ip_policy_ids: v["ip_restriction.ip_policy_ids"] };
  }
  if ((v["traffic_policy.value"] || "").trim()) body.traffic_policy = { value: v["traffic_policy.value"] };
  for (const name of ["user_agent_filter"]) {
    if (!(name + ".allow" in v)) continue;
    const allow = lines(v[`${name}.allow`]);
    const deny = lines(v[`${name}.deny`]);
    if (allow.length || deny.length) body[name] = { allow, deny };
  }
  for (const name of ["request_headers", "response_headers"]) {
    if (!(name + ".add" in v)) continue;
    const add = pairs(v[`${name}.add`], ":", `${name}.add`, "name: value");
    const remove = hostports(v[`${name}.remove`]);
    if (Object.keys(add).length || remove.length) body[name] = { add, remove };
  }
  if ("tls_termination.min_version" in v && v["tls_termination.min_version"]) {
    const version = v["tls_termination.min_version"];
    body.tls_termination = version === "upstream" ? { terminate_at: "upstream" }
      : { min_version: version === "default" ? null : version };
  }
  if (v["mutual_tls.certificate_authority_ids"] && v["mutual_tls.certificate_authority_ids"].length) {
    body.mutual_tls = { certificate_authority_ids: v["mutual_tls.certificate_authority_ids"] };
  }
  return body;
}

// After a PATCH (which never removes a module): the modules the editor emptied are removed.
async function removeEmptied(base, names, before, body) {
  for (const name of names) {
    if (before && before[name] && !body[name]) await api.del(`${base}/${name}`);
  }
}

// Each module set, shown, with a button that removes it.
function moduleList(names, owner, base, reload) {
  const set = names.filter((name) => owner[name]);
  if (!set.length) return h("span", { class: "muted" }, "no module");
  return h("ul", { class: "plain modules" }, set.map((name) => h("li", { dataset: { module: name } },
    code(name), " ", moduleSummary(name, owner[name]), " ",
    confirmButton("Remove", `Remove the ${name} module of ${owner.id}?`,
      async () => { await api.del(`${base}/${name}`); await reload(); }))));
}

function moduleSummary(name, m) {
  const parts = [];
  if (name === "backend" && m.backend) parts.push(code(m.backend.id));
  if (name === "ip_restriction") parts.push(...(m.ip_policies || []).map((p) => code(p.id)));
  if (name === "tls_termination") {
    parts.push(m.terminate_at === "upstream" ? "at the upstream (passthrough)"
      : `at the edge, TLS ${m.min_version || "default (1.2)"} minimum`);
  }
  if (name === "mutual_tls") parts.push(...(m.certificate_authorities || []).map((c) => code(c.id)));
  if (name === "user_agent_filter") parts.push(`allow ${(m.allow || []).length}, deny ${(m.deny || []).length}`);
  if (name === "request_headers" || name === "response_headers") {
    parts.push(`add ${Object.keys(m.add || {}).length}, remove ${(m.remove || []).length}`);
  }
  if (name === "traffic_policy") parts.push(h("pre", { class: "policy" }, m.value));
  if (m.enabled === false) parts.push("(disabled)");
  return h("span", { class: "module-summary" }, parts.flatMap((p, i) => (i ? [" ", p] : [p])));
}

// ---- HTTPS edges -----------------------------------------------------------------------
function httpsEdgeFields(choices, edge, example) {
  return [
    field("description", "Description", { value: edge ? edge.description : "" }),
    field("hostports", "Hostports", { value: edge ? (edge.hostports || []).join(", ") : "",
      placeholder: example || undefined,
      hint: "host:port, comma separated: a domain you reserved (Domains) or a name under the service's own domain, port 443." }),
    tlsField(edge, false), mtlsField(choices, edge)];
}

// TLS termination: at the edge with a minimum version; a TLS edge may also pass the handshake
// through to the upstream (terminate_at "upstream"), which an HTTPS edge cannot.
function tlsField(edge, passthrough) {
  const module = edge ? edge.tls_termination : null;
  const options = [["", passthrough ? "not set (passthrough: the upstream makes the handshake)" : "not set"],
                   ["default", "at the edge, the edge's minimum (TLS 1.2)"],
                   ["1.2", "at the edge, TLS 1.2 minimum"], ["1.3", "at the edge, TLS 1.3 minimum"]];
  if (passthrough) options.push(["upstream", "at the upstream (a tls_termination module with terminate_at: upstream)"]);
  let value = "";
  if (module) value = module.terminate_at === "upstream" ? "upstream" : (module.min_version || "default");
  return field("tls_termination.min_version", "TLS termination", { kind: "select", options, value });
}

function mtlsField(choices, edge) {
  return field("mutual_tls.certificate_authority_ids", "Mutual TLS", { kind: "select", multiple: true,
    options: choices.cas.map((c) => [c.id, named(c, c.subject_common_name)]),
    value: edge && edge.mutual_tls ? (edge.mutual_tls.certificate_authorities || []).map((c) => c.id) : [],
    hint: "Certificate authorities whose client certificates are required (Certificate authorities page); none selected: no mutual TLS. It needs TLS termination at the edge." });
}

function routeFields(choices, route) {
  const m = (name) => (route ? route[name] : null);
  return [
    field("match_type", "Match type", { kind: "select", options: [["path_prefix", "path prefix"], ["exact_path", "exact path"]],
      value: route ? route.match_type : "path_prefix" }),
    field("match", "Match", { value: route ? route.match : "", placeholder: "/", required: true }),
    field("description", "Description", { value: route ? route.description : "" }),
    backendField(choices, m("backend")),
    ipField(choices, m("ip_restriction")),
    policyField(m("traffic_policy"), ROUTE_POLICY),
    field("user_agent_filter.allow", "User agents allowed", { kind: "textarea", rows: 2,
      value: m("user_agent_filter") ? m("user_agent_filter").allow.join("\n") : "", placeholder: "(?i)mozilla",
      hint: "One RE2 regular expression a line." }),
    field("user_agent_filter.deny", "User agents denied", { kind: "textarea", rows: 2,
      value: m("user_agent_filter") ? m("user_agent_filter").deny.join("\n") : "", placeholder: "(?i)bot" }),
    field("request_headers.add", "Request headers to add", { kind: "textarea", rows: 2,
      value: m("request_headers") ? headersText(m("request_headers").add) : "", placeholder: "x-route: shop",
      hint: "One header a line: name: value." }),
    field("request_headers.remove", "Request headers to remove", {
      value: m("request_headers") ? m("request_headers").remove.join(", ") : "", placeholder: "x-debug" }),
    field("response_headers.add", "Response headers to add", { kind: "textarea", rows: 2,
      value: m("response_headers") ? headersText(m("response_headers").add) : "", placeholder: "cache-control: no-store" }),
    field("response_headers.remove", "Response headers to remove", {
      value: m("response_headers") ? m("response_headers").remove.join(", ") : "", placeholder: "server" })];
}

function routeBody(values) {
  return { match_type: values.match_type, match: values.match, description: values.description, ...moduleBody(values) };
}

function routesOf(edge, choicesNow, reload) {
  const base = `/edges/https/${edge.id}/routes`;
  const items = (edge.routes || []).map((route) => {
    const path = `${base}/${route.id}`;
    return h("li", { class: "route", dataset: { route: route.id } },
      h("div", {}, `${route.match_type} `, code(route.match), route.description ? ` ${route.description}` : ""),
      h("div", { class: "actions" },
        h("button", { type: "button", class: "secondary small", dataset: { action: "edit-route" }, onclick: (event) => {
          const editor = form(`Route ${route.match} of ${edge.id}`, routeFields(choicesNow(), route), "Save route", async (values) => {
            const body = routeBody(values);
            await api.patch(path, body);
            await removeEmptied(path, ROUTE_MODULES, route, body);
            await reload();
          });
          editInRow(event.target.closest("li"), editor, reload);
        } }, "Edit route"),
        confirmButton("Delete route", `Delete the route ${route.match} of ${edge.id}?`,
          async () => { await api.del(path); await reload(); })),
      moduleList(ROUTE_MODULES, route, path, reload));
  });
  return h("div", {},
    items.length ? h("ul", { class: "plain routes" }, items) : h("span", { class: "muted" }, "no route"),
    h("button", { type: "button", class: "secondary small add-route", dataset: { action: "add-route" }, onclick: (event) => {
      const editor = form(`New route of ${edge.id}`, routeFields(choicesNow(), null), "Add route", async (values) => {
        await api.post(base, routeBody(values));
        await reload();
      });
      editInRow(event.target.closest("div"), editor, reload);
    } }, "Add route"));
}

// ---- TCP and TLS edges ----------------------------------------------------------------
function tcpEdgeFields(choices, edge, example) {
  const m = (name) => (edge ? edge[name] : null);
  return [
    field("description", "Description", { value: edge ? edge.description : "" }),
    field("hostports", "Hostports", { value: edge ? (edge.hostports || []).join(", ") : "",
      placeholder: example || undefined,
      hint: "Reserved TCP addresses (TCP addresses page), comma separated." }),
    backendField(choices, m("backend")), ipField(choices, m("ip_restriction")),
    policyField(m("traffic_policy"), TCP_POLICY)];
}

// A TLS edge: the TCP edge's modules (its policy runs on_tcp_connect too) plus TLS
// termination (at the edge or passed through) and mutual TLS; served by SNI on :443 names.
function tlsEdgeFields(choices, edge, example) {
  const m = (name) => (edge ? edge[name] : null);
  return [
    field("description", "Description", { value: edge ? edge.description : "" }),
    field("hostports", "Hostports", { value: edge ? (edge.hostports || []).join(", ") : "",
      placeholder: example || undefined,
      hint: "host:443, comma separated: a domain you reserved (Domains) or a name under the service's own domain; connections are routed by SNI." }),
    backendField(choices, m("backend")), ipField(choices, m("ip_restriction")),
    tlsField(edge, true), mtlsField(choices, edge),
    policyField(m("traffic_policy"), TCP_POLICY)];
}

// the choices the forms offer: every backend, IP policy and CA of the account, and the
// reserved names not yet on an edge (the hostport examples; the HTTPS and the TLS edge forms
// offer two different domains when the account has two free ones)
async function loadChoices() {
  const kinds = ["http_response", "tunnel_group", "failover", "weighted"];
  const [backends, ipPolicies, cas, domains, addrs, https, tcp, tls] = await Promise.all([
    Promise.all(kinds.map((kind) => everything(`/backends/${kind}`, "backends")
      .then((items) => items.map((b) => ({ ...b, kind: kind.replace("_", " ") }))))).then((all) => all.flat()),
    everything("/ip_policies", "ip_policies"), everything("/certificate_authorities", "certificate_authorities"),
    everything("/reserved_domains", "reserved_domains"), everything("/reserved_addrs", "reserved_addrs"),
    everything("/edges/https", "https_edges"), everything("/edges/tcp", "tcp_edges"),
    everything("/edges/tls", "tls_edges")]);
  const used = new Set([...https, ...tcp, ...tls].flatMap((e) => e.hostports || []));
  const free = domains.map((d) => `${d.domain.replace(/^\*\./, "app.")}:443`).filter((hp) => !used.has(hp));
  const tcpExample = addrs.map((a) => a.addr).find((hp) => !used.has(hp));
  return { backends, ipPolicies, cas, httpsExample: free[0], tlsExample: free[1] || free[0], tcpExample };
}

function hostportsCell(e) {
  return (e.hostports || []).length ? h("ul", { class: "plain" }, e.hostports.map((hp) => h("li", {}, code(hp)))) : "—";
}

// One kind's list: id, description, hostports, modules (each with Remove), the kind's extra
// columns; Edit (a PATCH, then the emptied modules' DELETEs) and Delete.
function edgeList({ path, key, what, kind, modules, fields, choicesNow, extraColumns = () => [], deleteText }) {
  const list = listView({
    path, key, what, emptyText: `No ${kind} edge.`,
    columns: [ID, DESCRIPTION,
              { label: "Hostports", cell: hostportsCell },
              { label: "Modules", cell: (e) => moduleList(modules, e, `${path}/${e.id}`, () => list.reload()) },
              ...extraColumns(() => list.reload()),
              { label: "Created", cell: (e) => time(e.created_at) }],
    actions: (e, reload) => [
      h("button", { type: "button", class: "secondary small", dataset: { action: "edit" }, onclick: (event) => {
        const editor = form(`Edit ${e.id}`, fields(choicesNow(), e, ""), "Save", async (values) => {
          const body = { description: values.description, hostports: hostports(values.hostports), ...moduleBody(values) };
          await api.patch(`${path}/${e.id}`, body);
          await removeEmptied(`${path}/${e.id}`, modules, e, body);
          await reload();
        });
        editInRow(event.target, editor, reload);
      } }, "Edit"),
      confirmButton("Delete", `Delete the ${kind} edge ${e.id}${deleteText || ""}?`,
        async () => { await api.del(`${path}/${e.id}`); await reload(); })],
  });
  return list;
}

export default {
  route: "edges",
  title: "Edges",
  render(container) {
    let choices = { backends: [], ipPolicies: [], cas: [] };
    const choicesNow = () => choices;
    const kinds = [
      { title: "HTTPS edges", path: "/edges/https", key: "https_edges", what: "HTTPS edges", kind: "HTTPS",
        modules: HTTPS_EDGE_MODULES, fields: httpsEdgeFields, example: "httpsExample", deleteText: " and its routes",
        extraColumns: (reload) => [{ label: "Routes", cell: (e) => routesOf(e, choicesNow, reload) }] },
      { title: "TCP edges", path: "/edges/tcp", key: "tcp_edges", what: "TCP edges", kind: "TCP",
        modules: TCP_MODULES, fields: tcpEdgeFields, example: "tcpExample" },
      { title: "TLS edges", path: "/edges/tls", key: "tls_edges", what: "TLS edges", kind: "TLS",
        modules: TLS_MODULES, fields: tlsEdgeFields, example: "tlsExample" },
    ];

    // The create forms are there from the start (no layout shift when data arrives); their
    // choices and examples are filled in once read, and again after each creation.
    for (const k of kinds) {
      k.list = edgeList({ ...k, choicesNow });
      k.form = form(`New ${k.kind} edge`, k.fields(choices, null, ""), `Create ${k.kind} edge`,
        async (values, node) => {
          await api.post(k.path, { description: values.description, hostports: hostports(values.hostports), ...moduleBody(values) });
          node.reset();
          await k.list.reload();
          await fillForms();
        });
      k.form.classList.add("grid");
      k.slot = h("div", { class: "form-slot" }, k.form);
    }

    function options(node, name, items, none) {
      const select = node.querySelector(`select[name="${name}"]`);
      if (!select) return;
      clear(select, none ? h("option", { value: "" }, "none") : null,
            items.map(([value, text]) => h("option", { value }, text)));
    }

    async function fillForms() {
      try {
        choices = await loadChoices();
      } catch (err) {
        clear(kinds[0].slot, errorBox(err), kinds[0].form);
        return;
      }
      for (const k of kinds) {
        const node = k.form;
        options(node, "backend.backend_id", choices.backends.map((b) => [b.id, `${b.kind}: ${named(b)}`]), true);
        options(node, "ip_restriction.ip_policy_ids", choices.ipPolicies.map((p) => [p.id, named(p)]));
        options(node, "mutual_tls.certificate_authority_ids", choices.cas.map((c) => [c.id, named(c, c.subject_common_name)]));
        node.querySelector("input[name=hostports]").placeholder = choices[k.example] || "";
      }
    }

    container.append(pageHead("Edges", "HTTPS edges with their routes, TCP edges and TLS edges, each with its modules (backend, IP restriction, TLS termination, mutual TLS, traffic policy, …). Empty a module's fields in an editor, or use its Remove button, to remove it."),
                     ...kinds.map((k) => section(k.title, k.slot, k.list.node)));
    for (const k of kinds) k.list.reload();
    fillForms();
  },
};
