// API keys: create (the key shown once), list, delete.
import * as api from "../api.js";
import { h, clear, code, time, field, form, secretOnce, confirmButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, DESCRIPTION, section } from "./common.js";

export default {
  route: "api_keys",
  title: "API keys",
  render(container) {
    const secretSlot = h("div", { class: "secret-slot" });
    const list = listView({
      path: "/api_keys", key: "keys", what: "API keys",
      columns: [ID, DESCRIPTION, { label: "Owner", cell: (k) => code(k.owner_id) },
                { label: "Created", cell: (k) => time(k.created_at) }],
      actions: (k, reload) => confirmButton("Delete", `Delete API key ${k.id}? Requests with it are refused from now on (this dashboard too, if you signed in with it).`,
        async () => { await api.del(`/api_keys/${k.id}`); await reload(); }),
    });
    const create = form("New API key", [
      field("description", "Description"), field("metadata", "Metadata"),
      field("owner_id", "Owner (optional)", { placeholder: "usr_… or bot_…", hint: "Empty: you." })],
      "Create API key", async (values, node) => {
        const body = { description: values.description, metadata: values.metadata };
        if (values.owner_id.trim()) body.owner_id = values.owner_id.trim();
        const created = await api.post("/api_keys", body);
        node.reset();
        clear(secretSlot, secretOnce("API key", created.token));
        secretSlot.querySelector(".secret-value").focus();
        await list.reload();
      });
    container.append(pageHead("API keys", "Keys for this API. A new key is shown once, at creation."),
                     secretSlot, create, section("API keys", list.node));
    list.reload();
  },
};
