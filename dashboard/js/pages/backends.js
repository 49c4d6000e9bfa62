// Backends of every kind (what edge routes and TCP edges send traffic to): HTTP response,
// tunnel group, failover, weighted; each created and edited here, the API's validation error
// shown at its field. Failover and weighted backends name tunnel group and HTTP response
// backends: their examples are the ids of the account's own.
import * as api from "../api.js";
import { h, code, time, field, form, confirmButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, DESCRIPTION, section, lines, pairs, number, editInRow } from "./common.js";

const MEMBERS_HINT = "Tunnel group and HTTP response backends of this account (failover and weighted backends do not nest).";

function headersText(headers) {
  return Object.entries(headers || {}).map(([name, value]) => `${name}: ${value}`).join("\n");
}

function mapList(map, sep) {
  const entries = Object.entries(map || {});
  if (!entries.length) return h("span", { class: "muted" }, "—");
  return h("ul", { class: "plain" }, entries.map(([k, v]) => h("li", {}, code(`${k}${sep}${v}`))));
}

// kind -> its form fields (for a new one, or `item` to edit), its body, its cells
const KINDS = {
  http_response: {
    title: "HTTP response backends", one: "HTTP response backend",
    fields: (item) => [
      field("status_code", "Status code", { value: item ? String(item.status_code) : "", placeholder: "503",
        hint: "100 to 599; empty: 200." }),
      field("body", "Body", { kind: "textarea", rows: 3, value: item ? item.body : "",
        placeholder: "Down for maintenance" }),
      field("headers", "Headers", { kind: "textarea", rows: 3, value: item ? headersText(item.headers) : "",
        placeholder: "content-type: text/plain", hint: "One header a line: name: value." })],
    body: (v) => {
      const body = { body: v.body, headers: pairs(v.headers, ":", "headers", "name: value") };
      if (v.status_code.trim()) body.status_code = number(v.status_code);
      return body;
    },
    cells: [{ label: "Response", cell: (b) => h("div", {}, h("strong", {}, String(b.status_code)), " ",
                                               b.body ? h("pre", { class: "policy" }, b.body) : h("span", { class: "muted" }, "(no body)")) },
            { label: "Headers", cell: (b) => mapList(b.headers, ": ") }],
  },
  tunnel_group: {
    title: "Tunnel group backends", one: "tunnel group backend",
    fields: (item) => [
      field("labels", "Labels", { kind: "textarea", rows: 3, required: true,
        value: item ? Object.entries(item.labels || {}).map(([k, v]) => `${k}=${v}`).join("\n") : "",
        placeholder: "service=shop",
        hint: "One label a line: key=value. The group is the online tunnels whose agents carry all of them (labeled tunnels)." })],
    body: (v) => ({ labels: pairs(v.labels, "=", "labels", "key=value") }),
    cells: [{ label: "Labels", cell: (b) => mapList(b.labels, "=") },
            { label: "Online tunnels", cell: (b) => String((b.tunnels || []).length) }],
  },
  failover: {
    title: "Failover backends", one: "failover backend",
    fields: (item, members) => [
      field("backends", "Backends, in order", { kind: "textarea", rows: 3, required: true,
        value: item ? (item.backends || []).join("\n") : "",
        placeholder: members.slice(0, 2).join("\n") || undefined,
        hint: `One backend id a line, tried in this order. ${MEMBERS_HINT}` })],
    body: (v) => ({ backends: lines(v.backends) }),
    cells: [{ label: "Backends, in order", cell: (b) => h("ol", { class: "members" }, (b.backends || []).map((id) => h("li", {}, code(id)))) }],
  },
  weighted: {
    title: "Weighted backends", one: "weighted backend",
    fields: (item, members) => [
      field("backends", "Backends and weights", { kind: "textarea", rows: 3, required: true,
        value: item ? Object.entries(item.backends || {}).map(([k, v]) => `${k}=${v}`).join("\n") : "",
        placeholder: members.slice(0, 2).map((id, i) => `${id}=${i ? 10 : 90}`).join("\n") || undefined,
        hint: `One a line: backend id=weight (0 to 10000; at least one above 0). ${MEMBERS_HINT}` })],
    body: (v) => {
      const weights = pairs(v.backends, "=", "backends", "id=weight");
      return { backends: Object.fromEntries(Object.entries(weights).map(([k, w]) => [k, number(w)])) };
    },
    cells: [{ label: "Backends and weights", cell: (b) => mapList(b.backends, " = ") }],
  },
};

export default {
  route: "backends",
  title: "Backends",
  render(container) {
    container.append(pageHead("Backends", "Where HTTPS edge routes and TCP edges send traffic: a fixed HTTP response, a group of labeled tunnels, or several of those in failover order or by weight."));
    const members = { tunnel_group: [], http_response: [] }; // ids, for the examples
    const forms = {};
    const lists = {};

    function fields(kind, item) {
      const spec = KINDS[kind];
      return [field("description", "Description", { value: item ? item.description : "" }),
              ...spec.fields(item, [...members.tunnel_group, ...members.http_response])];
    }

    function newForm(kind) {
      const spec = KINDS[kind];
      const node = form(`New ${spec.one}`, fields(kind, null), `Create ${spec.one}`, async (values, f) => {
        await api.post(`/backends/${kind}`, { description: values.description, ...spec.body(values) });
        f.reset();
        await lists[kind].reload();
      });
      node.dataset.kind = kind;
      node.classList.add("grid");
      return node;
    }

    // the failover and weighted forms' examples name the account's members: drawn again
    // when those arrive (only while the form is untouched)
    function membersChanged() {
      for (const kind of ["failover", "weighted"]) {
        const old = forms[kind];
        if (!old || [...old.querySelectorAll("textarea, input")].some((i) => i.value)) continue;
        forms[kind] = newForm(kind);
        old.replaceWith(forms[kind]);
      }
    }

    for (const [kind, spec] of Object.entries(KINDS)) {
      const path = `/backends/${kind}`;
      lists[kind] = listView({
        path, key: "backends", what: spec.title.toLowerCase(), emptyText: `No ${spec.title.toLowerCase()}.`,
        columns: [ID, DESCRIPTION, ...spec.cells, { label: "Created", cell: (b) => time(b.created_at) }],
        actions: (b, reload) => [
          h("button", { type: "button", class: "secondary small", dataset: { action: "edit" },
            onclick: (event) => {
              const editor = form(`Edit ${b.id}`, fields(kind, b), "Save", async (values) => {
                await api.patch(`${path}/${b.id}`, { description: values.description, ...spec.body(values) });
                await reload();
              });
              editInRow(event.target, editor, reload);
            } }, "Edit"),
          confirmButton("Delete", `Delete ${spec.one} ${b.id}?`, async () => { await api.del(`${path}/${b.id}`); await reload(); })],
        onItems: kind in members ? (items) => {
          const ids = items.map((b) => b.id);
          if (JSON.stringify(ids) === JSON.stringify(members[kind])) return;
          members[kind] = ids;
          membersChanged();
        } : undefined,
      });
      lists[kind].node.dataset.list = `backends_${kind}`;
      forms[kind] = newForm(kind);
      const holder = h("div", { class: "kind" }, forms[kind]);
      container.append(section(spec.title, holder, lists[kind].node));
      lists[kind].reload();
    }
  },
};
