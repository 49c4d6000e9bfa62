"""The shared core: the rules the API and the edge both apply, with no Chalice in it.

The Chalice layer (``app.py``, ``chalicelib.web``, the resource modules, the gateway) imports
this package; nothing here imports Chalice or the Chalice layer, and ``edge/`` imports only
this package of ``chalicelib`` (tests/unit/test_house_rules.py holds both to it). The edge's
container installs no Chalice at all.

Modules: ``config`` (settings both planes read), ``ids``, ``errors`` (the API's error catalog),
``store`` (the single DynamoDB table), ``online`` (sessions, endpoints and names held now),
``binding`` (who may bind what), ``acl``, ``hostnames``, ``refs``, ``policy`` (the traffic
policy engine), ``secrets`` (authtokens and their owners), ``reservations`` (reserved domains
and addresses), ``routing`` (edges, routes and backends a request resolves to), ``certs``
(certificate authorities, TLS certificates, key wrapping and ACME challenge answers),
``ip_rules`` and ``abuse``.
"""
