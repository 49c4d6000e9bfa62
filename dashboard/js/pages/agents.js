// Agents (tunnel sessions): the online sessions, followed live; stop or restart one and see
// what its agent answered (the API waits for the answer: docs/DASHBOARD.md).
import * as api from "../api.js";
import { h, code, time, errorBox } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { ID, section, poll, credentialNames } from "./common.js";
import { POLL_SECONDS } from "./overview.js";

const OPERATIONS = {
  stop: { label: "Stop", busy: "Stopping…", done: "stopped", cls: "danger small",
          question: (id) => `Stop the agent of session ${id}? It exits and does not reconnect.` },
  restart: { label: "Restart", busy: "Restarting…", done: "restarted", cls: "secondary small",
             question: (id) => `Restart the agent of session ${id}?` },
};

export default {
  route: "agents",
  title: "Agents",
  render(container) {
    const pending = new Map(); // session id -> the operation waiting for the agent's answer
    const refused = new Map(); // session id -> the API's error for the row's last operation
    const notice = h("p", { class: "notice", role: "status" });
    const names = credentialNames(() => list.redraw());

    const list = listView({
      path: "/tunnel_sessions", key: "tunnel_sessions", what: "agent sessions",
      emptyText: "No agent is online.",
      onItems: (items) => names.learn(items),
      columns: [ID, { label: "Version", cell: (s) => s.agent_version || "—" },
                { label: "OS", cell: (s) => s.os || "—" },
                { label: "IP", cell: (s) => code(s.ip) },
                { label: "Authtoken", cell: (s) => names.cell(s.credential) },
                { label: "Metadata", cell: (s) => s.metadata || "—" },
                { label: "Started", cell: (s) => time(s.started_at) }],
      actions: (s) => {
        // aria-disabled, not disabled, while the answer is awaited: the focus stays on the
        // button (a disabled one loses it), and run() ignores the click meanwhile
        const busy = pending.get(s.id);
        const buttons = ["restart", "stop"].map((name) => {
          const op = OPERATIONS[name];
          return h("button", { type: "button", class: op.cls, "aria-disabled": busy ? "true" : null,
                               dataset: { action: name }, onclick: () => run(s.id, name) },
                   busy === name ? op.busy : op.label);
        });
        const error = refused.get(s.id);
        return [...buttons, error ? h("div", { class: "action-error" }, errorBox(error)) : null];
      },
    });

    // Ask, then wait for the agent's answer (the API's 204, or its error for this row).
    async function run(sessionId, name) {
      const op = OPERATIONS[name];
      if (pending.has(sessionId) || !window.confirm(op.question(sessionId))) return;
      pending.set(sessionId, name);
      refused.delete(sessionId);
      notice.textContent = "";
      list.redraw();
      try {
        await api.post(`/tunnel_sessions/${sessionId}/${name}`);
        notice.textContent = `The agent of session ${sessionId} accepted: ${op.done}.`;
      } catch (err) {
        refused.set(sessionId, err);
      } finally {
        pending.delete(sessionId);
        list.redraw();
        await list.reload({ quiet: true });
      }
    }

    container.append(
      pageHead("Agents", `Online agent sessions; updated every ${POLL_SECONDS} seconds while this page is open. Stop and restart wait for the agent's answer (up to 20 seconds): a refusal is shown beside the buttons.`),
      section("Agent sessions", notice, list.node));
    list.reload();
    return poll(() => list.reload({ quiet: true }), POLL_SECONDS);
  },
};
