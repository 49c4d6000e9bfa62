"""chalicelib/core/policy/holding.py and celenv's reads: which request facts a request phase
is a function of (the key of the decisions the compiled core holds), and which policies no
decision of is ever held. Each rule broken at its boundary."""

import pytest

from chalicelib.core.policy import celenv, compile_policy
from chalicelib.core.policy.holding import request_reads
from edge.decided import holds_of

from tests.unit.test_decided_rules import DECIDABLE

REQUEST = "on_http_request"


@pytest.fixture(autouse=True)
def _fresh():
    """Each test reads the facts anew (request_reads is cached per compiled policy, and
    compiled policies per document)."""
    request_reads.cache_clear()
    yield
    request_reads.cache_clear()


def _reads(*expressions, action=None):
    doc = {
        REQUEST: [
            {
                "expressions": list(expressions),
                "actions": [action or {"type": "deny"}],
            }
        ]
    }
    return request_reads(compile_policy(doc))


def test_every_request_phase_variable_is_classified():
    """A variable added later is never held by mistake: each is named, by its name or a
    prefix, with its facts or as read per request (None)."""
    named = set(celenv.VARIABLE_READS)
    for name, (_, phases, _) in celenv.VARIABLES.items():
        if REQUEST not in phases:
            continue
        assert name in named or any(
            name.startswith(prefix) for prefix, _ in celenv.READ_PREFIXES
        ), name


EXPRESSION_FACTS = [
    ("req.method == 'GET'", {"method"}),
    ("req.url.path == '/a'", {"target"}),
    ("req.url.query_params['a'][0] == 'b'", {"target"}),
    ("req.url == 'http://a/'", {"target"}),
    ("req.headers['x-a'][0] == 'b'", {"fields"}),
    ("'x-a' in req.headers", {"field:x-a"}),
    ("!('X-A' in req.headers)", {"field:x-a"}),
    ('"x-d" in req.headers', {"field:x-d"}),  # a literal in double quotes
    ("req.host == 'a'", {"field:host"}),
    ("req.user_agent.is_bot", {"field:user-agent"}),
    ("size(req.cookies) > 0", {"field:cookie"}),
    ("req.content_type == 'text/plain'", {"field:content-type"}),
    ("req.content_length > 3", {"field:content-length"}),
    ("conn.client_ip == '1.2.3.4'", {"peer_ip"}),
    ("conn.geo.country_code == 'DE'", {"peer_ip"}),
    ("conn.client_port == 1", {"peer_port"}),
    ("conn.server_port == 80", {"local"}),
    ("endpoint.port == 80", {"local"}),
    ("conn.tls.sni == 'a'", {"tls"}),
    ("endpoint.id == 'ep_1'", set()),
    ("conn.server_region == 'eu'", set()),
    ("getReqHeader('x-a').size() > 0", {"fields"}),
    ("hasQueryParam('a')", {"target"}),
    ("hasReqCookie('a')", {"field:cookie"}),
    ("req.url.path == '/a' && 'x-b' in req.headers", {"target", "field:x-b"}),
    ("'x-b' in req.headers && req.url.path == '/a'", {"field:x-b", "target"}),
    ("'x-b' in req.headers && 'x-c' in req.headers", {"field:x-b", "field:x-c"}),
    ("req.url.path == '/a' || conn.client_port > 3", {"target", "peer_port"}),
]


@pytest.mark.parametrize("expression,facts", EXPRESSION_FACTS)
def test_an_expression_reads_the_facts_of_its_variables(expression, facts):
    assert celenv.expression_reads(expression, REQUEST) == facts
    assert _reads(expression) == facts


PER_REQUEST = [
    "time.now != ''",
    "conn.ts.start != timestamp('2020-01-01T00:00:00Z')",
    "req.ts.header_received != timestamp('2020-01-01T00:00:00Z')",
    "conn.bytes_in > 0",
    "rand.int(1, 2) == 1",
    "rand.double() > 0.5",
    "rand . int(1, 2) == 1",  # the same call, spaced
    "conn.tls.client.subject.common_name == 'a'",
]


@pytest.mark.parametrize("expression", PER_REQUEST)
def test_an_expression_of_a_clock_counter_chance_or_client_certificate_is_never_held(
    expression,
):
    assert celenv.expression_reads(expression, REQUEST) is None
    assert _reads(expression) is None
    assert _reads("req.url.path == '/a'", expression) is None  # any rule's: the policy's


