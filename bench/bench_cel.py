"""Compare the CEL libraries on PyPI on the edge's real expressions: compile time and eval time.

Run: ``.venv/bin/python bench/bench_cel.py`` (libraries that are not installed are skipped;
``pip install cel-python common-expression-language cel-expr-python`` to compare all three).

Each library gets the same seven expressions, taken from the hosted service's traffic policy
examples. The hosted service names ``req.url`` a string *and* gives it members
(``req.url.path``); only a library with a type checker and qualified names (cel-expr-python)
can declare both, so the other two get the members as nested maps (the closest they can do).
"eval" is one request: build the variables from a request and evaluate all seven programs, as
the edge does per request. Compile and eval are the mean over many runs, in microseconds.
"""

import statistics
import time

EXPRESSIONS = [
    "req.url.path.startsWith('/api/')",
    "req.method == 'POST' && req.url.path == '/webhooks'",
    "inCidrRange(conn.client_ip, '10.0.0.0/8')",
    "!('x-api-key' in req.headers)",
    "'debug' in req.url.query_params && req.url.query_params['debug'][0] == 'true'",
    "req.headers['user-agent'].exists(ua, ua.matches('(?i).*bot.*'))",
    "conn.client_port > 1024 && req.url.scheme == 'https'",
]
REQUEST = {
    "req.method": "GET",
    "req.url": "https://app.example.com/api/v1/items?debug=true",
    "req.url.path": "/api/v1/items",
    "req.url.scheme": "https",
    "req.url.query_params": {"debug": ["true"]},
    "req.headers": {"user-agent": ["curl/8.5.0"], "accept": ["*/*"], "host": ["app.example.com"]},
    "conn.client_ip": "10.1.2.3",
    "conn.client_port": 51515,
}


def in_cidr_range(ip, cidr):
    import ipaddress

    return ipaddress.ip_address(ip) in ipaddress.ip_network(cidr, strict=False)


def nested(flat):
    out = {}
    for name, value in flat.items():
        node = out
        *parents, leaf = name.split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}  # req.url: the string loses to its members here
            node = node[part]
        if not isinstance(node.get(leaf), dict):
            node[leaf] = value
    return out


def bench_cel_expr_python():
    from cel_expr_python import cel
    from cel_expr_python.ext import ext_strings  # noqa: F401 (the strings extension exists)

    t = cel.Type
    strs = t.Map(t.STRING, t.List(t.STRING))
    env = cel.NewEnv(
        variables={
            "req.method": t.STRING,
            "req.url": t.STRING,
            "req.url.path": t.STRING,
            "req.url.scheme": t.STRING,
            "req.url.query_params": strs,
            "req.headers": strs,
            "conn.client_ip": t.STRING,
            "conn.client_port": t.INT,
        },
        functions=[
            cel.FunctionDecl(
                "inCidrRange",
                [
                    cel.Overload(
                        "inCidrRange_string_string",
                        t.BOOL,
                        [t.STRING, t.STRING],
                        impl=in_cidr_range,
                    )
                ],
            )
        ],
    )
    compile_one = env.compile

    def run(programs):
        activation = env.Activation(dict(REQUEST))  # one per request, shared by its programs
        return [p.eval(activation).value() for p in programs]

    return "cel-expr-python", compile_one, run


def bench_rust_cel():
    import cel

    ctx_functions = {"inCidrRange": in_cidr_range}

    def run(programs):
        ctx = cel.Context(nested(REQUEST), ctx_functions)
        return [p.execute(ctx) for p in programs]

    return "common-expression-language", cel.compile, run


def bench_celpy():
    import celpy

    env = celpy.Environment()
    functions = {"inCidrRange": lambda ip, cidr: celpy.celtypes.BoolType(in_cidr_range(ip, cidr))}

    def compile_one(text):
        return env.program(env.compile(text), functions=functions)

    def run(programs):
        activation = celpy.json_to_cel(nested(REQUEST))
        return [p.evaluate(activation) for p in programs]

    return "cel-python (celpy)", compile_one, run


def measure(factory, rounds=200):
    try:
        name, compile_one, run = factory()
    except ImportError as exc:
        print(f"{factory.__name__}: skipped ({exc})")
        return
    samples = []
    for _ in range(max(3, rounds // 20)):
        start = time.perf_counter()
        programs = [compile_one(text) for text in EXPRESSIONS]
        samples.append((time.perf_counter() - start) / len(EXPRESSIONS))
    compile_us = statistics.mean(samples) * 1e6
    results = run(programs)
    assert [bool(r) for r in results] == [True, False, True, True, True, False, True], results
    start = time.perf_counter()
    for _ in range(rounds):
        run(programs)
    eval_us = (time.perf_counter() - start) / rounds * 1e6
    print(
        f"{name:28s} compile {compile_us:8.0f} us/expression   eval {eval_us:8.1f} us/request "
        f"({len(EXPRESSIONS)} expressions)"
    )


if __name__ == "__main__":
    for factory in (bench_cel_expr_python, bench_rust_cel, bench_celpy):
        measure(factory)
