// The dashboard's only way to the service: the public API, with the user's API key.
//
// The key is kept in sessionStorage (this tab only; gone when the tab closes, and on sign
// out), never in localStorage, cookies or the address bar: see docs/DASHBOARD.md.

const KEY_SLOT = "dashboard.apiKey";
const VERSION = "2";

function apiBase() {
  // Same origin under `make run`; a deployed static site names the API in this meta tag.
  const meta = document.querySelector('meta[name="api-base-url"]');
  const configured = meta ? meta.getAttribute("content").trim() : "";
  return (configured || window.location.origin).replace(/\/+$/, "");
}

export function apiKey() {
  return window.sessionStorage.getItem(KEY_SLOT);
}

export function setApiKey(key) {
  window.sessionStorage.setItem(KEY_SLOT, key);
}

export function forgetApiKey() {
  window.sessionStorage.removeItem(KEY_SLOT);
}

// An error answered by the API (its contract body), or a network failure (status 0).
export class ApiError extends Error {
  // operationId: the API's operation id (details.operation_id of its error body, else the
  // Operation-Id header every answer carries), what an operator finds the request by in logs
  constructor(status, body, operationId) {
    const msg = body && body.msg ? body.msg : `The request failed (HTTP ${status})`;
    super(msg);
    this.status = status;
    this.code = (body && body.error_code) || "";
    this.details = (body && body.details) || {};
    this.field = this.details.field || "";
    this.operationId = this.details.operation_id || operationId || "";
  }
}

// One request. `path` is a path ("/credentials") or a uri the API returned (next_page_uri).
export async function request(method, path, body, key) {
  const url = /^https?:\/\//.test(path) ? path : apiBase() + path;
  if (!url.startsWith(apiBase() + "/")) {
    throw new ApiError(0, { msg: "Refusing to send the API key to another origin" });
  }
  // Service-Client: the API checks these requests against the account's `dashboard` IP
  // restrictions, not its `api` ones (chalicelib/ip_restrictions.py)
  const headers = { "Authorization": `Bearer ${key || apiKey() || ""}`,
                    "Ngrok-Version": VERSION, "Service-Client": "dashboard" };
  const init = { method, headers, cache: "no-store", credentials: "omit",
                 referrerPolicy: "no-referrer" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (err) {
    throw new ApiError(0, { msg: `The API cannot be reached (${err.message})` });
  }
  const text = await response.text();
  let parsed = null;
  if (text) {
    try { parsed = JSON.parse(text); } catch (err) { parsed = null; }
  }
  if (!response.ok) {
    const error = new ApiError(response.status, parsed, response.headers.get("Operation-Id"));
    if (response.status === 401 && !key) {
      // the stored key stopped working (deleted, revoked): the page asks for a key again
      window.dispatchEvent(new CustomEvent("dashboard:unauthorized", { detail: error }));
    }
    throw error;
  }
  return parsed;
}

export const get = (path) => request("GET", path);
export const post = (path, body) => request("POST", path, body === undefined ? {} : body);
export const patch = (path, body) => request("PATCH", path, body);
export const del = (path) => request("DELETE", path);
