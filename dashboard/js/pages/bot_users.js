// Bot users: create, (de)activate, delete; their credentials and keys are made on the other
// pages with their id as owner.
import * as api from "../api.js";
import { time, field, form, actionButton, confirmButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, section } from "./common.js";

export default {
  route: "bot_users",
  title: "Bot users",
  render(container) {
    const list = listView({
      path: "/bot_users", key: "bot_users", what: "bot users",
      columns: [ID, { label: "Name", cell: (b) => b.name },
                { label: "Active", cell: (b) => (b.active ? "yes" : "no") },
                { label: "Created", cell: (b) => time(b.created_at) }],
      actions: (b, reload) => [
        actionButton(b.active ? "Deactivate" : "Activate",
          async () => { await api.patch(`/bot_users/${b.id}`, { active: !b.active }); await reload(); }),
        confirmButton("Delete", `Delete bot user ${b.name}?`, async () => { await api.del(`/bot_users/${b.id}`); await reload(); })],
    });
    const create = form("New bot user", [field("name", "Name", { required: true }),
                                         field("active", "Active", { kind: "checkbox", value: true })],
      "Create bot user", async (values, node) => {
        await api.post("/bot_users", { name: values.name, active: values.active });
        node.reset();
        await list.reload();
      });
    container.append(pageHead("Bot users", "Users for automation (the API also calls them service users: /service_users is the same list). Give one an authtoken or API key by naming its id as owner."),
                     create, section("Bot users", list.node));
    list.reload();
  },
};
