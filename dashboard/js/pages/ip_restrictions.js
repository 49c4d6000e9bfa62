// IP restrictions: IP policies attached to a kind of the account's traffic (agents
// connecting, requests to endpoints and edges, …). Create one (its type, its policies,
// whether it is enforced), see its policies by name, edit what the API's PATCH takes
// (description, metadata, enforced, policies) in its row, delete it.
import * as api from "../api.js";
import { ApiError } from "../api.js";
import { h, clear, code, time, field, form, confirmButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { section, everything, named, describedBy, editInRow } from "./common.js";

const PATH = "/ip_restrictions";

// The hosted service's four types: [value, choice, what it covers]; the API says at the type
// field when it does not take one.
const TYPES = [
  ["agent", "agent: agents connecting", "Agents connecting (SDKs, the agent CLI, ssh -R): refused at sign-in from other addresses."],
  ["endpoints", "endpoints: requests to endpoints and edges", "Requests to every endpoint and edge of the account: answered 403 from other addresses (TCP and TLS connections closed)."],
  ["api", "api: requests to the API", "Requests to the API, this dashboard's included."],
  ["dashboard", "dashboard: the dashboard", "Signing in to the dashboard."],
];

const WARNING = "An enforced IP restriction refuses this kind of traffic from every address its IP policies do not allow " +
  "(a policy without rules allows none). Not enforced, it only logs what it would refuse: add the allow rules of your own " +
  "addresses to its policies first, then enforce it.";

function typeCell(restriction) {
  const known = TYPES.find(([value]) => value === restriction.type);
  return h("div", {}, code(restriction.type), known ? h("div", { class: "muted" }, known[2]) : null);
}

function enforcedCell(restriction) {
  return restriction.enforced
    ? h("div", {}, h("span", { class: "badge badge-bad" }, "enforced"),
        h("div", { class: "bad" }, "Other addresses are refused."))
    : h("div", {}, h("span", { class: "badge badge-warn" }, "not enforced"),
        h("div", { class: "muted" }, "Logs what it would refuse."));
}

function policyField(policies, chosen) {
  return field("ip_policy_ids", "IP policies", { kind: "select", multiple: true,
    options: policies.map((p) => [p.id, named(p)]), value: chosen,
    hint: "1 to 10 of your IP policies (IP policies page): their allow and deny rules decide which addresses pass." });
}

function enforcedField(value) {
  return field("enforced", "Enforced", { kind: "checkbox", value,
    hint: "Enforced: this traffic from an address its IP policies do not allow is refused. Not enforced: only logged." });
}

export default {
  route: "ip_restrictions",
  title: "IP restrictions",
  render(container) {
    let policies = []; // the account's IP policies: the forms' choices, and the rows' names

    function policiesCell(restriction) {
      return h("ul", { class: "plain policies" }, (restriction.ip_policies || []).map((ref) => {
        const policy = policies.find((p) => p.id === ref.id);
        return h("li", {}, policy && policy.description
          ? h("div", { class: "named" }, h("span", { class: "name" }, policy.description), h("div", { class: "muted" }, code(ref.id)))
          : code(ref.id));
      }));
    }

    const list = listView({
      path: PATH, key: "ip_restrictions", what: "IP restrictions",
      emptyText: "No IP restriction: traffic is taken from any address (edges' and endpoints' own policies apart).",
      columns: [{ label: "IP restriction", cell: (r) => h("div", {}, describedBy(r), h("div", { class: "muted" }, code(r.id))) },
                { label: "Type", cell: typeCell },
                { label: "IP policies", cell: policiesCell },
                { label: "Enforced", cell: enforcedCell },
                { label: "Created", cell: (r) => time(r.created_at) }],
      actions: (r, reload) => [
        h("button", { type: "button", class: "secondary small", dataset: { action: "edit" }, onclick: (event) => {
          const was = (r.ip_policies || []).map((p) => p.id);
          const editor = form(`Edit ${r.id}`, [
            policyField(policies, was), enforcedField(r.enforced),
            field("description", "Description", { value: r.description }),
            field("metadata", "Metadata", { value: r.metadata, hint: "Free text for your own tools (at most 4096 bytes)." })],
            "Save", async (values) => {
              // an empty ip_policy_ids is "unchanged" to the API's PATCH: said here instead
              if (!values.ip_policy_ids.length) {
                throw new ApiError(400, { msg: "Choose at least one IP policy (delete the restriction to remove them all)", details: { field: "ip_policy_ids" } });
              }
              const body = { description: values.description, metadata: values.metadata, enforced: values.enforced };
              if (values.ip_policy_ids.join() !== was.join()) body.ip_policy_ids = values.ip_policy_ids;
              await api.patch(`${PATH}/${r.id}`, body);
              await reload();
            });
          editInRow(event.target, editor, reload);
        } }, "Edit"),
        confirmButton("Delete", `Delete IP restriction ${r.id} (${r.type})? Its policies stop restricting that traffic from then on.`,
          async () => { await api.del(`${PATH}/${r.id}`); await reload(); })],
    });

    const create = form("New IP restriction", [
      field("type", "Type", { kind: "select", value: "endpoints", options: TYPES.map(([value, text]) => [value, text]),
        hint: "What it restricts; it cannot change later. An enforced api restriction applies to this dashboard's requests too: without your own address allowed, it locks you out." }),
      policyField([], []), enforcedField(false),
      field("description", "Description"),
      field("metadata", "Metadata", { hint: "Free text for your own tools (at most 4096 bytes)." })],
      "Create IP restriction", async (values, node) => {
        await api.post(PATH, { type: values.type, ip_policy_ids: values.ip_policy_ids, enforced: values.enforced,
                               description: values.description, metadata: values.metadata });
        node.reset();
        await list.reload();
      });
    create.classList.add("grid");

    // the policies are read beside the list (not before it); once there, the form offers them
    // and the rows are drawn again with their names
    async function readPolicies() {
      try {
        policies = await everything("/ip_policies", "ip_policies");
      } catch (err) {
        policies = [];
      }
      clear(create.querySelector("select[name=ip_policy_ids]"), policies.map((p) => h("option", { value: p.id }, named(p))));
      create.querySelector("button[type=submit]").disabled = !policies.length;
      list.redraw();
    }

    container.append(pageHead("IP restrictions", "IP policies attached to a kind of your account's traffic: agents connecting, or requests to every endpoint and edge."),
                     h("p", { class: "card warning", role: "note" }, h("strong", {}, "Warning: "), WARNING),
                     create, section("IP restrictions", list.node));
    create.querySelector("button[type=submit]").disabled = true;
    list.reload();
    readPolicies();
  },
};
