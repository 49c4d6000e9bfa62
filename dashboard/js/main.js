// The dashboard: sign in with an API key, then one page per part of the API (hash routes).
import * as api from "./api.js";
import { h, clear, errorBox, field, form } from "./dom.js";
import overview from "./pages/overview.js";
import endpoints from "./pages/endpoints.js";
import agents from "./pages/agents.js";
import credentials from "./pages/credentials.js";
import sshCredentials from "./pages/ssh_credentials.js";
import apiKeys from "./pages/api_keys.js";
import botUsers from "./pages/bot_users.js";
import reservedDomains from "./pages/reserved_domains.js";
import reservedAddrs from "./pages/reserved_addrs.js";
import ipPolicies from "./pages/ip_policies.js";
import ipRestrictions from "./pages/ip_restrictions.js";
import tlsCertificates from "./pages/tls_certificates.js";
import certificateAuthorities from "./pages/certificate_authorities.js";
import sshCertificateAuthorities from "./pages/ssh_certificate_authorities.js";
import sshCertificates from "./pages/ssh_certificates.js";
import agentIngresses from "./pages/agent_ingresses.js";
import edges from "./pages/edges.js";
import backends from "./pages/backends.js";
import traffic from "./pages/traffic.js";

const PAGES = [overview, endpoints, traffic, agents, credentials, sshCredentials, apiKeys,
               botUsers, reservedDomains, reservedAddrs, agentIngresses, tlsCertificates,
               certificateAuthorities, sshCertificateAuthorities, sshCertificates,
               ipPolicies, ipRestrictions, edges, backends];
const main = document.getElementById("main");
const nav = document.getElementById("nav");
const account = document.getElementById("account");
let cleanup = null;

function pageFor(hash) {
  const route = (hash || "").replace(/^#\/?/, "").split("/")[0];
  return PAGES.find((page) => page.route === route) || overview;
}

function renderNav(current) {
  clear(nav, h("ul", {}, PAGES.map((page) => h("li", {},
    h("a", { href: `#/${page.route}`, "aria-current": page === current ? "page" : null },
      page.title)))));
}

function signOut() {
  api.forgetApiKey();
  if (cleanup) cleanup();
  cleanup = null;
  window.location.hash = "";
  showSignIn();
}

function renderAccount() {
  clear(account, h("button", { type: "button", class: "secondary", onclick: signOut,
                               id: "sign-out" }, "Sign out"));
}

function showSignIn(err) {
  document.body.classList.add("signed-out");
  clear(nav);
  clear(account);
  const signIn = form("Sign in", [
    field("api_key", "API key", { type: "password", required: true, autocomplete: "off",
      hint: "An API key of your account (make run prints the local admin key). It is kept " +
            "in this browser tab only, until you sign out or close the tab." })],
    "Sign in", async (values) => {
      const key = values.api_key.trim();
      if (!key) {
        const missing = new api.ApiError(400, { msg: "Enter an API key", details: { field: "api_key" } });
        throw missing;
      }
      try {
        await api.request("GET", "/api_keys?limit=1", undefined, key);
      } catch (error) {
        if (error.status === 401 || error.status === 403) error.field = "api_key";
        throw error;
      }
      api.setApiKey(key);
      route();
    });
  signIn.id = "sign-in";
  clear(main, h("div", { class: "sign-in-page" },
    h("h1", { tabindex: "-1" }, "Tunnel service dashboard"),
    err ? errorBox(err) : null, signIn));
  main.querySelector("input").focus();
}

function route() {
  if (!api.apiKey()) {
    showSignIn();
    return;
  }
  document.body.classList.remove("signed-out");
  if (cleanup) cleanup();
  cleanup = null;
  const page = pageFor(window.location.hash);
  renderNav(page);
  renderAccount();
  document.title = `${page.title} · Tunnel service dashboard`;
  const container = h("div", { class: `page page-${page.route}` });
  clear(main, container);
  cleanup = page.render(container) || null;
  const heading = container.querySelector("h1");
  if (heading && document.activeElement !== document.body) heading.focus({ preventScroll: true });
}

window.addEventListener("hashchange", route);
window.addEventListener("dashboard:unauthorized", (event) => {
  if (!api.apiKey()) return;
  api.forgetApiKey();
  if (cleanup) cleanup();
  cleanup = null;
  showSignIn(event.detail);
});
route();
