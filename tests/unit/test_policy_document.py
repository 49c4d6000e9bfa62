"""Traffic policy documents: shape, limits, CEL and action checks, each refusal naming the
element (chalicelib.core.policy, as the API and the edge use it)."""

import json

import pytest

from chalicelib import traffic_policy
from chalicelib.core import errors, policy
from chalicelib.core.policy import PolicyError, compile_policy
from tests.support.policy import rule

DENY = {"type": "deny"}


def refused(doc) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        compile_policy(doc if isinstance(doc, str) else json.dumps(doc))
    return info.value


def test_empty_documents_mean_no_rules():
    for doc in ("", "{}", "null", "on_http_request: []", "on_http_request:"):
        p = compile_policy(doc)
        assert not any(p.has(phase) for phase in policy.PHASES)


def test_yaml_and_json_documents_compile_to_the_same_rules():
    yaml_doc = (
        "on_http_request:\n  - expressions: [\"req.method == 'GET'\"]\n"
        "    actions:\n      - type: deny\n"
    )
    json_doc = json.dumps({"on_http_request": [rule(DENY, expressions=["req.method == 'GET'"])]})
    assert len(compile_policy(yaml_doc).phases["on_http_request"]) == 1
    assert len(compile_policy(json_doc).phases["on_http_request"]) == 1


def test_compiled_policies_are_cached_by_document_digest():
    doc = json.dumps({"on_http_request": [rule(DENY, name="cache-test")]})
    assert compile_policy(doc) is compile_policy(doc)
    assert compile_policy(doc) is not compile_policy(doc + " ")


@pytest.mark.parametrize("count, ok", [(64, True), (65, False)])
def test_rules_per_phase_limit(count, ok):
    doc = {"on_http_request": [rule(DENY) for _ in range(count)]}
    if ok:
        assert len(compile_policy(json.dumps(doc)).phases["on_http_request"]) == 64
    else:
        error = refused(doc)
        assert error.path == "on_http_request" and "limit is 64" in error.message


def _padded(size: int) -> str:
    body = json.dumps({"on_http_request": [rule(DENY)]})
    return body + " " * (size - len(body))


@pytest.mark.parametrize("size, ok", [(16384, True), (16385, False)])
def test_document_size_limit(size, ok):
    doc = _padded(size)
    assert len(doc.encode()) == size
    if ok:
        compile_policy(doc)
    else:
        assert "limit is 16384 bytes" in refused(doc).message


@pytest.mark.parametrize("n, ok", [(32, True), (33, False)])
def test_expressions_per_rule_limit(n, ok):
    doc = {"on_http_request": [rule(DENY, expressions=["true"] * n)]}
    if ok:
        compile_policy(json.dumps(doc))
    else:
        assert refused(doc).path == "on_http_request[0].expressions"


@pytest.mark.parametrize("n, ok", [(1024, True), (1025, False)])
def test_expression_size_limit(n, ok):
    expression = "req.method == '" + "x" * (n - 16) + "'"
    assert len(expression) == n
    doc = {"on_http_request": [rule(DENY, expressions=[expression])]}
    if ok:
        compile_policy(json.dumps(doc))
    else:
        assert refused(doc).path == "on_http_request[0].expressions[0]"


@pytest.mark.parametrize("n, ok", [(32, True), (33, False)])
def test_actions_per_rule_limit(n, ok):
    doc = {"on_http_request": [rule(*[{"type": "log", "config": {"metadata": {"a": "b"}}}] * n)]}
    if ok:
        compile_policy(json.dumps(doc))
    else:
        assert refused(doc).path == "on_http_request[0].actions"


@pytest.mark.parametrize("n, ok", [(255, True), (256, False)])
def test_rule_name_limit(n, ok):
    doc = {"on_http_request": [rule(DENY, name="n" * n)]}
    if ok:
        compile_policy(json.dumps(doc))
    else:
        assert refused(doc).path == "on_http_request[0].name"


@pytest.mark.parametrize(
    "doc, path, words",
    [
        ("[1, 2]", "", "top level"),
        ('{"on_nothing": []}', "", "unknown phase"),
        ('{"on_http_request": {"actions": []}}', "on_http_request", "list of rules"),
        ('{"on_http_request": [{"name": "x"}]}', "on_http_request[0].actions", "non-empty"),
        (
            '{"on_http_request": [{"actions": [], "extra": 1}]}',
            "on_http_request[0]",
            "unknown key",
        ),
        (
            '{"on_http_request": [{"actions": [{"config": {}}]}]}',
            "on_http_request[0].actions[0].type",
            "non-empty string",
        ),
        (
            '{"on_http_request": [{"actions": [{"type": "deny", "config": 5}]}]}',
            "on_http_request[0].actions[0].config",
            "mapping",
        ),
        ("not: [valid", "", "neither JSON nor YAML"),
        ("[" * 5000, "", "nested too deeply"),
    ],
)
def test_bad_shapes_are_refused_naming_the_element(doc, path, words):
    error = refused(doc)
    assert error.path == path and words in error.message