ACTION_FACTS = [
    ({"type": "add-headers", "config": {"headers": {"x": "1"}}}, set()),
    ({"type": "add-headers", "config": {"headers": {"x": "${conn.client_ip}"}}}, {"peer_ip"}),
    ({"type": "remove-headers", "config": {"headers": ["x"]}}, set()),
    (
        {"type": "custom-response", "config": {"status_code": 200, "body": "${req.method}"}},
        {"method"},
    ),
    ({"type": "deny", "config": {"status_code": 403}}, set()),
    ({"type": "close-connection"}, set()),
    ({"type": "redirect", "config": {"from": "/a", "to": "/b"}}, {"target"}),
    ({"type": "url-rewrite", "config": {"from": "/a", "to": "/b"}}, {"target"}),
    ({"type": "restrict-ips", "config": {"allow": ["10.0.0.0/8"]}}, {"peer_ip"}),
    (
        {"type": "basic-auth", "config": {"credentials": ["user:password1"]}},
        {"field:authorization"},
    ),
    (
        {"type": "set-vars", "config": {"vars": [{"a": {"b": ["${req.url.path}"]}}]}},
        {"target"},
    ),
    # an action's own facts and its templates' together
    (
        {"type": "redirect", "config": {"from": "/a", "to": "/${req.method}"}},
        {"target", "method"},
    ),
    (
        {"type": "restrict-ips", "config": {"allow": ["${req.headers['x-net'][0]}"]}},
        {"peer_ip", "fields"},
    ),
]


def _id(value):
    """A test id that is the same in every process (a set's order is not)."""
    return str(value)[:40] if isinstance(value, dict) else "-".join(sorted(value)) or "nothing"


@pytest.mark.parametrize("action,facts", ACTION_FACTS, ids=_id)
def test_an_action_reads_its_own_facts_and_its_templates(action, facts):
    assert _reads(action=action) == facts


NEVER_HELD = {
    "rate-limit": DECIDABLE["rate-limit"],
    "log": DECIDABLE["log"],
    "restrict-ips with ip_policies": DECIDABLE["restrict-ips with ip_policies"],
    "a vault secret": DECIDABLE["a vault secret"],
    "a clock in a template": {
        "type": "add-headers",
        "config": {"headers": {"x-a": "${time.now}"}},
    },
    "owasp-crs-request": {"type": "owasp-crs-request", "config": {}},
}


@pytest.mark.parametrize("name", sorted(NEVER_HELD))
def test_an_action_that_counts_writes_or_reads_a_cache_is_never_held(name):
    assert _reads(action=NEVER_HELD[name]) is None


def test_a_policys_facts_are_every_rules_and_every_actions_together():
    doc = {
        REQUEST: [
            {"expressions": ["req.method == 'PUT'"], "actions": [{"type": "deny"}]},
            {
                "expressions": ["'x-a' in req.headers", "conn.client_port > 2"],
                "actions": [
                    {"type": "add-headers", "config": {"headers": {"x": "${conn.server_ip}"}}},
                    {"type": "restrict-ips", "config": {"allow": ["10.0.0.0/8"]}},
                ],
            },
        ]
    }
    assert request_reads(compile_policy(doc)) == {
        "method",
        "field:x-a",
        "peer_port",
        "local",
        "peer_ip",
    }


def test_holds_of_names_the_facts_of_a_decided_policy_without_a_response_phase():
    doc = {
        REQUEST: [
            {
                "expressions": ["req.url.path == '/a'"],
                "actions": [{"type": "add-headers", "config": {"headers": {"x": "1"}}}],
            }
        ]
    }
    assert holds_of(compile_policy(doc)) == ["target"]
    assert holds_of(None) is None
    with_response = {
        **doc,
        "on_http_response": [
            {"actions": [{"type": "add-headers", "config": {"headers": {"y": "1"}}}]}
        ],
    }
    assert holds_of(compile_policy(with_response)) is None
    not_decided = {REQUEST: [{"actions": [{"type": "owasp-crs-request", "config": {}}]}]}
    assert holds_of(compile_policy(not_decided)) is None
