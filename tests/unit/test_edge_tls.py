"""edge.tls on its own: the ClientHello's server name, what each name requires (TlsSpec), the
contexts made for it (cached by what makes them), and the HTTPS listener's handshakes over
real sockets (minimum version, client certificates), with an in-memory edge."""

import asyncio
import base64
import hashlib
import socket
import ssl

import pytest
from cryptography.hazmat.primitives import serialization

from chalicelib import edge_modules
from chalicelib.core import binding, store
from edge import certs, tls, tls_spec
from edge.registry import Registry
from stacks.certs import make_ca, make_client_cert, pem


# ---- helpers ------------------------------------------------------------------------------------
def _client_hello(server_hostname, maximum=None):
    ctx = ssl.create_default_context()
    if maximum is not None:
        ctx.maximum_version = maximum
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


# ---- the server name of a ClientHello ---------------------------------------------------------
@pytest.mark.parametrize(
    "maximum, versions", [(None, {0x0304, 0x0303}), (ssl.TLSVersion.TLSv1_2, {0x0303})]
)
def test_server_name_and_versions_are_read_from_a_real_client_hello(maximum, versions):
    record = _client_hello("Api.Example.COM", maximum)
    assert tls.record_length(record) == len(record)
    assert tls.client_hello(record) == ("api.example.com", versions)


def test_client_hello_without_sni_or_cut_short_has_no_server_name():
    assert tls.client_hello(_client_hello(None))[0] == ""
    record = _client_hello("a.example.com")
    assert tls.client_hello(record[:60]) == ("", set())
    assert tls.client_hello(b"GET / HTTP/1.1\r\n\r\n") == ("", set())


def test_record_length_waits_for_a_header_and_gives_up_on_non_tls():
    assert tls.record_length(b"") is None
    assert tls.record_length(b"\x16\x03\x01\x02") is None  # 4 of the 5 header bytes
    assert tls.record_length(b"\x16\x03\x01\x02\x00") == 5 + 512
    assert tls.record_length(b"G") == 0
    assert tls.record_length(b"GET / HTTP/1.1") == 0


def test_peek_waits_for_a_trickled_client_hello_and_consumes_nothing():
    record = _client_hello("slow.example.com")

    async def scenario():
        left, right = socket.socketpair()
        left.setblocking(False)
        peek = asyncio.ensure_future(tls.peek_hello(left, timeout=5))
        for part in (record[:3], record[3:40], record[40:]):
            await asyncio.sleep(0.05)
            assert not peek.done()
            right.send(part)
        hello = await peek
        rest = left.recv(len(record) + 10)  # still all there for the TLS layer
        quiet_left, quiet_right = socket.socketpair()
        quiet_left.setblocking(False)
        quiet_right.send(record[:20])  # never completed
        started = asyncio.get_running_loop().time()
        cut = await tls.peek_hello(quiet_left, timeout=0.3)
        waited = asyncio.get_running_loop().time() - started
        right.send(b"GET / HTTP/1.1\r\n\r\n")
        plain = await tls.peek_hello(left, timeout=5)
        for sock in (left, right, quiet_left, quiet_right):
            sock.close()
        return hello, rest, cut, waited, plain

    hello, rest, cut, waited, plain = _run(scenario())
    assert hello == record and rest == record
    assert cut == b"" and 0.3 <= waited < 1.0
    assert plain == b""


# ---- what a name requires ----------------------------------------------------------------------
@pytest.mark.parametrize("version", [None, "1.0", "1.1", "1.2"])
def test_min_version_up_to_1_2_is_the_default_handshake(version):
    assert tls_spec.spec_of(version, None).key == tls_spec.DEFAULT.key


def test_min_version_1_3_and_ca_sets_make_distinct_specs():
    ca1, ca2 = pem(make_ca("one")[1]), pem(make_ca("two")[1])
    assert tls_spec.spec_of("1.3", None).min_version == ssl.TLSVersion.TLSv1_3
    assert tls_spec.spec_of("1.3", None).key != tls_spec.DEFAULT.key
    assert tls_spec.spec_of(None, [ca1, ca2]).key == tls_spec.spec_of(None, [ca2, ca1]).key
    assert tls_spec.spec_of(None, [ca1]).key != tls_spec.spec_of(None, [ca1, ca2]).key
    assert tls_spec.spec_of(None, [ca1]).mutual and not tls_spec.spec_of("1.3", None).mutual
    assert tls_spec.spec_of(None, []).mutual  # every CA gone: still required, none can pass


