// IP policies and their rules.
import * as api from "../api.js";
import { h, clear, code, time, field, form, confirmButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, DESCRIPTION, ref, section } from "./common.js";

export default {
  route: "ip_policies",
  title: "IP policies",
  render(container) {
    const policySlot = h("div", { class: "field-slot" });
    let policies = [];
    const ruleFields = () => [
      field("ip_policy_id", "IP policy", { kind: "select", options: policies.map((p) => [p.id, p.description ? `${p.description} (${p.id})` : p.id]) }),
      field("cidr", "CIDR", { required: true, placeholder: "203.0.113.0/24" }),
      field("action", "Action", { kind: "select", options: [["allow", "allow"], ["deny", "deny"]], value: "allow" }),
      field("description", "Description")];
    const policyList = listView({
      path: "/ip_policies", key: "ip_policies", what: "IP policies",
      columns: [ID, DESCRIPTION, { label: "Created", cell: (p) => time(p.created_at) }],
      actions: (p, reload) => confirmButton("Delete", `Delete IP policy ${p.id}?`, async () => { await api.del(`/ip_policies/${p.id}`); await reload(); await ruleList.reload(); }),
      onItems: (items) => { policies = items; clear(policySlot, policies.length ? ruleForm() : h("p", { class: "muted" }, "Create an IP policy to add rules to it.")); },
    });
    const ruleList = listView({
      path: "/ip_policy_rules", key: "ip_policy_rules", what: "IP policy rules",
      columns: [ID, { label: "CIDR", cell: (r) => code(r.cidr) }, { label: "Action", cell: (r) => r.action },
                { label: "Policy", cell: (r) => ref(r.ip_policy) }, DESCRIPTION],
      actions: (r, reload) => confirmButton("Delete", `Delete rule ${r.cidr}?`, async () => { await api.del(`/ip_policy_rules/${r.id}`); await reload(); }),
    });
    function ruleForm() {
      return form("New rule", ruleFields(), "Add rule", async (values, node) => {
        await api.post("/ip_policy_rules", values);
        node.reset();
        await ruleList.reload();
      });
    }
    const create = form("New IP policy", [field("description", "Description")], "Create IP policy",
      async (values, node) => {
        await api.post("/ip_policies", { description: values.description });
        node.reset();
        await policyList.reload();
      });
    container.append(pageHead("IP policies", "Lists of CIDRs to allow or deny, used by endpoints and edges."),
                     create, section("IP policies", policyList.node),
                     section("Rules", policySlot, ruleList.node));
    policyList.reload();
    ruleList.reload();
  },
};
