"""conn.tls.client.*: declared with the hosted types, read from the verified client
certificate (chalicelib/core/policy/tlsclient.py), zero values without one; terminate-tls
pauses on_tcp_connect so the rules after it see the handshake."""

import datetime
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from chalicelib.core import policy as tp
from chalicelib.core.policy import PolicyError, tlsclient

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


def make_cert(key=None, serial=0xB53017E79D4A5208, algorithm=None, san=True) -> bytes:
    key = key or ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.STATE_OR_PROVINCE_NAME, "California"),
            x509.NameAttribute(NameOID.LOCALITY_NAME, "Mountain View"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example Corp"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "Web"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "Ops"),
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
        ]
    )
    issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Example CA")])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(NOW)
        .not_valid_after(NOW + datetime.timedelta(days=30))
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, False, False), True
        )
    )
    if san:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("www.example.com"),
                    x509.DNSName("example.com"),
                    x509.IPAddress(ipaddress.ip_address("192.168.1.1")),
                    x509.RFC822Name("alice@example.com"),
                    x509.UniformResourceIdentifier("spiffe://example.com/alice"),
                ]
            ),
            False,
        )
    cert = builder.sign(key, algorithm or hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.DER)


def run(expression: str, der: bytes, phase: str = "on_http_request") -> bool:
    doc = {phase: [{"expressions": [expression], "actions": [{"type": "deny"}]}]}
    policy = tp.compile_policy(doc)
    conn = tp.Conn("1.2.3.4", 5000, tls_client_der=der)
    if phase == "on_tcp_connect":
        return policy.on_tcp_connect(conn).kind == tp.CLOSE
    req = tp.Request.from_target("GET", "https", "h.example", "/", [("host", "h.example")])
    return policy.on_http_request(conn, req, policy.new_state()).kind == tp.RESPOND


DER = make_cert()


@pytest.mark.parametrize(
    "expression",
    [
        "conn.tls.client.subject == 'CN=alice,OU=Ops,OU=Web,O=Example Corp,L=Mountain View,"
        "ST=California,C=US'",
        "conn.tls.client.subject.common_name == 'alice'",
        "conn.tls.client.subject.country == ['US']",
        "conn.tls.client.subject.province == ['California']",
        "conn.tls.client.subject.locality == ['Mountain View']",
        "conn.tls.client.subject.organization == ['Example Corp']",
        "conn.tls.client.subject.organizational_unit == ['Web', 'Ops']",
        "conn.tls.client.subject.postal_code == []",
        "conn.tls.client.subject.street_address == []",
        "conn.tls.client.issuer == 'CN=Example CA'",
        "conn.tls.client.issuer.common_name == 'Example CA'",
        "conn.tls.client.issuer.organization == []",
        "conn.tls.client.san == 'DNS:www.example.com, DNS:example.com, IP Address:192.168.1.1, "
        "email:alice@example.com, URI:spiffe://example.com/alice'",
        "conn.tls.client.san.dns_names == ['www.example.com', 'example.com']",
        "conn.tls.client.san.ip_addresses == ['192.168.1.1']",
        "conn.tls.client.san.email_addresses == ['alice@example.com']",
        "conn.tls.client.san.uris == ['spiffe://example.com/alice']",
        "conn.tls.client.serial_number == 'b53017e79d4a5208'",
        "conn.tls.client.signature_algorithm == 'ECDSA-SHA256'",
        "conn.tls.client.validity.not_before == timestamp('2026-01-02T03:04:05Z')",
        "conn.tls.client.validity.not_after == timestamp('2026-02-01T03:04:05Z')",
        "size(conn.tls.client.extensions) == 2",
        "conn.tls.client.extensions[0].id == '2.5.29.15'",
        "conn.tls.client.extensions[0].critical",
        "conn.tls.client.extensions[0].value == b'\\x03\\x02\\x07\\x80'",
        "!conn.tls.client.extensions[1].critical",
        "conn.tls.client.pem.startsWith('-----BEGIN CERTIFICATE-----')",
        "conn.tls.client.pem.endsWith('-----END CERTIFICATE-----')",
    ],
)
def test_each_variable_reads_the_certificate(expression):
    assert run(expression, DER), expression
    # and on_tcp_connect sees them as well (TLS endpoints after terminate-tls)
    assert run(expression, DER, "on_tcp_connect"), expression


