// Agents (tunnel sessions): stop or restart an online agent.
import * as api from "../api.js";
import { code, time, actionButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, ref, section } from "./common.js";

export default {
  route: "agents",
  title: "Agents",
  render(container) {
    const list = listView({
      path: "/tunnel_sessions", key: "tunnel_sessions", what: "agent sessions",
      emptyText: "No agent is online.",
      columns: [ID, { label: "Version", cell: (s) => s.agent_version || "—" },
                { label: "OS", cell: (s) => s.os || "—" },
                { label: "IP", cell: (s) => code(s.ip) },
                { label: "Authtoken", cell: (s) => ref(s.credential) },
                { label: "Metadata", cell: (s) => s.metadata || "—" },
                { label: "Started", cell: (s) => time(s.started_at) }],
      actions: (s, reload) => [
        actionButton("Restart", async () => { await api.post(`/tunnel_sessions/${s.id}/restart`); await reload(); },
                     { question: `Restart the agent of session ${s.id}?` }),
        actionButton("Stop", async () => { await api.post(`/tunnel_sessions/${s.id}/stop`); await reload(); },
                     { question: `Stop the agent of session ${s.id}? It exits and does not reconnect.`, cls: "danger small" })],
    });
    container.append(pageHead("Agents", "Online agent sessions. Stop and restart are sent at the agent's next heartbeat."),
                     section("Agent sessions", list.node));
    list.reload();
  },
};