def test_bind_option_takes_pem_or_der_and_refuses_anything_else():
    ca = make_ca("bind")[1]
    as_pem = {"mutual_tls_ca": base64.b64encode(pem(ca).encode()).decode()}
    as_der = {
        "mutual_tls_ca": base64.b64encode(ca.public_bytes(serialization.Encoding.DER)).decode()
    }
    assert tls_spec.spec_of_bind(as_pem).mutual and tls_spec.spec_of_bind(as_der).mutual
    assert tls_spec.spec_of_bind(None) is None and tls_spec.spec_of_bind({}) is None
    for bad in (
        {"mutual_tls_ca": base64.b64encode(b"not a certificate").decode()},
        {"mutual_tls_ca": "%%%"},
        {"mutual_tls_ca": ""},
    ):
        with pytest.raises(binding.Refused) as refused:
            tls_spec.spec_of_bind(bad)
        assert refused.value.code == "ERR_NGROK_1602"


# ---- contexts, cached by what makes them --------------------------------------------------------
def test_contexts_are_cached_by_names_version_and_ca_set(tmp_path):
    certificates = certs.ServerCertificates(str(tmp_path))
    ca = pem(make_ca("c")[1])
    plain = certificates.context_for(["a.example.com"])
    assert certificates.context_for(["a.example.com"], tls_spec.DEFAULT) is plain
    assert certificates.context_for(["a.example.com"], tls_spec.spec_of("1.2", None)) is plain
    strict = certificates.context_for(["a.example.com"], tls_spec.spec_of("1.3", None))
    assert strict is not plain and strict.minimum_version == ssl.TLSVersion.TLSv1_3
    assert certificates.context_for(["a.example.com"], tls_spec.spec_of("1.3", None)) is strict
    mutual = certificates.context_for(["a.example.com"], tls_spec.spec_of(None, [ca]))
    assert mutual.verify_mode == ssl.CERT_REQUIRED and plain.verify_mode == ssl.CERT_NONE
    assert mutual.cert_store_stats()["x509_ca"] == 1
    assert certificates.context_for(["b.example.com"]) is not plain


def test_context_cache_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(certs, "HOST_CACHE", 2)
    certificates = certs.ServerCertificates(str(tmp_path))
    first = certificates.context_for(["a.example.com"])
    certificates.context_for(["b.example.com"])
    assert certificates.context_for(["a.example.com"]) is first  # 2 fit
    certificates.context_for(["c.example.com"])  # b is the oldest use
    certificates.context_for(["d.example.com"])  # now a is
    assert certificates.context_for(["a.example.com"]) is not first


# ---- the TLS index: one item per protected hostport, in the edge's transaction -------------------
def test_tls_index_ops_follow_the_edge_modules():
    hps = ["a.example.com:443", "b.example.com:443"]
    mtls = {"enabled": True, "certificate_authority_ids": ["ca_1"]}
    assert edge_modules.tls_index_ops("acct", "edg", {}, {"hostports": hps}) == []
    assert (
        edge_modules.tls_index_ops(
            "acct",
            "edg",
            {},
            {"hostports": hps, "tls_termination": {"enabled": True, "min_version": None}},
        )
        == []
    )
    puts = edge_modules.tls_index_ops("acct", "edg", {}, {"hostports": hps, "mutual_tls": mtls})
    assert [(op.action, op.raw["Item"]["sk"]["S"]) for op in puts] == [
        ("put", hps[0]),
        ("put", hps[1]),
    ]
    assert store.from_av(puts[0].raw["Item"]["data"]) == {
        "account_id": "acct",
        "edge_id": "edg",
        "certificate_authority_ids": ["ca_1"],
    }
    old = {"hostports": hps, "mutual_tls": mtls}
    moved = edge_modules.tls_index_ops("acct", "edg", old, {**old, "hostports": hps[1:]})
    assert [
        (op.action, (op.item.sk if op.item else op.raw["Item"]["sk"]["S"])) for op in moved
    ] == [("delete", hps[0]), ("put", hps[1])]
    disabled = edge_modules.tls_index_ops(
        "acct", "edg", old, {**old, "mutual_tls": {**mtls, "enabled": False}}
    )
    assert [op.action for op in disabled] == ["delete", "delete"]
    assert [op.action for op in edge_modules.tls_index_ops("acct", "edg", old, {})] == [
        "delete",
        "delete",
    ]


