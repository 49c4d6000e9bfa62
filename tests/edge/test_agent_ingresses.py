"""Agent ingresses on the wire (docs/DATA_PLANE.md, "Agent ingresses"): once the API created
one, the edge's agent listener serves the domain's certificate by SNI, so the official Go SDK
pointed at ``<domain>:<agent port>`` with the edge's CA connects (its connections go to
127.0.0.1, as curl's --resolve: TLS names and verifies the domain), binds and serves; another
account's authtoken is refused there; a domain without an ingress gets the listener's own
certificate, which the SDK refuses; deleting the ingress takes the name off the listener."""

import socket
import ssl
import uuid

from cryptography import x509

from chalicelib.core import edge_errors
from tests.edge.support import bound, credential, wait


def _served_names(edge, name):
    """The DNS names of the certificate the agent listener serves for SNI ``name``, verified
    against the edge's CA (None when it does not verify for ``name``)."""
    context = ssl.create_default_context(cafile=edge.ca_path)
    port = int(edge.server_addr.rsplit(":", 1)[1])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname=name) as tls:
                der = tls.getpeercert(binary_form=True)
    except ssl.SSLCertVerificationError:
        return None
    cert = x509.load_der_x509_certificate(der)
    return cert.extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    ).value.get_values_for_type(x509.DNSName)


def _connect_at(edge, domain):
    port = edge.server_addr.rsplit(":", 1)[1]
    return {"server_addr": f"{domain}:{port}", "connect_to": f"127.0.0.1:{port}"}


def test_an_agent_connects_at_its_accounts_ingress(edge, api, account, go_agents):
    domain = f"connect-{uuid.uuid4().hex[:8]}.example.com"
    assert _served_names(edge, domain) is None  # not an ingress yet: the listener's own
    made = account.admin.post("/agent_ingresses", {"domain": domain})
    assert made.status == 201, made
    assert wait(lambda: _served_names(edge, domain) == [domain])

    agent = go_agents(edge, credential(account)["token"], [{}], **_connect_at(edge, domain))
    (ep,) = bound(agent.start())
    assert edge.public("GET", ep["url"], "/via-ingress").json["path"] == "/via-ingress"

    other = api.new_account()
    refused = go_agents(edge, credential(other)["token"], [{}], **_connect_at(edge, domain))
    events = refused.start()
    error = [e for e in events if e["event"] == "error"][0]
    assert error.get("code") == edge_errors.AUTHTOKEN_INVALID, events
    assert "accepts agents of its own account only" in error["args"][0]

    assert account.admin.delete(f"/agent_ingresses/{made.json['id']}").status == 204
    assert wait(lambda: _served_names(edge, domain) is None)


def test_a_domain_without_an_ingress_is_not_served(edge, account, go_agents):
    domain = f"nowhere-{uuid.uuid4().hex[:8]}.example.com"
    agent = go_agents(
        edge,
        credential(account)["token"],
        [{}],
        connect_timeout=5,
        **_connect_at(edge, domain),
    )
    events = agent.start()
    assert not [e for e in events if e["event"] == "bound"], events
    assert any("certificate" in " ".join(e.get("args", [])) for e in events), events


def test_the_services_dns_server_answers_for_an_ingress_domain(stack, account, tmp_path):
    """The name servers an ingress's ``ns_targets`` name (the service's own DNS server,
    chalicelib.acme.dns, with DNS_INGRESS_ADDRESSES) answer its A and AAAA with the edge's
    addresses and its NS with themselves, within the server's index refresh (5 s) of the
    create and of the delete; a name below it or of no ingress is refused."""
    import dns.flags
    import dns.message
    import dns.query
    import dns.rcode

    from stacks.dns_server import ServiceDns

    server = ServiceDns(
        stack.store_env(),
        str(tmp_path / "dns.log"),
        {"DNS_INGRESS_ADDRESSES": "127.0.0.1, ::1"},
    )

    def ask(name, rdtype="A"):
        query = dns.message.make_query(name, rdtype)
        return dns.query.udp(query, "127.0.0.1", port=server.port, timeout=5)

    def values(reply):
        return sorted(r.to_text() for rrset in reply.answer for r in rrset)

    try:
        domain = f"connect-{uuid.uuid4().hex[:8]}.example.com"
        assert ask(domain).rcode() == dns.rcode.REFUSED
        made = account.admin.post("/agent_ingresses", {"domain": domain})
        assert made.status == 201, made
        assert wait(lambda: ask(domain).rcode() == dns.rcode.NOERROR, timeout=15)
        reply = ask(domain.upper())
        assert reply.flags & dns.flags.AA and values(reply) == ["127.0.0.1"]
        assert values(ask(domain, "AAAA")) == ["::1"]
        assert values(ask(domain, "NS")) == sorted(t + "." for t in made.json["ns_targets"])
        no_data = ask(domain, "MX")
        assert no_data.rcode() == dns.rcode.NOERROR and not no_data.answer
        assert ask(f"below.{domain}").rcode() == dns.rcode.REFUSED
        assert account.admin.delete(f"/agent_ingresses/{made.json['id']}").status == 204
        assert wait(lambda: ask(domain).rcode() == dns.rcode.REFUSED, timeout=15)
    finally:
        server.stop()
