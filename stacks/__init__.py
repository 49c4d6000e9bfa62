"""The processes a developer, a test or a benchmark starts: the API with its embedded store,
an edge, the two together, a cluster, `make run`, the official agents, the device agent and
moto's server, each in one place, with the free ports they listen on.

Tests get them through the fixtures of tests/support/fixtures.py; benchmarks (bench/) and
tools import them from here. The modules that the device agent's virtualenv imports (its tests
run there, without ``requests`` or boto3) use only the standard library at import time:
``ports``, ``paths``, ``http``, ``process``, ``api``, ``edge`` and ``agents``.
"""