@pytest.mark.parametrize(
    "kind",
    [
        "oidc",
        "saml",
        "ai-gateway",
    ],
)
def test_documented_actions_this_service_does_not_run_are_refused_by_name(kind):
    error = refused({"on_http_request": [rule({"type": kind})]})
    assert error.path == "on_http_request[0].actions[0].type"
    assert f"'{kind}' is not supported" in error.message


def test_unknown_action_type_is_refused():
    error = refused({"on_http_request": [rule(DENY, {"type": "teleport"})]})
    assert error.path == "on_http_request[0].actions[1].type"
    assert "unknown action type 'teleport'" in error.message


@pytest.mark.parametrize(
    "phase, kind",
    [
        ("on_http_response", "deny"),
        ("on_tcp_connect", "add-headers"),
        ("on_http_response", "redirect"),
        ("on_tcp_connect", "rate-limit"),
        ("on_http_request", "compress-response"),
        ("on_http_response", "basic-auth"),
        ("on_http_response", "forward-internal"),
    ],
)
def test_actions_are_refused_in_phases_they_do_not_run_in(phase, kind):
    error = refused({phase: [rule({"type": kind})]})
    assert error.path == f"{phase}[0].actions[0].type" and "cannot run in" in error.message


@pytest.mark.parametrize(
    "phase, expression, words",
    [
        ("on_http_request", "req.nope == 1", "undeclared reference to 'req.nope'"),
        ("on_http_request", "req.url.path.nope", "select"),
        ("on_http_request", "req.method ==", "Syntax error"),
        ("on_http_request", "req.method", "must evaluate to a bool"),
        ("on_http_request", "noSuchMacro(req.method)", "undeclared reference to 'noSuchMacro'"),
        ("on_tcp_connect", "req.method == 'GET'", "undeclared reference to 'req.method'"),
        ("on_http_request", "res.status_code == 200", "undeclared reference to 'res.status_code'"),
        ("on_http_request", "conn.geo.city == 'Paris'", "undeclared reference"),
        ("on_http_request", "getResHeader('x') == []", "undeclared reference to 'getResHeader'"),
        ("on_http_request", "'x' + 1 == 'x1'", "no matching overload"),
    ],
)
def test_bad_cel_is_refused_naming_the_expression(phase, expression, words):
    error = refused(
        {
            phase: [
                rule(
                    DENY
                    if phase != "on_http_response"
                    else {"type": "log", "config": {"metadata": {"a": "b"}}},
                    expressions=["true", expression],
                )
            ]
        }
    )
    assert error.path == f"{phase}[0].expressions[1]"
    assert words in error.message


def test_bad_interpolation_is_refused_naming_the_config_field():
    error = refused(
        {
            "on_http_request": [
                rule({"type": "custom-response", "config": {"body": "hi ${req.nope}"}})
            ]
        }
    )
    assert error.path == "on_http_request[0].actions[0].config.body"
    assert "req.nope" in error.message
    error = refused(
        {
            "on_http_request": [
                rule({"type": "add-headers", "config": {"headers": {"x-a": "${conn.client_ip"}}})
            ]
        }
    )
    assert error.path == "on_http_request[0].actions[0].config.headers.x-a"


def test_unknown_config_fields_are_refused():
    error = refused({"on_http_request": [rule({"type": "deny", "config": {"status": 403}})]})
    assert error.path == "on_http_request[0].actions[0].config.status"


def test_api_validation_reports_the_field_and_element_as_a_400():
    doc = json.dumps({"on_http_request": [rule({"type": "deny", "config": {"status_code": "x"}})]})
    with pytest.raises(errors.InvalidField) as info:
        traffic_policy.check_document("traffic_policy.value", doc)
    assert info.value.status_code == 400
    assert info.value.details["field"] == "traffic_policy.value"
    assert "on_http_request[0].actions[0].config.status_code" in info.value.msg
    assert traffic_policy.check_document("v", "{}") == "{}"
    with pytest.raises(errors.InvalidField):
        traffic_policy.check_document("v", 5)
