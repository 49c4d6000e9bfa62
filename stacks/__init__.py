"""The processes a developer, a test or a benchmark starts: the API with its embedded store,
an edge, the two together, a cluster, `make run`, the official agents, the device agent and
moto's server, each in one place, with the free ports they listen on.

Tests get them through the fixtures of tests/support/fixtures.py; benchmarks (bench/) and
tools import them from here. So do the pieces both tests and benchmarks use in-process: the
API driven through chalice.test.Client (``inprocess``), accounts in a store (``seed``), store
calls counted per route (``costs``), certificates (``certs``) and a DNS server on the
loopback (``dns_server``); benchmarks import nothing from tests/. The modules that the device
agent's virtualenv imports (its tests run there, without ``requests`` or boto3) use only the
standard library at import time: ``ports``, ``paths``, ``http``, ``process``, ``api``, ``edge``
and ``agents``.
"""
