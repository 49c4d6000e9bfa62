"""ACME challenge answers served by the edge (the worker, chalicelib.acme.worker, stores them).

- **HTTP-01** (RFC 8555 8.3) on the public HTTP listener: ``GET
  /.well-known/acme-challenge/<token>`` for a host whose answer is stored
  (chalicelib.core.acme_orders.http01_answer: 1 GetItem) is answered 200 with the key
  authorization, ahead of any endpoint serving the host; any other request on that path is
  routed as usual (an endpoint may run its own ACME client).
- **TLS-ALPN-01** (RFC 8737) on the HTTPS listener: a ClientHello offering only the
  ``acme-tls/1`` protocol gets, for its SNI name, a self-signed certificate carrying the
  ``acmeIdentifier`` extension (critical, the SHA-256 of the key authorization), and the
  connection is closed after the handshake, as the RFC asks. No stored answer: the handshake
  is refused.
"""

import datetime
import hashlib
import ssl
from typing import Any, Optional

from chalicelib.core import acme_orders as orders
from edge import http1, http_io

ACME_PATH = b"/.well-known/acme-challenge/"
ACME_TLS_ALPN = "acme-tls/1"
ACME_IDENTIFIER_OID = "1.3.6.1.5.5.7.1.31"


async def answer_http01(edge: Any, client: Any, writer: Any, request: Any, host: str) -> bool:
    """Answer an HTTP-01 validation request (True), or leave it to routing (False)."""
    target = request.target
    if request.method != b"GET" or not target.startswith(ACME_PATH):
        return False
    token = target[len(ACME_PATH) :].decode("ascii", "replace")
    try:
        answer = await edge.call(orders.http01_answer, host, token)
    except Exception:  # the store being away: routed as usual, the CA will retry
        return False
    if answer is None:
        return False
    body = answer.encode("ascii")
    for event in (
        http1.Response(
            status_code=200,
            reason=b"OK",
            headers=[
                ("content-type", "text/plain"),
                ("content-length", str(len(body))),
                ("connection", "close"),
            ],
        ),
        http1.Data(data=body),
        http1.EndOfMessage(),
    ):
        await http_io.send(client, writer, event)
    return True


def challenge_context(domain: str, key_authorization: str) -> ssl.SSLContext:
    """The TLS-ALPN-01 server context for ``domain`` (RFC 8737 3)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    digest = hashlib.sha256(key_authorization.encode("ascii")).digest()
    extension = x509.UnrecognizedExtension(
        x509.ObjectIdentifier(ACME_IDENTIFIER_OID), b"\x04\x20" + digest
    )  # DER OCTET STRING
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, domain[:64])])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(domain)]), critical=False)
        .add_extension(extension, critical=True)
        .sign(key, hashes.SHA256())
    )
    from edge.certs import context_from_pem

    ctx = context_from_pem(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    ctx.set_alpn_protocols([ACME_TLS_ALPN])
    return ctx


async def tls_alpn01_context(edge: Any, name: str) -> Optional[ssl.SSLContext]:
    """The challenge context for ``name``, or None when no answer is stored."""
    if not name:
        return None
    try:
        found = await edge.call(orders.challenge, orders.tls_alpn01_sk(name))
    except Exception:
        return None
    if found is None or found.get("domain") != name:
        return None
    return challenge_context(name, found["key_authorization"])
