// IP policies and their rules.
import * as api from "../api.js";
import { h, clear, code, time, field, form, confirmButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, DESCRIPTION, ref, section } from "./common.js";

export default {
  route: "ip_policies",
  title: "IP policies",
  render(container) {
    // The rule form is there from the start (no shift when the policies arrive); its policy
    // choices are filled in when they do.
    const ruleForm = form("New rule", [
      field("ip_policy_id", "IP policy", { kind: "select", options: [],
        hint: "Create an IP policy first: rules belong to one." }),
      field("cidr", "CIDR", { required: true, placeholder: "203.0.113.0/24" }),
      field("action", "Action", { kind: "select", options: [["allow", "allow"], ["deny", "deny"]], value: "allow" }),
      field("description", "Description")], "Add rule", async (values, node) => {
        await api.post("/ip_policy_rules", values);
        node.reset();
        await ruleList.reload();
      });
    const choose = ruleForm.querySelector("select[name=ip_policy_id]");
    const policyList = listView({
      path: "/ip_policies", key: "ip_policies", what: "IP policies",
      columns: [ID, DESCRIPTION, { label: "Created", cell: (p) => time(p.created_at) }],
      actions: (p, reload) => confirmButton("Delete", `Delete IP policy ${p.id}?`, async () => { await api.del(`/ip_policies/${p.id}`); await reload(); await ruleList.reload(); }),
      onItems: (items) => {
        clear(choose, items.map((p) => h("option", { value: p.id }, p.description ? `${p.description} (${p.id})` : p.id)));
        ruleForm.querySelector("button[type=submit]").disabled = !items.length;
      },
    });
    const ruleList = listView({
      path: "/ip_policy_rules", key: "ip_policy_rules", what: "IP policy rules",
      columns: [ID, { label: "CIDR", cell: (r) => code(r.cidr) }, { label: "Action", cell: (r) => r.action },
                { label: "Policy", cell: (r) => ref(r.ip_policy) }, DESCRIPTION],
      actions: (r, reload) => confirmButton("Delete", `Delete rule ${r.cidr}?`, async () => { await api.del(`/ip_policy_rules/${r.id}`); await reload(); }),
    });
    const create = form("New IP policy", [field("description", "Description")], "Create IP policy",
      async (values, node) => {
        await api.post("/ip_policies", { description: values.description });
        node.reset();
        await policyList.reload();
      });
    container.append(pageHead("IP policies", "Lists of CIDRs to allow or deny, used by endpoints and edges."),
                     create, section("IP policies", policyList.node),
                     section("Rules", ruleForm, ruleList.node));
    policyList.reload();
    ruleList.reload();
  },
};
