"""conn.geo.* and conn.client_ip.* on real traffic: an edge with an operator's category list
(EDGE_IP_CATEGORIES_DIR) and policies the official Python SDK sends. The clients here are on
the loopback, which the database places in no country; the database's answers for public
addresses are pinned in tests/unit/test_policy_ipintel.py."""

import json

import pytest

from stacks.agents import SdkAgent
from tests.edge.test_edge_sdk import _bound, _credential, _host

TOR_GATE = {
    "on_http_request": [
        {
            "expressions": ["conn.client_ip.is_tor_node"],
            "actions": [
                {
                    "type": "custom-response",
                    "config": {
                        "status_code": 451,
                        "body": "tor exit; blocklisted: ${conn.client_ip.is_on_blocklist}",
                    },
                }
            ],
        }
    ]
}
GEO_TAG = {
    "on_http_request": [
        {
            "expressions": ["conn.geo.country_code == ''"],
            "actions": [
                {
                    "type": "add-headers",
                    "config": {
                        "headers": {
                            "x-country": "none",
                            "x-as": "[${conn.client_ip.as.organization}]",
                        }
                    },
                }
            ],
        }
    ]
}


@pytest.fixture(scope="module")
def listed(another_edge, api, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ip-categories")
    (folder / "proxy.anonymous.tor.txt").write_text("127.0.0.1/32\n")
    (folder / "blocklist.example.txt").write_text("127.0.0.0/8\n")
    edge = another_edge({"EDGE_IP_CATEGORIES_DIR": str(folder)})
    binds = [
        {"proto": "http", "options": {"traffic_policy": [json.dumps(doc)]}}
        for doc in (TOR_GATE, GEO_TAG)
    ]
    agent = SdkAgent(edge, _credential(api.new_account())["token"], binds)
    hosts = [_host(b["url"]) for b in _bound(agent.start())]
    yield edge, hosts
    agent.stop()


def test_a_listed_address_is_a_tor_node_and_on_a_blocklist(listed):
    edge, (tor_gate, _) = listed
    got = edge.http("GET", tor_gate, "/echo")
    assert got.status_code == 451 and got.text == "tor exit; blocklisted: true"


def test_the_geo_database_answers_in_the_edge(listed):
    edge, (_, geo_tag) = listed
    got = edge.http("GET", geo_tag, "/echo")
    assert got.status_code == 200
    seen = {k.lower(): v for k, v in got.json()["headers"].items()}
    assert seen["x-country"] == "none" and seen["x-as"] == "[]"
    assert "Traceback" not in edge.log()


def test_the_api_accepts_the_variables_and_refuses_finer_geo(api):
    account = api.new_account()
    ok = account.admin.post(
        "/endpoints",
        {
            "url": "https://geo-ok.tunnels.localhost",
            "type": "cloud",
            "traffic_policy": json.dumps(
                {
                    "on_http_request": [
                        {
                            "expressions": ["conn.geo.country_code in ['US', 'CA']"],
                            "actions": [{"type": "deny"}],
                        },
                        {"actions": [{"type": "custom-response", "config": {"status_code": 200}}]},
                    ]
                }
            ),
        },
    )
    assert ok.status == 201, ok.text
    refused = account.admin.post(
        "/endpoints",
        {
            "url": "https://geo-city.tunnels.localhost",
            "type": "cloud",
            "traffic_policy": json.dumps(
                {
                    "on_http_request": [
                        {
                            "expressions": ["conn.geo.city == 'Paris'"],
                            "actions": [{"type": "deny"}],
                        }
                    ]
                }
            ),
        },
    )
    assert refused.status == 400 and "conn.geo.city" in refused.text
