// Traffic: the traffic inspector. Pick an endpoint; its recent requests (the edge captures
// them: docs/EVENTS.md) are listed and read again every few seconds while the page is open;
// each shows its headers (secrets redacted by the edge) and, when capture is on, its bodies,
// and can be replayed through the edge.
import * as api from "../api.js";
import { h, clear, code, time, errorBox, actionButton, uid } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { section, poll } from "./common.js";

export const POLL_SECONDS = 2;

function decoded(b64) {
  if (b64 === null || b64 === undefined) return null;
  try {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    return new TextDecoder("utf-8", { fatal: false }).decode(bytes);
  } catch (err) {
    return "(not decodable)";
  }
}

function headerText(headers) {
  return Object.entries(headers || {}).flatMap(([name, values]) =>
    values.map((value) => `${name}: ${value}`)).join("\n") || "(none)";
}

function details(r) {
  const parts = [h("h3", {}, "Request headers"), h("pre", { class: "headers" }, headerText(r.request_headers)),
                 h("h3", {}, "Response headers"), h("pre", { class: "headers" }, headerText(r.response_headers))];
  if (r.bodies_captured) {
    parts.push(h("h3", {}, `Request body${r.request_body_truncated ? " (first 4096 bytes)" : ""}`),
               h("pre", { class: "body request-body" }, decoded(r.request_body) || "(empty)"),
               h("h3", {}, `Response body${r.response_body_truncated ? " (first 4096 bytes)" : ""}`),
               h("pre", { class: "body response-body" }, decoded(r.response_body) || "(empty)"));
  } else {
    parts.push(h("p", { class: "muted" }, "Bodies are not captured for this endpoint (turn capture on above)."));
  }
  return h("details", { class: "captured" }, h("summary", {}, "Headers and bodies"), parts);
}

// replays: request id -> what its last replay answered (kept across the live re-renders)
function replayButton(endpointId, r, replays) {
  const result = h("span", { class: "replay-result", role: "status" }, replays.get(r.id) || "");
  const button = actionButton("Replay", async () => {
    result.textContent = "";
    try {
      const answer = await api.post(`/endpoints/${endpointId}/captured_requests/${r.id}/replay`, {});
      replays.set(r.id, ` replayed: ${answer.status_code} in ${answer.duration_ms} ms`);
    } catch (err) {
      replays.set(r.id, ` replay failed: ${err.message}`);
      throw err;   // shown beside the button, with its code and operation id
    } finally {
      result.textContent = replays.get(r.id) || "";
    }
  });
  return h("span", {}, button, result);
}

function captureToggle(endpointId) {
  const id = uid("capture");
  const box = h("input", { type: "checkbox", id, name: "capture_bodies" });
  const status = h("span", { class: "muted capture-status", role: "status" });
  const wrap = h("div", { class: "field field-checkbox capture" },
                 box, h("label", { for: id }, "Capture request and response bodies (first 4096 bytes each)"), status);
  api.get(`/endpoints/${endpointId}/capture`).then((setting) => {
    box.checked = !!setting.capture_bodies;
  }).catch((err) => clear(status, errorBox(err)));
  box.addEventListener("change", async () => {
    box.disabled = true;
    try {
      const setting = await api.request("PUT", `/endpoints/${endpointId}/capture`,
                                        { capture_bodies: box.checked });
      box.checked = !!setting.capture_bodies;
      status.textContent = setting.capture_bodies ? " on (within 10 s at the edge)" : " off";
    } catch (err) {
      box.checked = !box.checked;
      clear(status, errorBox(err));
    } finally {
      box.disabled = false;
    }
  });
  return wrap;
}

export default {
  route: "traffic",
  title: "Traffic",
  render(container) {
    const updated = h("p", { class: "muted updated", role: "status" }, "");
    const pickId = uid("endpoint");
    const picker = h("select", { id: pickId, name: "endpoint" },
                     h("option", { value: "" }, "Loading endpoints…"));
    const holder = h("div", { class: "inspector" });
    let current = null;
    const replays = new Map();

    function show(endpointId) {
      if (!endpointId) {
        current = null;
        clear(holder, h("p", { class: "muted" }, "Pick an endpoint to see its recent requests."));
        return;
      }
      const list = listView({
        path: `/endpoints/${endpointId}/captured_requests?limit=50`, key: "captured_requests",
        what: "captured requests",
        emptyText: "No request captured in the last 15 minutes. Send one to the endpoint.",
        columns: [{ label: "Time", cell: (r) => time(r.start) },
                  { label: "Request", cell: (r) => h("span", {}, h("strong", {}, r.method), " ", code(r.target)) },
                  { label: "Status", cell: (r) => h("span", { class: `status status-${String(r.status_code)[0]}xx` }, String(r.status_code)) },
                  { label: "Duration", cell: (r) => `${r.duration_ms} ms` },
                  { label: "Client", cell: (r) => code(r.client_addr) },
                  { label: "Details", cell: (r) => details(r) }],
        actions: (r) => replayButton(endpointId, r, replays),
      });
      current = list;
      clear(holder, captureToggle(endpointId), list.node);
      list.reload();
    }

    picker.addEventListener("change", () => show(picker.value));
    api.get("/endpoints").then((page) => {
      const endpoints = page.endpoints || [];
      clear(picker, h("option", { value: "" }, endpoints.length ? "Choose an endpoint" : "No endpoint online"),
            endpoints.map((e) => h("option", { value: e.id }, `${e.url || e.public_url} (${e.id})`)));
      show("");
    }).catch((err) => clear(holder, errorBox(err)));

    container.append(
      pageHead("Traffic", `The recent requests of an endpoint as the edge saw them (kept 15 minutes; Authorization, Cookie and Set-Cookie redacted), updated every ${POLL_SECONDS} seconds; replay one through the edge.`, updated),
      section("Endpoint", h("div", { class: "field field-select" }, h("label", { for: pickId }, "Endpoint"), picker)),
      section("Requests", holder));
    return poll(async () => {
      if (!current) return;
      // an open details element or a replay in progress is not re-rendered under the reader
      if (holder.querySelector("details[open]") || holder.querySelector("button:disabled")) return;
      await current.reload({ quiet: true });
      updated.replaceChildren("Updated ", time(new Date().toISOString()));
    }, POLL_SECONDS);
  },
};
