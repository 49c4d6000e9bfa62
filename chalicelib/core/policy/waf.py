"""owasp-crs-request and owasp-crs-response: the OWASP Core Rule Set run by ModSecurity v3.

The engine is libmodsecurity (ModSecurity v3, the OWASP project's own engine) through the
``libmodsecurity`` wheel on PyPI (it bundles the library); the rules are the Core Rule Set as
Debian packages it (``modsecurity-crs``, CRS 3.3.4, /usr/share/modsecurity-crs; another
directory through EDGE_CRS_DIR). The hosted service runs Coraza with CRS 4.14; this edge runs
the engine and rule set a registry ships here (docs/CONTRACT.md says what differs).

Set up as the hosted defaults: paranoia level 1, an inbound anomaly score threshold of 5 and an
outbound one of 4 (CRS's own defaults), the engine in detection mode with the decision taken
here from the score CRS adds up (``tx.anomaly_score``, ``tx.outbound_anomaly_score``): a score
at or above the threshold is ``deny``. ``process_body``: the first 4 KiB of the body
(BODY_LIMIT, hosted) are inspected, the rest ignored. ``exclude_rule_ids``: one rule set
serves every policy (about 14 MB, built once, on first use: ~0.1-0.3 s); an excluded rule
still runs in the engine, but it neither scores (its severity's points, as CRS adds them:
critical 5, error 4, warning 3, notice 2, are taken off the total) nor is listed. (A rule set
per exclusion list, SecRuleRemoveById, cost 14 MB and a rebuild each: a tenant with many
lists could have made the edge rebuild per request.) REQUEST-910-IP-REPUTATION is not loaded:
it needs GeoIP, which the wheel's engine is built without (its rules are off by default).

The API only checks configs (this module's engine is loaded on the first run, at the edge).
"""

import glob
import os
import threading
from typing import Any, Dict, List, Optional, Tuple

BODY_LIMIT = 4096  # body bytes inspected (hosted: "the first 4kb")
PARANOIA_LEVEL = 1
INBOUND_THRESHOLD = 5
OUTBOUND_THRESHOLD = 4
MAX_EXCLUDED = 1000  # ids in one exclude_rule_ids
RULE_ID_MIN, RULE_ID_MAX = 900000, 999999
CRS_DIR = "/usr/share/modsecurity-crs"
SKIPPED = ("REQUEST-910-IP-REPUTATION.conf",)
SCORE_RULES = (4990001, 4990002)  # this module's rules reporting the scores
NOT_MATCHES = ("949", "959", "980")  # CRS's blocking evaluation and correlation rules
SEVERITY = {0: "EMERGENCY", 1: "ALERT", 2: "CRITICAL", 3: "ERROR", 4: "WARNING", 5: "NOTICE"}
POINTS = {2: 5, 3: 4, 4: 3, 5: 2}  # what CRS adds per severity (critical 5 … notice 2)

SETUP = f"""
SecRuleEngine DetectionOnly
SecRequestBodyAccess On
SecRequestBodyLimit {BODY_LIMIT}
SecRequestBodyNoFilesLimit {BODY_LIMIT}
SecRequestBodyLimitAction ProcessPartial
SecResponseBodyAccess On
SecResponseBodyMimeType text/plain text/html text/xml application/json
SecResponseBodyLimit {BODY_LIMIT}
SecResponseBodyLimitAction ProcessPartial
SecArgumentSeparator &
SecCookieFormat 0
SecDefaultAction "phase:1,log,auditlog,pass"
SecDefaultAction "phase:2,log,auditlog,pass"
SecAction "id:900000,phase:1,nolog,pass,t:none,setvar:tx.paranoia_level={PARANOIA_LEVEL}"
SecAction "id:900110,phase:1,nolog,pass,t:none,\\
  setvar:tx.inbound_anomaly_score_threshold={INBOUND_THRESHOLD},\\
  setvar:tx.outbound_anomaly_score_threshold={OUTBOUND_THRESHOLD}"
SecAction "id:900990,phase:1,nolog,pass,t:none,setvar:tx.crs_setup_version={{version}}"
"""
SCORES = """
SecAction "id:4990001,phase:2,pass,log,msg:'inbound score',logdata:'%{tx.INBOUND}'"
SecAction "id:4990002,phase:4,pass,log,msg:'outbound score',logdata:'%{tx.OUTBOUND}'"
"""
# the totals' names: CRS 3 (tested here: Debian bookworm's 3.3.4) and CRS 4 (not tested here)
TOTALS = {
    "3": ("anomaly_score", "outbound_anomaly_score"),
    "4": ("blocking_inbound_anomaly_score", "blocking_outbound_anomaly_score"),
}


class Unavailable(Exception):
    """The engine or the rules cannot be loaded here; the message says which."""