@pytest.mark.parametrize(
    "expression",
    [
        "conn.tls.client.subject == ''",
        "conn.tls.client.subject.common_name == ''",
        "conn.tls.client.subject.organization == []",
        "conn.tls.client.san == ''",
        "conn.tls.client.san.dns_names == []",
        "conn.tls.client.serial_number == ''",
        "conn.tls.client.signature_algorithm == ''",
        "conn.tls.client.extensions == []",
        "conn.tls.client.pem == ''",
        "conn.tls.client.validity.not_after == timestamp('1970-01-01T00:00:00Z')",
    ],
)
def test_without_a_certificate_the_variables_are_empty(expression):
    assert run(expression, b""), expression
    assert run(expression, b"not a certificate"), expression


def test_a_value_that_differs_does_not_match():
    assert not run("conn.tls.client.subject.common_name == 'bob'", DER)
    assert not run("conn.tls.client.serial_number == 'b53017e79d4a5209'", DER)
    other = make_cert(serial=0x0B53017E79D4A5208)  # a leading zero is not written
    assert run("conn.tls.client.serial_number == 'b53017e79d4a5208'", other)


def test_go_names_of_signature_algorithms():
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert tlsclient.fields(make_cert(rsa_key, algorithm=hashes.SHA384()))[
        "signature_algorithm"
    ] == ("SHA384-RSA")
    assert (
        tlsclient.fields(make_cert(algorithm=hashes.SHA512()))["signature_algorithm"]
        == "ECDSA-SHA512"
    )


def test_no_san_extension():
    der = make_cert(san=False)
    assert run("conn.tls.client.san == '' && conn.tls.client.san.uris == []", der)
    assert run("size(conn.tls.client.extensions) == 1", der)


def test_types_are_checked_at_compile_time():
    for bad in (
        "conn.tls.client.subject.organization == 'Example Corp'",  # a list, not a string
        "conn.tls.client.validity.not_after == '2026'",
        "conn.tls.client.serial_number > 3",
        "conn.tls.client.subject.nickname == 'x'",  # no such member
        "conn.tls.server.subject == 'x'",  # the edge's own certificate: not offered
    ):
        with pytest.raises(PolicyError):
            tp.compile_policy({"on_http_request": [{"expressions": [bad], "actions": []}]})


def test_interpolation_of_a_certificate_field():
    policy = tp.compile_policy(
        {
            "on_http_request": [
                {
                    "actions": [
                        {
                            "type": "add-headers",
                            "config": {
                                "headers": {
                                    "x-client-cn": "${conn.tls.client.subject.common_name}",
                                    "x-client-serial": "${conn.tls.client.serial_number}",
                                }
                            },
                        }
                    ]
                }
            ]
        }
    )
    conn = tp.Conn("1.2.3.4", 5000, tls_client_der=DER)
    req = tp.Request.from_target("GET", "https", "h.example", "/", [("host", "h.example")])
    assert policy.on_http_request(conn, req, policy.new_state()).kind == tp.CONTINUE
    assert ("x-client-cn", "alice") in req.headers
    assert ("x-client-serial", "b53017e79d4a5208") in req.headers


def test_terminate_tls_pauses_on_tcp_connect_and_the_rest_sees_the_certificate():
    policy = tp.compile_policy(
        {
            "on_tcp_connect": [
                {"actions": [{"type": "terminate-tls", "config": {"min_version": "1.3"}}]},
                {
                    "expressions": ["conn.tls.client.subject.common_name != 'alice'"],
                    "actions": [{"type": "deny"}],
                },
                {"actions": [{"type": "terminate-tls", "config": {"min_version": "1.2"}}]},
            ]
        }
    ).check_protocol("tls")
    for der, closed in ((DER, False), (make_cert().replace(b"alice", b"bobby"), True)):
        conn = tp.Conn("1.2.3.4", 5000)
        state = policy.new_state()
        out = policy.on_tcp_connect(conn, state)
        assert out.kind == tp.TERMINATE_TLS
        assert out.terminate_tls == {"min_version": "1.3", "max_version": "1.3"}
        conn.tls_version, conn.tls_client_der = "TLSv1.3", der  # the edge's handshake
        out = policy.on_tcp_connect(conn, state)
        # resumed after the first terminate-tls; the second changes nothing once made
        assert out.kind == (tp.CLOSE if closed else tp.CONTINUE)
