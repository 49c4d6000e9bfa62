"""make bench-peers prints each figure with its ratio and its goal, met or not
(bench/edge_bench/bench_peers.py ``GOALS``, ``judged``, ``goal_lines``): the bounds at their
edges, and the lines a run's results give."""

import pytest

from bench.edge_bench.bench_peers import goal_lines, judged


@pytest.mark.parametrize(
    "figure, value, verdict",
    [
        ("edge_cpu_vs_sshd", 1.5, "goal ≤ 1.5×: met"),
        ("edge_cpu_vs_sshd", 1.51, "goal ≤ 1.5×: NOT met"),
        ("rps_vs_ssh", 1.5, "goal ≥ 1.5×: met"),
        ("rps_vs_ssh", 1.49, "goal ≥ 1.5×: NOT met"),
        ("p50_vs_ssh", 1.2, "goal ≤ 1.2×: met"),
        ("https_cpu_vs_nginx", 1.21, "goal ≤ 1.2×: NOT met"),
        ("policy_added_vs_sshd", 1.0, "goal ≤ 1×: met"),
        ("growth_cpu_vs_first", 0.85, "goal ≥ 0.85× and ≤ 1.15×: met"),
        ("growth_cpu_vs_first", 1.16, "goal ≥ 0.85× and ≤ 1.15×: NOT met"),
        ("growth_cpu_vs_first", 0.84, "goal ≥ 0.85× and ≤ 1.15×: NOT met"),
        ("idle_session_kib", 64.0, "goal ≤ 64 KiB: met"),
        ("idle_session_kib", 64.1, "goal ≤ 64 KiB: NOT met"),
        ("rps_vs_ssh", None, "goal ≥ 1.5×: not measured"),
    ],
)
def test_a_figure_is_judged_at_its_goals_bound(figure, value, verdict):
    assert judged(figure, value) == verdict


def _row(rps, p50, **cpu):
    return {"rps": rps, "p50_us": p50, "cpu_us": cpu}


def test_a_runs_results_give_each_figure_with_its_ratio_and_verdict():
    results = {
        "get20": {
            "edge": _row(15000, 900, edge=45.0, sdk=40.0),
            "ssh": _row(10000, 1000, sshd=30.0, ssh=30.0),
        },
        "get1": {
            "edge": _row(5000, 240, edge=100.0, sdk=80.0),
            "ssh": _row(4000, 200, sshd=80.0, ssh=60.0),
        },
        "policy": {"edge": _row(1, 1, edge=45.0), "edge:policy": _row(1, 1, edge=75.0)},
        "growth": {
            "rows": {"3 endpoints": _row(1, 1, edge=50.0), "203 endpoints": _row(1, 1, edge=60.0)},
            "idle_session_kb": 45.0,
            "in_flight_request_kb": 5.0,
        },
    }
    lines = goal_lines(results)
    assert (
        "small GET, 20 connections: edge CPU 45.0 µs per request = 1.50× sshd's 30.0" in lines[0]
    )
    assert lines[0].count("goal ≤ 1.5×: met") == 1
    assert "requests/s 15000 = 1.50× ssh -R's 10000 (goal ≥ 1.5×: met)" in lines[1]
    assert "1.25× sshd's 80.0 (goal ≤ 1.5×: met" in lines[2]
    assert "p50 240 µs = 1.20× ssh -R's 200 µs (goal ≤ 1.2×: met)" in lines[4]
    policy = [line for line in lines if line.startswith("5-rule policy")][0]
    assert "added per request 30.0 µs" in policy and "= 1.00× sshd's whole request" in policy
    assert "goal ≤ 1×: met" in policy
    grown = [line for line in lines if line.startswith("growth, 203 endpoints")][0]
    assert "1.20× what it was with 3 endpoints (" in grown and "NOT met" in grown
    assert lines[-1].startswith("memory per idle agent session: 45.0 KiB (goal ≤ 64 KiB: met)")


def test_the_tls_cases_are_judged_against_nginx():
    results = {
        "mtls": {"edge": _row(1, 1, edge=600.0), "nginx": _row(1, 1, nginx=500.0)},
        "https": {"edge": _row(1, 1, edge=180.0), "nginx": _row(1, 1, nginx=180.0)},
    }
    lines = goal_lines(results)
    assert (
        "mutual TLS, new connection per request: edge CPU 600 µs = 1.20× nginx's 500 µs "
        "(goal ≤ 1.2×: met)" in lines
    )
    assert (
        "HTTPS, new TLS connection per request: edge CPU 180 µs = 1.00× nginx's 180 µs "
        "(goal ≤ 1.2×: met)" in lines
    )
    assert len(goal_lines({"mtls": {}})) == len(goal_lines({}))  # skipped: no line
