"""Abuse reports: ``/abuse_reports`` (create and get only, as the spec shows).

Fields: id, uri, created_at, urls, metadata, status, hostnames (list of
``{hostname, status}``).

Rules (where the spec is silent, decided here):
- Only accounts marked as abuse reporters (``accounts.is_abuse_reporter``, set by the
  operator command ``set-abuse-reporter``) may call these routes; any other account gets 403
  on every call, before its body or id is looked at. Every principal of a reporter account
  may create and read its reports.
- ``urls`` is required and non-empty: at most ``MAX_URLS`` (100) entries of at most
  ``MAX_URL_BYTES`` (2048) bytes each, each an absolute ``http`` or ``https`` URL with a
  valid host (hostname or IP address) and, when present, a valid port; 400 naming the bad
  URL otherwise. URLs are stored as sent (duplicates too).
- ``hostnames`` holds each distinct host once, in order of first appearance, lower-cased,
  without port (IPv6 without brackets); each starts ``PENDING``.
- ``status`` is derived from the hostnames each time a report is read: ``PENDING`` while all
  are ``PENDING``, ``PROCESSED`` when none is, ``PARTIALLY_PROCESSED`` otherwise.
- The operator sets a hostname's status (``PENDING``, ``BANNED``, ``UNBANNED``, ``IGNORE``)
  with ``python -m chalicelib.admin set-hostname-status --account ACCT --report abrp_…
  --hostname HOST --status BANNED`` (:func:`set_hostname_status`).
- A hostname ``BANNED`` in any report is in the ban index (``abuse.BANNED_PK``, one item per
  hostname naming the reports that ban it, written in the same transaction as the report):
  the edge reads the index every ``EDGE_CHECK_SECONDS``-ish (edge.edges.watch_banned_hosts)
  and refuses the name's traffic (403 ERR_NGROK_3208) and binds. Another status in every
  report that named it lifts the ban. An account without the reporter flag gets 403
  ERR_NGROK_221, the hosted code.
"""

import ipaddress
from typing import Any, Dict, List
from urllib.parse import urlsplit

from chalicelib import accounts, rest, validation
from chalicelib.core import errors, hostnames, ids, store
from chalicelib.validation import METADATA, Field
from chalicelib.web import Ctx
from chalicelib.core import abuse

COLLECTION = "abuse_report"
PREFIX = ids.PREFIXES["abuse_report"]
PATH = "/abuse_reports"
MAX_URLS = 100
MAX_URL_BYTES = 2048
HOSTNAME_STATUSES = ("PENDING", "BANNED", "UNBANNED", "IGNORE")


def _bad_url(name: str, url: Any, why: str) -> errors.InvalidField:
    return errors.InvalidField(
        f"Invalid URL {url!r} in '{name}': {why}", details={"field": "urls", "url": str(url)[:200]}
    )


def url_host(name: str, url: str) -> str:
    """The canonical host of an absolute http(s) URL, or a 400 naming the URL."""
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):  # C0 and DEL
        raise _bad_url(name, url, "it contains whitespace or control characters")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. a bracketed host that is not an IPv6 address
        raise _bad_url(name, url, str(exc)) from None
    if parts.scheme.lower() not in ("http", "https"):
        raise _bad_url(name, url, "it must be an absolute http:// or https:// URL")
    host = parts.hostname or ""
    if not host:
        raise _bad_url(name, url, "it has no host")
    try:
        parts.port
    except ValueError:
        raise _bad_url(name, url, "its port is not a number from 0 to 65535") from None
    if parts.netloc.endswith(":"):
        raise _bad_url(name, url, "its port is empty")
    if "[" in parts.netloc:
        try:
            return ipaddress.IPv6Address(host).compressed
        except ValueError:
            raise _bad_url(name, url, "its bracketed host is not an IPv6 address") from None
    try:
        return hostnames.parse(host)
    except hostnames.InvalidHostname as exc:
        raise _bad_url(name, url, f"its host {exc}") from None


def _check_urls(name: str, value: List[str]) -> List[str]:
    validation.require_non_empty(name, value)
    for index, url in enumerate(value):
        url_host(f"{name}[{index}]", url)
    return value


CREATE_FIELDS = [
    Field(
        "urls",
        "string_list",
        required=True,
        max_items=MAX_URLS,
        max_bytes=MAX_URL_BYTES,
        check=_check_urls,
    ),
    METADATA,
]


