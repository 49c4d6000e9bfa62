"""The traffic inspector's store layout and bounds, shared by the edge (which writes captured
requests) and the API (which reads them: ``/endpoints/{id}/captured_requests``).

| item               | pk                                          | sk          |
|--------------------|---------------------------------------------|-------------|
| captured request   | ``INSPECT#<account id>#<endpoint id>``      | ``req_…``   |
| capture setting    | ``INSPECT#<account id>#<endpoint id>``      | ``settings``|

A captured request carries ``expires_at`` (the table's TTL attribute): it is kept
:data:`TTL_SECONDS` (15 minutes); readers skip expired items. The account is in the key, so
nothing of one account is readable through another's.

Bounds: each edge instance captures at most :data:`PER_MINUTE` (120) requests per endpoint per
minute (more are counted, not kept), so an endpoint holds at most 120 × 15 = 1800 captured
requests per edge instance; one captured request is at most 64 request and 64 response
headers (values cut at 1024 bytes, ``Authorization``, ``Cookie``, ``Set-Cookie`` and
``Proxy-Authorization`` redacted), a target cut at 4096 bytes and, only when the endpoint's
capture setting has ``capture_bodies`` on, the first :data:`BODY_BYTES` (4096) bytes of each
body (``*_body_truncated`` says when more was sent).
"""

TTL_SECONDS = 15 * 60
PER_MINUTE = 120
BODY_BYTES = 4096
SETTINGS_SK = "settings"
KIND = "captured_request"


def pk(account_id: str, endpoint_id: str) -> str:
    return f"INSPECT#{account_id}#{endpoint_id}"
