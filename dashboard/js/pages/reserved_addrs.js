// Reserved TCP addresses.
import * as api from "../api.js";
import { code, time, field, form, confirmButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, DESCRIPTION, section } from "./common.js";

export default {
  route: "reserved_addrs",
  title: "TCP addresses",
  render(container) {
    const list = listView({
      path: "/reserved_addrs", key: "reserved_addrs", what: "reserved TCP addresses",
      columns: [{ label: "Address", cell: (a) => code(a.addr) }, ID, DESCRIPTION,
                { label: "Created", cell: (a) => time(a.created_at) }],
      actions: (a, reload) => confirmButton("Delete", `Release ${a.addr}?`, async () => { await api.del(`/reserved_addrs/${a.id}`); await reload(); }),
    });
    const create = form("Reserve a TCP address", [field("description", "Description")], "Reserve address",
      async (values, node) => {
        await api.post("/reserved_addrs", { description: values.description });
        node.reset();
        await list.reload();
      });
    container.append(pageHead("TCP addresses", "Reserved host:port addresses for TCP endpoints."),
                     create, section("Reserved TCP addresses", list.node));
    list.reload();
  },
};
