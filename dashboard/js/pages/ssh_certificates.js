// SSH host and user certificates: a public key signed by one of the account's SSH
// certificate authorities (SSH CAs page) for some principals and a validity; the certificate
// shown with a Copy button; description and metadata edited in the row; deleted (a user
// certificate is then revoked at the SSH gateway).
import * as api from "../api.js";
import { h, clear, code, time, field, form, copyable, confirmButton } from "../dom.js";
import { listView, pageHead } from "../resource.js";
import { section, lines, everything, named, describedBy, editDescriptionButton } from "./common.js";

const HOUR = 3600 * 1000;

// kind -> its collection and the words and defaults that differ (chalicelib/ssh_certificates.py)
const KINDS = {
  host: {
    path: "/ssh_host_certificates", key: "ssh_host_certificates", title: "Host certificates",
    one: "host certificate", validity: 365 * 24 * HOUR, validityText: "365 days",
    principals: { placeholder: "host.example.com",
      hint: "One a line: the host names clients connect to. None: valid for every host." },
    use: "sshd presents it with HostCertificate (beside its HostKey); clients that trust the CA accept the host.",
  },
  user: {
    path: "/ssh_user_certificates", key: "ssh_user_certificates", title: "User certificates",
    one: "user certificate", validity: 24 * HOUR, validityText: "24 hours",
    principals: { placeholder: "deploy",
      hint: "One a line: the user names it logs in as (the SSH gateway's user is v2). None: valid for every user." },
    use: "Save it beside the key as <key>-cert.pub (ssh loads it with the key) or pass it with ssh -o CertificateFile=.",
  },
};

// RFC 3339 in UTC to the second, as the API writes times.
function rfc3339(millis) {
  return new Date(millis).toISOString().replace(/\.\d{3}Z$/, "Z");
}

