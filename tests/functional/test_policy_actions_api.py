"""The API checks the traffic policy actions added last (http-request, sse-find-replace,
owasp-crs-*) with the shared core (chalicelib/core/policy) as the edge does: a cloud endpoint
whose policy uses them is created, one whose config breaks a rule is refused naming the
element, and nothing is stored. (The API never loads the OWASP engine: it checks configs.)"""

import json

from chalicelib.core import errors
from tests.functional.test_cloud_endpoints import BASE, _create, _name
from tests.support.contract import assert_error

ANSWER = {"type": "custom-response", "config": {"body": "ok"}}


def _policy(*actions, phase="on_http_request"):
    return json.dumps({phase: [{"actions": [*actions, ANSWER]}]})


def test_an_http_request_policy_is_accepted_and_a_bad_one_refused_at_the_element(api, account):
    good = {
        "type": "http-request",
        "config": {
            "url": "https://lookup.internal/v1?id=${req.url.query_params['id'][0]}",
            "method": "POST",
            "timeout": "30s",
            "max_redirects": 100,
            "retry_condition": "last_attempt.res.status_code >= 500",
        },
    }
    created = _create(account.admin, f"https://{_name()}.{BASE}", traffic_policy=_policy(good))
    assert created.status == 201, created.json
    bad = {"type": "http-request", "config": {"url": "https://lookup.internal/", "timeout": "31s"}}
    body = assert_error(
        _create(account.admin, f"https://{_name()}.{BASE}", traffic_policy=_policy(bad)),
        errors.InvalidCloudPolicy,
        field="traffic_policy",
    )
    assert "on_http_request[0].actions[0].config.timeout" in body["msg"]
    assert len(account.admin.get("/endpoints").json["endpoints"]) == 1


def test_an_event_stream_policy_is_accepted_and_a_bad_one_refused_at_the_element(api, account):
    good = {
        "on_http_request": [{"actions": [ANSWER]}],
        "on_event_stream_message": [
            {
                "expressions": ["res.status_code == 200"],
                "actions": [
                    {
                        "type": "sse-find-replace",
                        "config": {"replacements": [{"field": "retry", "from": "\\d+"}]},
                    }
                ],
            }
        ],
    }
    created = _create(account.admin, f"https://{_name()}.{BASE}", traffic_policy=json.dumps(good))
    assert created.status == 201, created.json
    bad = {
        "on_http_request": [{"actions": [ANSWER]}],
        "on_event_stream_message": [
            {
                "actions": [
                    {
                        "type": "sse-find-replace",
                        "config": {"replacements": [{"field": "id", "from": "x"}]},
                    }
                ]
            }
        ],
    }
    body = assert_error(
        _create(account.admin, f"https://{_name()}.{BASE}", traffic_policy=json.dumps(bad)),
        errors.InvalidCloudPolicy,
        field="traffic_policy",
    )
    assert "on_event_stream_message[0].actions[0].config.replacements[0].field" in body["msg"]


def test_an_owasp_crs_policy_is_accepted_and_a_bad_one_refused_at_the_element(api, account):
    good = _policy(
        {
            "type": "owasp-crs-request",
            "config": {"on_error": "continue", "process_body": True, "exclude_rule_ids": [911100]},
        }
    )
    created = _create(account.admin, f"https://{_name()}.{BASE}", traffic_policy=good)
    assert created.status == 201, created.json
    bad = _policy({"type": "owasp-crs-request", "config": {"exclude_rule_ids": [42]}})
    body = assert_error(
        _create(account.admin, f"https://{_name()}.{BASE}", traffic_policy=bad),
        errors.InvalidCloudPolicy,
        field="traffic_policy",
    )
    assert "on_http_request[0].actions[0].config.exclude_rule_ids[0]" in body["msg"]