# ---- the HTTPS listener, over real sockets ----------------------------------------------------
class _Edge:
    """What HttpsListener and TlsSettings use of the edge."""

    def __init__(self, folder, index=None, pems=None):
        self.certs = certs.ServerCertificates(folder)
        self.registry = Registry()
        self.connections = set()
        self.index = index or {}
        self.pems = pems or {}
        self.calls = []
        self.tls = tls.TlsSettings(self, refresh_seconds=0.05)

    async def call(self, func, *args):
        if func.__name__ == "tls_index":
            return dict(self.index)
        if func.__name__ == "tls_edges":
            return {}
        account_id, ca_ids = args
        self.calls.extend(ca_ids)
        return {c: self.pems[c] for c in ca_ids if c in self.pems}


def _run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


async def _serve(edge):
    async def handler(reader, writer):
        writer.write(b"served:" + repr(writer.tls_spec.key).encode())
        await writer.drain()
        writer.close()

    listener = tls.HttpsListener(
        edge, handler, ["edge.example.com"], lambda name: True, handshake_timeout=5
    )
    return await asyncio.get_running_loop().create_server(listener.protocol, "127.0.0.1", 0)


async def _connect(port, name, ca_path, maximum=None, cert=None, tmp=None):
    ctx = ssl.create_default_context(cafile=ca_path)
    if maximum is not None:
        ctx.maximum_version = maximum
    if cert is not None:
        path = tmp / f"client-{hashlib.sha256(cert[0]).hexdigest()[:8]}.pem"
        path.write_bytes(cert[0] + cert[1])
        ctx.load_cert_chain(str(path))
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=ctx, server_hostname=name
        )
        data = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        return data.decode() or "closed"
    except (ssl.SSLError, ConnectionError) as exc:
        return f"refused: {exc}"


def test_listener_enforces_min_version_and_client_certificates_per_name(tmp_path):
    ca = make_ca("allowed")
    other = make_ca("other")
    index = {
        "strict.example.com:443": {"account_id": "acct", "edge_id": "e1", "min_version": "1.3"},
        "mtls.example.com:443": {
            "account_id": "acct",
            "edge_id": "e2",
            "certificate_authority_ids": ["ca_1"],
        },
        "gone.example.com:443": {
            "account_id": "acct",
            "edge_id": "e3",
            "certificate_authority_ids": ["ca_deleted"],
        },
        "other-port.example.com:8443": {
            "account_id": "acct",
            "edge_id": "e4",
            "min_version": "1.3",
        },
    }
    edge = _Edge(str(tmp_path / "edge"), index, {"ca_1": pem(ca[1])})
    ca_path = edge.certs.ca_path

    async def scenario():
        server = await _serve(edge)
        watcher = asyncio.ensure_future(edge.tls.watch())
        port = server.sockets[0].getsockname()[1]
        try:
            results = {
                "strict 1.2": await _connect(
                    port, "strict.example.com", ca_path, ssl.TLSVersion.TLSv1_2
                ),
                "strict 1.3": await _connect(port, "strict.example.com", ca_path),
                "plain 1.2": await _connect(
                    port, "plain.example.com", ca_path, ssl.TLSVersion.TLSv1_2
                ),
                "port 1.2": await _connect(
                    port, "other-port.example.com", ca_path, ssl.TLSVersion.TLSv1_2
                ),
                "mtls none": await _connect(port, "mtls.example.com", ca_path),
                "mtls other": await _connect(
                    port, "mtls.example.com", ca_path, cert=make_client_cert(other), tmp=tmp_path
                ),
                "mtls good": await _connect(
                    port, "mtls.example.com", ca_path, cert=make_client_cert(ca), tmp=tmp_path
                ),
                "gone good": await _connect(
                    port, "gone.example.com", ca_path, cert=make_client_cert(ca), tmp=tmp_path
                ),
            }
            # the module removed: in force on the next connection after a refresh
            del edge.index["mtls.example.com:443"]
            for _ in range(500):  # a refresh has read it (0.05 s apart; bound 5 s under load)
                if not any(host.startswith("mtls.") for host in edge.tls.by_host):
                    break
                await asyncio.sleep(0.01)
            results["removed none"] = await _connect(port, "mtls.example.com", ca_path)
            return results
        finally:
            watcher.cancel()
            server.close()

    results = _run(scenario())
    assert results["strict 1.2"].startswith("refused"), results
    assert "VERSION" in results["strict 1.2"], results  # a protocol_version alert
    assert results["strict 1.3"].startswith("served:(772,"), results
    assert results["plain 1.2"].startswith("served:(771, '')"), results
    assert results["port 1.2"].startswith("served:"), results  # only :443 hostports
    assert results["mtls none"].startswith(("refused", "closed")), results
    assert results["mtls other"].startswith(("refused", "closed")), results
    assert results["mtls good"].startswith("served:(771, 'pem:"), results
    assert results["gone good"].startswith(("refused", "closed")), results
    assert results["removed none"].startswith("served:(771, '')"), results
    # a CA's PEM is read once, however many refreshes; a missing one is asked again
    assert edge.calls.count("ca_1") == 1 and edge.calls.count("ca_deleted") > 1