// "name" or "name=value" lines (critical options, extensions) as an object; a name alone has
// the empty value (verify-required, permit-pty).
function options(text) {
  const out = {};
  for (const line of lines(text)) {
    const at = line.indexOf("=");
    if (at < 0) out[line] = "";
    else out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return out;
}

function optionList(map, none) {
  const entries = Object.entries(map || {});
  if (!entries.length) return h("span", { class: "muted" }, none);
  return h("ul", { class: "plain" }, entries.map(([k, v]) => h("li", {}, code(v ? `${k}=${v}` : k))));
}

// Validity now, from valid_after / valid_until: [word, class] for a badge.
function validity(cert) {
  const now = Date.now();
  if (Date.parse(cert.valid_after) > now) return ["not yet valid", "bad"];
  if (Date.parse(cert.valid_until) < now) return ["expired", "bad"];
  return ["valid", "ok"];
}

function validityCell(cert) {
  const [word, cls] = validity(cert);
  return h("div", {}, h("span", { class: `badge badge-${cls}` }, word),
           h("div", { class: "muted" }, "from ", time(cert.valid_after)),
           h("div", { class: "muted" }, "until ", time(cert.valid_until)));
}

function principalsCell(kind, cert) {
  if (!(cert.principals || []).length) {
    return h("span", { class: "bad" }, kind === "host" ? "every host" : "every user");
  }
  return h("ul", { class: "plain" }, cert.principals.map((p) => h("li", {}, code(p))));
}

function keyCell(kind, cert) {
  return h("div", {},
    h("details", { class: "public-key" }, h("summary", {}, "Signed key ", code(cert.key_type)),
      h("code", { class: "key-value" }, cert.public_key)),
    kind === "user" ? [h("div", { class: "muted" }, "Critical options"), optionList(cert.critical_options, "none"),
                       h("div", { class: "muted" }, "Extensions"), optionList(cert.extensions, "none")] : null);
}

export default {
  route: "ssh_certificates",
  title: "SSH certificates",
  render(container) {
    let cas = []; // the account's SSH CAs: the forms' choices, and who signed a certificate
    let casRead = false; // whether `cas` is what the API has (a CA not in it was deleted)
    const lists = {};
    const forms = {};

    function signedBy(cert) {
      const id = cert.ssh_certificate_authority_id;
      const ca = cas.find((c) => c.id === id);
      return h("div", { class: "muted signed-by" }, "Signed by ", ca && ca.description ? `${ca.description} ` : null, code(id),
               casRead && !ca ? h("div", { class: "bad" }, "That CA was deleted: the certificate authenticates nowhere.") : null);
    }

    function newForm(kind) {
      const spec = KINDS[kind];
      // the examples: now, and the API's default validity after it (what empty fields give)
      const now = Math.floor(Date.now() / 60000) * 60000;
      const fields = [
        field("ssh_certificate_authority_id", "SSH certificate authority", { kind: "select", options: [],
          hint: "The CA that signs it: one of yours (the SSH CAs page creates one)." }),
        field("public_key", "Public key to sign", { kind: "textarea", rows: 3, required: true,
          hint: "One line of an OpenSSH public key file, e.g. ~/.ssh/id_ed25519.pub (ssh-ed25519, ecdsa-sha2-nistp256/384/521 or ssh-rsa)." }),
        field("principals", "Principals", { kind: "textarea", rows: 2, ...spec.principals }),
        field("valid_after", "Valid after", { placeholder: rfc3339(now),
          hint: "RFC 3339 with a zone (Z or an offset). Empty: now." }),
        field("valid_until", "Valid until", { placeholder: rfc3339(now + spec.validity),
          hint: `Empty: ${spec.validityText} after valid after; at most 5 years after it.` })];
      if (kind === "user") {
        fields.push(
          field("critical_options", "Critical options", { kind: "textarea", rows: 2, placeholder: "source-address=203.0.113.0/24",
            hint: "One a line: force-command=<command>, source-address=<addresses or CIDRs, comma-separated>, verify-required (OpenSSH refuses a certificate with any other)." }),
          field("extensions", "Extensions", { kind: "textarea", rows: 2, placeholder: "permit-pty\npermit-port-forwarding",
            hint: "One a line: a name, or name=value. Empty: permit-pty and permit-user-rc. The SSH gateway needs permit-port-forwarding." }));
      }
      fields.push(field("description", "Description"),
                  field("metadata", "Metadata", { hint: "Free text for your own tools (at most 4096 bytes)." }));
      const node = form(`New ${spec.one}`, fields, `Create ${spec.one}`, async (values, f) => {
        const body = { ssh_certificate_authority_id: values.ssh_certificate_authority_id,
                       public_key: values.public_key.trim(), principals: lines(values.principals),
                       valid_after: values.valid_after.trim(), valid_until: values.valid_until.trim(),
                       description: values.description, metadata: values.metadata };
        if (kind === "user") {
          body.critical_options = options(values.critical_options);
          body.extensions = options(values.extensions);
        }
        await api.post(spec.path, body);
        f.reset();
        await lists[kind].reload();
      });
      node.dataset.kind = kind;
      node.classList.add("grid");
      return node;
    }

    // the CA choices of both forms, once the CAs arrived (a form without one cannot submit)
    function fillChoices() {
      for (const node of Object.values(forms)) {
        const choose = node.querySelector("select[name=ssh_certificate_authority_id]");
        const chosen = choose.value;
        clear(choose, cas.map((ca) => h("option", { value: ca.id, selected: ca.id === chosen }, named(ca, ca.key_type))));
        node.querySelector("button[type=submit]").disabled = !cas.length;
      }
    }

    // the CAs are read beside the lists (not before them: no list waits for another read);
    // once there, the rows are drawn again with the CAs' descriptions
    async function readCas() {
      try {
        cas = await everything("/ssh_certificate_authorities", "ssh_certificate_authorities");
        casRead = true;
      } catch (err) {
        cas = [];
        casRead = false;
      }
      fillChoices();
      Object.values(lists).forEach((list) => list.redraw());
    }

    container.append(pageHead("SSH certificates", "Public keys signed by one of your SSH certificate authorities: host certificates for servers, user certificates for people and the SSH gateway. Copy the certificate where it is shown."));
    for (const [kind, spec] of Object.entries(KINDS)) {
      lists[kind] = listView({
        path: spec.path, key: spec.key, what: `SSH ${spec.title.toLowerCase()}`, emptyText: `No SSH ${spec.one} yet.`,
        columns: [{ label: "Certificate", cell: (c) => h("div", {}, describedBy(c), h("div", { class: "muted" }, code(c.id)), signedBy(c)) },
                  { label: "Principals", cell: (c) => principalsCell(kind, c) },
                  { label: "Validity", cell: validityCell },
                  { label: kind === "user" ? "Key and options" : "Key", cell: (c) => keyCell(kind, c) },
                  { label: "Certificate text", cell: (c) => h("div", {}, copyable(c.certificate, `the certificate of ${c.id}`),
                                                             h("p", { class: "hint" }, spec.use)) }],
        actions: (c, reload) => [
          editDescriptionButton(c, spec.path, reload),
          confirmButton("Delete", kind === "user" ? `Delete SSH user certificate ${c.id}? The SSH gateway refuses it from then on.`
                                                  : `Delete SSH host certificate ${c.id}?`,
            async () => { await api.del(`${spec.path}/${c.id}`); await reload(); })],
      });
      lists[kind].node.dataset.list = spec.key;
      forms[kind] = newForm(kind);
      container.append(section(`SSH ${spec.title.toLowerCase()}`, forms[kind], lists[kind].node));
      lists[kind].reload();
    }
    fillChoices();
    readCas();
  },
};
