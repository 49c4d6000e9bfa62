"""Traffic policy engine cost per request, sans-IO: no policy vs a 5-rule policy vs a rate
limit, plus compile time. Run: ``.venv/bin/python bench/bench_policy.py``.

"per request" is what the edge adds for one HTTP request: build the engine's Request from
the parsed head, make a State, run on_http_request (and on_http_response where the policy
has one), and look the compiled policy up by document (compile_policy is cached by digest).
The edge's own per-request cost (sockets, parsing, upstream) comes on top and is measured by
bench/edge_bench; the goal there is the 5-rule policy ≤ 1.3× the no-policy time per request.
"""

import json
import statistics
import time


from chalicelib.core import policy
from chalicelib.core.policy import Conn, Endpoint, Request, Response, engine, ratelimit  # noqa: E402

FIVE_RULES = json.dumps(
    {
        "on_http_request": [
            {
                "name": "admin is private",
                "expressions": ["req.url.path.startsWith('/admin')"],
                "actions": [{"type": "deny", "config": {"status_code": 404}}],
            },
            {
                "name": "api needs a key",
                "expressions": [
                    "req.url.path.startsWith('/api/')",
                    "!('x-api-key' in req.headers)",
                ],
                "actions": [
                    {
                        "type": "custom-response",
                        "config": {"status_code": 401, "body": '{"error": "no key"}'},
                    }
                ],
            },
            {
                "name": "no big uploads",
                "expressions": ["req.method == 'POST'", "req.content_length > 1000000"],
                "actions": [{"type": "deny", "config": {"status_code": 413}}],
            },
            {
                "name": "v1 is v2",
                "expressions": ["req.url.path.startsWith('/v1/')"],
                "actions": [{"type": "url-rewrite", "config": {"from": "/v1/", "to": "/v2/"}}],
            },
            {
                "name": "tell upstream",
                "actions": [
                    {
                        "type": "add-headers",
                        "config": {
                            "headers": {
                                "x-client-ip": "${conn.client_ip}",
                                "x-endpoint": "${endpoint.id}",
                            }
                        },
                    }
                ],
            },
        ]
    }
)
RATE_LIMIT = json.dumps(
    {
        "on_http_request": [
            {
                "actions": [
                    {
                        "type": "rate-limit",
                        "config": {
                            "name": "per ip",
                            "algorithm": "sliding_window",
                            "capacity": 2_000_000_000,
                            "rate": "60s",
                            "bucket_key": ["conn.client_ip"],
                        },
                    }
                ]
            }
        ]
    }
)
# restrict-ips with the same 3 CIDRs inline and through an IP policy (the edge's resolver: a
# dict lookup of rules it read through its cache)
IPP_RULES = [("allow", "203.0.113.0/24"), ("allow", "2001:db8::/32"), ("deny", "203.0.113.9/32")]
RESTRICT_INLINE = json.dumps(
    {
        "on_http_request": [
            {
                "actions": [
                    {
                        "type": "restrict-ips",
                        "config": {
                            "allow": ["203.0.113.0/24", "2001:db8::/32"],
                            "deny": ["203.0.113.9/32"],
                        },
                    }
                ]
            }
        ]
    }
)
RESTRICT_IPP = json.dumps(
    {
        "on_http_request": [
            {"actions": [{"type": "restrict-ips", "config": {"ip_policies": ["ipp_bench"]}}]}
        ]
    }
)
HEAD = [
    ("Host", "app.example.com"),
    ("User-Agent", "curl/8.5.0"),
    ("Accept", "*/*"),
    ("X-Api-Key", "k"),
]
ENDPOINT = Endpoint(
    "ep_bench", "https://app.example.com", "app.example.com", 443, "https", account_id="ac_bench"
)


def one_request(doc, conn, target):
    req = Request.from_target("GET", "https", "app.example.com", target, HEAD)
    if doc is None:
        return req
    p = policy.compile_policy(doc)
    state = p.new_state()
    out = p.on_http_request(conn, req, state)
    if p.has("on_http_response"):
        p.on_http_response(conn, req, Response(200, []), state)
    return out


def _resolver(account_id, policy_id):
    return {("ac_bench", "ipp_bench"): IPP_RULES}.get((account_id, policy_id))


def per_request_us(doc, rounds=20000):
    conn = Conn(
        "203.0.113.7", 50000, "127.0.0.1", 8443, endpoint=ENDPOINT, ip_policy_resolver=_resolver
    )
    targets = ["/api/items?x=1", "/v1/thing", "/", "/static/app.js"]
    for i in range(200):
        one_request(doc, conn, targets[i % 4])
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for i in range(rounds // 5):
            one_request(doc, conn, targets[i % 4])
        samples.append((time.perf_counter() - start) / (rounds // 5) * 1e6)
    return statistics.median(samples)


def compile_ms(doc, rounds=20):
    samples = []
    for _ in range(rounds):
        engine._cache.clear()
        start = time.perf_counter()
        policy.compile_policy(doc)
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


if __name__ == "__main__":
    ratelimit.LIMITER.clear()
    none = per_request_us(None)
    five = per_request_us(FIVE_RULES)
    limit = per_request_us(RATE_LIMIT)
    print(f"no policy (Request only)   {none:7.1f} us/request")
    print(f"5-rule policy              {five:7.1f} us/request  (+{five - none:.1f} us)")
    print(f"rate limit (1 rule)        {limit:7.1f} us/request  (+{limit - none:.1f} us)")
    inline = per_request_us(RESTRICT_INLINE)
    ipp = per_request_us(RESTRICT_IPP)
    print(f"restrict-ips, 3 CIDRs      {inline:7.1f} us/request  (+{inline - none:.1f} us)")
    print(
        f"restrict-ips, ip_policies  {ipp:7.1f} us/request  (+{ipp - none:.1f} us; the same "
        f"3 rules through the resolver)"
    )
    print(
        f"compile 5-rule policy      {compile_ms(FIVE_RULES):7.2f} ms (uncached; cached: "
        f"one sha256 of the document)"
    )
    print(f"compile rate-limit policy  {compile_ms(RATE_LIMIT):7.2f} ms")