def test_a_request_is_misdirected_when_its_host_needs_another_handshake(tmp_path):
    ca = pem(make_ca("m")[1])
    edge = _Edge(str(tmp_path))
    edge.tls.by_host = {
        "strict.example.com": tls_spec.spec_of("1.3", None),
        "mtls.example.com": tls_spec.spec_of(None, [ca]),
        "floor.example.com": tls_spec.spec_of("1.2", None),
    }
    strict, mutual = edge.tls.by_host["strict.example.com"], edge.tls.by_host["mtls.example.com"]
    assert edge.tls.misdirected(strict, "strict.example.com") is None
    assert edge.tls.misdirected(tls_spec.spec_of("1.3", None), "strict.example.com") is None
    assert edge.tls.misdirected(mutual, "mtls.example.com") is None
    assert edge.tls.misdirected(strict, "mtls.example.com")  # another handshake
    assert edge.tls.misdirected(tls_spec.DEFAULT, "mtls.example.com")
    assert edge.tls.misdirected(None, "mtls.example.com")  # plain HTTP
    assert edge.tls.misdirected(None, "strict.example.com")
    for name in ("plain.example.com", "floor.example.com"):  # nothing asked
        assert edge.tls.misdirected(None, name) is None
        assert edge.tls.misdirected(mutual, name) is None


def test_settings_stay_in_force_while_the_store_cannot_be_read(tmp_path):
    edge = _Edge(
        str(tmp_path),
        {"strict.example.com:443": {"account_id": "acct", "edge_id": "e", "min_version": "1.3"}},
    )

    async def scenario():
        await edge.tls.refresh()
        before = edge.tls.spec_for("strict.example.com")

        async def failing(func, *args):
            raise ConnectionError("store away")

        edge.call = failing
        watcher = asyncio.ensure_future(edge.tls.watch())
        await asyncio.sleep(0.15)
        watcher.cancel()
        return before, edge.tls.spec_for("strict.example.com")

    before, during = _run(scenario())
    assert before.min_version == during.min_version == ssl.TLSVersion.TLSv1_3


def test_the_ca_cache_holds_exactly_what_the_index_references(tmp_path):
    """Every referenced CA stays cached (read once), whatever the number of accounts; one no
    longer referenced is dropped (it was a whole-cache clear past a bound, which could leave
    an mTLS name without its CAs until the next refresh)."""

    def entry(account, cas):
        return {"account_id": account, "edge_id": "e", "certificate_authority_ids": cas}

    index = {f"m{i}.example.com:443": entry(f"acct{i}", [f"ca_{i}"]) for i in range(50)}
    edge = _Edge(str(tmp_path), index, {f"ca_{i}": f"pem {i}\n" for i in range(50)})

    async def scenario():
        await edge.tls.refresh()
        await edge.tls.refresh()
        first = dict(edge.tls._pems)
        del edge.index["m0.example.com:443"]
        await edge.tls.refresh()
        return first, dict(edge.tls._pems)

    first, after = _run(scenario())
    assert len(first) == 50 and sorted(edge.calls) == sorted(f"ca_{i}" for i in range(50))
    assert ("acct0", "ca_0") not in after and len(after) == 49
    assert edge.tls.spec_for("m7.example.com").key != tls_spec.DEFAULT.key
