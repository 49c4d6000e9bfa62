// What is online now: agent sessions and endpoints, updated every few seconds.
import { h, code, time } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, ref, section, poll, credentialNames } from "./common.js";

export const POLL_SECONDS = 2;

// An endpoint's URL exactly as the API returns it, agent or cloud, with the host:port the API
// names for it below (docs/DASHBOARD.md: the API names 443 for a cloud endpoint).
export function endpointUrl(e) {
  return h("div", { class: "endpoint-url" }, code(e.url || e.public_url),
           e.hostport ? h("div", { class: "muted hostport" }, code(e.hostport)) : null);
}

export default {
  route: "overview",
  title: "Overview",
  render(container) {
    const updated = h("p", { class: "muted updated", role: "status" }, "");
    const names = credentialNames(() => sessions.redraw());
    const sessions = listView({
      path: "/tunnel_sessions", key: "tunnel_sessions", what: "online agents",
      emptyText: "No agent is online. Start one with an authtoken from Authtokens.",
      onItems: (items) => names.learn(items),
      columns: [ID, { label: "Agent", cell: (s) => `${s.agent_version || "?"} (${s.os || "?"})` },
                { label: "IP", cell: (s) => code(s.ip) },
                { label: "Authtoken", cell: (s) => names.cell(s.credential) },
                { label: "Region", cell: (s) => s.region || "—" },
                { label: "Started", cell: (s) => time(s.started_at) }],
    });
    const endpoints = listView({
      path: "/endpoints", key: "endpoints", what: "online endpoints",
      emptyText: "No endpoint is online.",
      columns: [{ label: "URL", cell: endpointUrl },
                { label: "Type", cell: (e) => e.type },
                { label: "Forwards to", cell: (e) => code(e.upstream_url) },
                { label: "Agent session", cell: (e) => ref(e.tunnel_session) },
                { label: "Created", cell: (e) => time(e.created_at) }],
    });
    container.append(
      pageHead("Overview", `Online agents and endpoints; updated every ${POLL_SECONDS} seconds while this page is open.`, updated),
      section("Online agents", sessions.node), section("Endpoints", endpoints.node));
    const refresh = async (quiet) => {
      await Promise.all([sessions.reload({ quiet }), endpoints.reload({ quiet })]);
      updated.replaceChildren("Updated ", time(new Date().toISOString()));
    };
    refresh(false);
    return poll(() => refresh(true), POLL_SECONDS);
  },
};