class _Engine:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.modsec: Any = None
        self.rule_set: Any = None
        self.failure = ""

    def rules(self) -> Any:
        with self.lock:
            if self.rule_set is not None:
                return self.rule_set
            if self.failure:
                raise Unavailable(self.failure)
            try:
                self.rule_set = self._build()
            except Unavailable as exc:
                self.failure = str(exc)
                raise
            return self.rule_set

    def _build(self) -> Any:
        try:
            from libmodsecurity import ModSecurity, RulesSet
        except ImportError:
            raise Unavailable(
                "the OWASP CRS engine is not installed on this edge (the libmodsecurity package)"
            ) from None
        directory = os.environ.get("EDGE_CRS_DIR") or CRS_DIR
        files = [
            f
            for f in sorted(glob.glob(os.path.join(directory, "rules", "*.conf")))
            if os.path.basename(f) not in SKIPPED
        ]
        if not files:
            raise Unavailable(
                f"the OWASP Core Rule Set is not installed on this edge (no rules in {directory})"
            )
        modsec = ModSecurity()
        modsec.set_connector_information("tunnel-edge owasp-crs")
        modsec.set_log_callback(_quiet)  # matches are read per transaction
        rules = RulesSet()
        version = _crs_version(files)
        inbound, outbound = TOTALS.get(version[0], TOTALS["3"])
        if rules.load(SETUP.replace("{version}", version)) < 0:
            raise Unavailable(f"the engine refused its setup: {rules.get_parser_error()[:200]}")
        for path in files:
            if rules.load_from_uri(path) < 0:
                raise Unavailable(f"the engine refused {path}: {rules.get_parser_error()[:200]}")
        if rules.load(SCORES.replace("INBOUND", inbound).replace("OUTBOUND", outbound)) < 0:
            raise Unavailable(
                f"the engine refused its score rules: {rules.get_parser_error()[:200]}"
            )
        self.modsec = modsec
        return rules


def _crs_version(files: List[str]) -> str:
    """The rule set's version as crs-setup.conf states it (3.3.4: 334), read from its rules."""
    import re

    for path in files:
        with open(path, encoding="utf-8", errors="replace") as handle:
            found = re.search(r"OWASP_CRS/(\d+)\.(\d+)\.(\d+)", handle.read())
        if found:
            return "".join(found.groups())
    return "334"


def _quiet(line: str) -> None:  # noqa: ARG001
    """The engine's server log: not written (each match is read from its transaction)."""


ENGINE = _Engine()


class Verdict:
    """What one inspection found: the score, its threshold, the rules that scored."""

    __slots__ = ("score", "threshold", "matched")

    def __init__(self, score: int, threshold: int, matched: List[Dict[str, Any]]) -> None:
        self.score, self.threshold, self.matched = score, threshold, matched

    @property
    def decision(self) -> str:
        return "deny" if self.score >= self.threshold else "allow"


def _verdict(
    transaction: Any, score_rule: int, threshold: int, phases: Tuple[int, ...], excluded: Any
) -> Verdict:
    score = 0
    matched = []
    for message in transaction.get_rule_messages():
        if message.rule_id == score_rule:
            try:
                score += int(message.data or 0)
            except ValueError:
                pass
            continue
        if message.rule_id in SCORE_RULES or str(message.rule_id)[:3] in NOT_MATCHES:
            continue
        if message.severity not in POINTS or message.phase not in phases:
            continue
        if message.rule_id in excluded:
            score -= POINTS[message.severity]  # as if the rule had not run
            continue
        matched.append(
            {
                "id": message.rule_id,
                "message": message.message,
                "severity": SEVERITY.get(message.severity, str(message.severity)),
                "data": message.data,
            }
        )
    return Verdict(max(score, 0), threshold, matched)


def _version(version: str) -> str:
    return version.rpartition("/")[2] or "1.1"


def _request_head(t: Any, conn: Any, req: Any) -> None:
    """The connection and the request's line and headers, into transaction ``t``."""
    t.process_connection(
        conn.client_ip,
        int(conn.client_port),
        conn.server_ip or "127.0.0.1",
        int(conn.server_port),
    )
    t.process_uri(req.target, req.method, _version(req.version))
    for name, value in req.headers:
        t.add_request_header(name, value)
    t.process_request_headers()


def inspect_request(
    conn: Any, req: Any, excluded: Tuple[int, ...], body: Optional[bytes]
) -> Verdict:
    """The request (``body``: its first BODY_LIMIT bytes, None when not inspected)."""
    rules = ENGINE.rules()
    with ENGINE.modsec.transaction(rules) as t:
        _request_head(t, conn, req)
        if body:
            t.append_request_body(body[:BODY_LIMIT])
        t.process_request_body()
        return _verdict(t, SCORE_RULES[0], INBOUND_THRESHOLD, (1, 2), frozenset(excluded))


def inspect_response(
    conn: Any, req: Any, res: Any, excluded: Tuple[int, ...], body: Optional[bytes]
) -> Verdict:
    """The response, in the transaction of its request (CRS reads both)."""
    rules = ENGINE.rules()
    with ENGINE.modsec.transaction(rules) as t:
        _request_head(t, conn, req)
        t.process_request_body()
        for name, value in res.headers:
            t.add_response_header(name, value)
        t.process_response_headers(int(res.status_code), "HTTP/" + _version(req.version))
        if body:
            t.append_response_body(body[:BODY_LIMIT])
        t.process_response_body()
        return _verdict(t, SCORE_RULES[1], OUTBOUND_THRESHOLD, (3, 4), frozenset(excluded))