def derived_status(hostname_entries: List[Dict[str, str]]) -> str:
    pending = sum(1 for entry in hostname_entries if entry["status"] == "PENDING")
    if pending == len(hostname_entries):
        return "PENDING"
    if pending == 0:
        return "PROCESSED"
    return "PARTIALLY_PROCESSED"


def render(c: Ctx, item: store.Item) -> Dict[str, Any]:
    data = item.data
    entries = [{"hostname": e["hostname"], "status": e["status"]} for e in data["hostnames"]]
    return {
        "id": item.sk,
        "uri": c.uri(f"{PATH}/{item.sk}"),
        "created_at": data["created_at"],
        "urls": list(data["urls"]),
        "metadata": data.get("metadata", ""),
        "status": derived_status(entries),
        "hostnames": entries,
    }


def _require_reporter(c: Ctx) -> None:
    """The flag comes with the caller's key (copied there by chalicelib.auth, so no read);
    a key from before that copy reads the account."""
    reporter = c.principal.abuse_reporter
    if reporter is None:
        reporter = accounts.is_abuse_reporter(c.account_id)
    if not reporter:
        raise errors.NotAbuseReporter(
            f"This is a valid API key, but the account "
            f"{c.account_id} is not authorized to submit or view "
            "abuse reports."
        )


def create(c: Ctx, body: Dict[str, Any]) -> Dict[str, Any]:
    """``body`` is the raw request object: a non-reporter gets 403 before it is parsed."""
    _require_reporter(c)
    fields = validation.parse(body, CREATE_FIELDS)
    seen: List[str] = []
    for index, url in enumerate(fields["urls"]):
        host = url_host(f"urls[{index}]", url)
        if host not in seen:
            seen.append(host)
    report_id = ids.new_id(PREFIX)
    item = store.new_item(
        store.collection_pk(c.account_id, COLLECTION),
        report_id,
        kind=COLLECTION,
        account_id=c.account_id,
        data={
            "urls": fields["urls"],
            "metadata": fields.get("metadata", ""),
            "hostnames": [{"hostname": h, "status": "PENDING"} for h in seen],
            "created_at": validation.now_rfc3339(),
        },
    )
    store.commit([store.put_new(item)])
    return render(c, item)


def get(c: Ctx, report_id: str) -> Dict[str, Any]:
    _require_reporter(c)
    if not ids.is_valid(report_id, PREFIX):
        raise errors.NotFound(f"No abuse report with id '{report_id}' exists")
    return render(c, store.get_resource(c.account_id, COLLECTION, report_id))


@store.retrying
def set_hostname_status(
    account_id: str, report_id: str, hostname: str, status: str
) -> Dict[str, Any]:
    """Operator action: set one hostname's status; returns {id, status, hostnames}."""
    if status not in HOSTNAME_STATUSES:
        raise errors.InvalidField(f"status must be one of {', '.join(HOSTNAME_STATUSES)}")
    if not ids.is_valid(report_id, PREFIX):
        raise errors.NotFound(f"No abuse report with id '{report_id}' exists")
    item = store.get_resource(account_id, COLLECTION, report_id)
    wanted = hostname.strip().lower().strip("[]")
    entries = [dict(e) for e in item.data["hostnames"]]
    for entry in entries:
        if entry["hostname"] == wanted:
            entry["status"] = status
            break
    else:
        raise errors.NotFound(
            f"Abuse report '{report_id}' has no hostname '{hostname}'; it "
            f"has: {', '.join(e['hostname'] for e in entries)}"
        )
    item.data = {**item.data, "hostnames": entries}
    key = f"{account_id}/{report_id}"
    ban = store.get(abuse.BANNED_PK, wanted)
    reports = set((ban.data or {}).get("reports", [])) if ban is not None else set()
    reports = reports | {key} if status == "BANNED" else reports - {key}
    ops = [store.save(item)]
    if reports:
        ops.append(
            store.put_raw(abuse.BANNED_PK, wanted, "banned_host", {"reports": sorted(reports)})
        )
    elif ban is not None:
        ops.append(store.drop(abuse.BANNED_PK, wanted))
    store.commit(ops)
    return {"id": report_id, "status": derived_status(entries), "hostnames": entries}


# Create and get only (the routes in app.py); the create body is parsed by create() itself.
OPS = rest.Ops(prefix=PREFIX, list_key="", create=create, get=get)
