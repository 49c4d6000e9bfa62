//! The public HTTPS listener (src/https.rs): which ClientHellos the core terminates, a request
//! served over the core's TLS, a connection handed to Python untouched, and one handed to
//! Python mid-way over the plaintext bridge.

use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;

use std::time::{Duration, Instant};

use edge_core::carrier::{Carrier, Where};
use edge_core::https::{bridge, read_hello, Hello};
use edge_core::mux::{encode, DATA};
use edge_core::public::{Handed, PublicListen, Route, TlsFacts};
use edge_core::session::Session;
use edge_core::tls::public_server_config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, ClientConnection, RootCertStore};
use tokio_rustls::TlsConnector;

mod common;
use common::has;

struct Pair {
    chain: Vec<u8>,
    key: Vec<u8>,
    der: Vec<u8>,
}

fn pair_for(name: &str) -> Pair {
    let cert = rcgen::generate_simple_self_signed(vec![name.into()]).unwrap();
    Pair {
        chain: cert.cert.pem().into_bytes(),
        key: cert.key_pair.serialize_pem().into_bytes(),
        der: cert.cert.der().to_vec(),
    }
}

fn client_config(pair: &Pair, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(pair.der.clone().into()).unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// The ClientHello a rustls client sends for `name` offering `alpn`.
fn client_hello(name: &str, alpn: &[&[u8]]) -> Vec<u8> {
    let pair = pair_for("a.test");
    let mut conn = ClientConnection::new(
        client_config(&pair, alpn),
        ServerName::try_from(name.to_owned()).unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

#[test]
fn a_clienthello_is_read_for_its_name_and_whether_it_offers_http1_or_h2() {
    let read = |alpn: &[&[u8]]| read_hello(&client_hello("A.Test", alpn));
    let named = |http1, h2| Hello::Read {
        name: Some("a.test".into()),
        http1,
        h2,
    };
    assert_eq!(read(&[]), named(true, false));
    assert_eq!(read(&[b"http/1.1"]), named(true, false));
    assert_eq!(read(&[b"h2", b"http/1.1"]), named(false, true));
    assert_eq!(read(&[b"h2"]), named(false, true));
    assert_eq!(read(&[b"acme-tls/1"]), named(false, false));
    assert_eq!(
        read_hello(&client_hello("127.0.0.1", &[])),
        Hello::Read {
            name: None,
            http1: true,
            h2: false,
        }
    );
    let whole = client_hello("a.test", &[]);
    assert_eq!(read_hello(&whole[..whole.len() - 1]), Hello::Partial);
    assert_eq!(read_hello(&whole[..3]), Hello::Partial);
    assert_eq!(read_hello(b""), Hello::Partial);
    assert_eq!(read_hello(b"GET / HTTP/1.1\r\n"), Hello::Python);
    assert_eq!(
        read_hello(b"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00"),
        Hello::Python
    );
}

fn spec() -> PublicListen {
    spec_with(Duration::from_secs(5), 16)
}

fn spec_with(handshake_timeout: Duration, max_per_address: usize) -> PublicListen {
    PublicListen {
        scheme: "https".into(),
        handshake_timeout,
        head_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
        body_timeout: Duration::from_secs(5),
        fresh_stream_body: 4096,
        max_total: 100,
        max_per_address,
        h2_stall_timeout: Duration::from_secs(2),
    }
}

/// A carrier with an HTTPS listener, a route for a.test with its certificate, and an agent
/// session whose other end the test holds.
fn setup(pair: &Pair) -> (Carrier, u16, Arc<Session>, UnixStream) {
    let carrier = Carrier::new(1).unwrap();
    let (_, local) = carrier
        .listen_public(Where::Bind("127.0.0.1".into(), 0), spec())
        .unwrap();
    let (session, agent) = common::agent_session(&carrier);
    carrier
        .certs
        .set(3, public_server_config(&pair.chain, &pair.key).unwrap());
    carrier.tls_routes.set(
        "a.test".into(),
        Route {
            key: 7,
            session: Some(session.clone()),
            tunnel_id: "tn_test".into(),
            cert: 3,
            spec: 0,
            h2_upstream: None,
            capture: 0,
            ws_tcp: false,
            proxy: None,
            until: Instant::now() + Duration::from_secs(60),
            decided: false,
            responses: false,
            held: None,
        },
    );
    (carrier, local.port(), session, agent)
}

/// The agent reads a request head whose stream carries `mark` (a tunnel's id in its proxy
/// header; empty: any), and answers it 204.
async fn agent_answers_204(agent: &mut UnixStream, mark: &[u8]) {
    let (sid, got) = agent_reads(agent, b"\r\n\r\n").await;
    assert!(mark.is_empty() || has(&got, mark), "{got:?}");
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 204 No Content\r\n\r\n",
    );
    agent.write_all(&answer).await.unwrap();
}

async fn agent_reads(agent: &mut UnixStream, end: &[u8]) -> (u32, Vec<u8>) {
    let (mut buf, mut got, mut sid) = (Vec::new(), Vec::new(), 0);
    while !got.ends_with(end) {
        for (typ, _, id, payload) in common::next_frames(agent, &mut buf).await {
            if typ == DATA {
                sid = id;
                got.extend_from_slice(&payload);
            }
        }
    }
    (sid, got)
}

async fn handed(carrier: &Carrier) -> Handed {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(conn) = carrier.inbox().take().conns.pop() {
            return conn;
        }
        assert!(Instant::now() < deadline, "nothing handed to Python");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_over_the_cores_tls_then_handed_to_python_over_the_bridge() {
    let pair = pair_for("a.test");
    let (carrier, port, _session, mut agent) = setup(&pair);
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut tls = TlsConnector::from(client_config(&pair, &[b"http/1.1"]))
        .connect(ServerName::try_from("a.test").unwrap(), tcp)
        .await
        .unwrap();
    tls.write_all(b"GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    let (sid, got) = agent_reads(&mut agent, b"\r\n\r\n").await;
    assert!(has(&got, b"\"Proto\": \"https\""), "{got:?}");
    assert!(has(&got, b"x-forwarded-proto: https\r\n"));
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    );
    agent.write_all(&answer).await.unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !got.ends_with(b"ok") {
        let n = tls.read(&mut chunk).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&chunk[..n]);
    }
    // the record is pushed once the exchange ends, a moment after the client has its answer
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut served = Vec::new();
    while served.is_empty() && Instant::now() < deadline {
        served.extend(carrier.inbox().take().served);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(served.len(), 1);
    assert!(served[0].tls);
    assert!(served[0]
        .request_head
        .starts_with(b"GET /x HTTP/1.1\r\nHost: a.test"));
    assert_eq!(
        served[0].response_head,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
    );

    // a host without a route, on the same connection: Python's, over the bridge
    tls.write_all(b"GET /y HTTP/1.1\r\nHost: b.test\r\n\r\n")
        .await
        .unwrap();
    let conn = handed(&carrier).await;
    assert_eq!(conn.data, b"GET /y HTTP/1.1\r\nHost: b.test\r\n\r\n");
    assert!(!conn.first);
    assert_eq!(
        conn.tls,
        Some(TlsFacts {
            sni: "a.test".into(),
            version: "TLSv1.3",
            cipher: "TLS_AES_256_GCM_SHA384",
            alpn: Some(b"http/1.1".to_vec()),
            spec: 0,
            client_cert: None,
        })
    );
    let python = StdUnixStream::from(conn.fd);
    python.set_nonblocking(true).unwrap();
    let mut python = UnixStream::from_std(python).unwrap();
    // the client's next bytes reach Python; Python's answer reaches the client
    tls.write_all(b"more").await.unwrap();
    let mut seen = [0u8; 4];
    python.read_exact(&mut seen).await.unwrap();
    assert_eq!(&seen, b"more");
    python
        .write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
        .await
        .unwrap();
    drop(python); // Python is done: close_notify, then the end
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut rest))
        .await
        .expect("the connection did not end")
        .unwrap();
    assert_eq!(rest, b"HTTP/1.1 204 No Content\r\n\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_offering_neither_protocol_or_naming_another_host_goes_to_python_untouched() {
    let pair = pair_for("a.test");
    let (carrier, port, _session, _agent) = setup(&pair);
    for (name, alpn) in [
        ("a.test", &[&b"acme-tls/1"[..]][..]),
        ("b.test", &[&b"h2"[..], &b"http/1.1"[..]][..]),
        ("b.test", &[][..]),
    ] {
        let hello = client_hello(name, alpn);
        let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        tcp.write_all(&hello).await.unwrap();
        let conn = handed(&carrier).await;
        assert!(conn.first && conn.data.is_empty() && conn.tls.is_none());
        // nothing of it was read: Python's own TLS reads the same ClientHello
        let mut python = std::net::TcpStream::from(conn.fd);
        python
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut seen = vec![0u8; hello.len()];
        std::io::Read::read_exact(&mut python, &mut seen).unwrap();
        assert_eq!(seen, hello);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_half_closes_towards_python_and_ends_with_pythons_end() {
    let (client, mut client_far) = tokio::io::duplex(1024);
    let (python, mut python_far) = tokio::io::duplex(1024);
    let task = tokio::spawn(bridge(client, python));
    client_far.write_all(b"req").await.unwrap();
    client_far.shutdown().await.unwrap(); // the client's end of stream
    let mut got = Vec::new();
    python_far.read_to_end(&mut got).await.unwrap(); // a half-close: EOF here...
    assert_eq!(got, b"req");
    python_far.write_all(b"answer").await.unwrap(); // ...and Python still answers
    drop(python_far);
    let mut back = Vec::new();
    client_far.read_to_end(&mut back).await.unwrap();
    assert_eq!(back, b"answer");
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the bridge did not end")
        .unwrap();
}

/// Reads until the peer closes; the time it took (None: still open after `limit`).
async fn closed_within(tcp: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut chunk = [0u8; 1024];
    loop {
        match tokio::time::timeout_at((start + limit).into(), tcp.read(&mut chunk)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_whole_clienthello_is_closed_at_the_handshake_timeout() {
    let carrier = Carrier::new(1).unwrap();
    let (_, local) = carrier
        .listen_public(
            Where::Bind("127.0.0.1".into(), 0),
            spec_with(Duration::from_millis(400), 16),
        )
        .unwrap();
    let hello = client_hello("a.test", &[]);
    for sent in [&b""[..], &hello[..hello.len() / 2]] {
        let mut tcp = TcpStream::connect(local).await.unwrap();
        tcp.write_all(sent).await.unwrap();
        let took = closed_within(&mut tcp, Duration::from_secs(5))
            .await
            .expect("still open");
        assert!(
            took >= Duration::from_millis(350) && took < Duration::from_secs(3),
            "{took:?}"
        );
    }
    assert!(
        carrier.inbox().take().conns.is_empty(),
        "nothing for Python"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_the_connection_waiting_longest_for_its_clienthello_makes_room() {
    let carrier = Carrier::new(1).unwrap();
    let (_, local) = carrier
        .listen_public(
            Where::Bind("127.0.0.1".into(), 0),
            spec_with(Duration::from_secs(30), 1),
        )
        .unwrap();
    let mut waiting = TcpStream::connect(local).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _newer = TcpStream::connect(local).await.unwrap();
    let took = closed_within(&mut waiting, Duration::from_secs(5)).await;
    assert!(took.is_some(), "the waiting connection was not evicted");
    let counters = &carrier.public_counters;
    assert_eq!(
        counters.evicted.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

/// Two connections of `client` to `name` one after the other, each with one request the agent
/// answers 204 (its stream carrying `mark`): how each one's handshake went.
async fn two_connections(
    port: u16,
    client: &TlsConnector,
    name: &str,
    agent: &mut UnixStream,
    mark: &[u8],
) -> Vec<Option<tokio_rustls::rustls::HandshakeKind>> {
    let mut kinds = Vec::new();
    for _ in 0..2 {
        let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut tls = client
            .connect(ServerName::try_from(name.to_owned()).unwrap(), tcp)
            .await
            .unwrap();
        // TLS 1.3 tickets come right after the handshake, before any answer: read one
        let request = format!("GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n");
        tls.write_all(request.as_bytes()).await.unwrap();
        agent_answers_204(agent, mark).await;
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut got))
            .await
            .expect("no answer")
            .unwrap();
        assert!(got.starts_with(b"HTTP/1.1 204"));
        kinds.push(tls.get_ref().1.handshake_kind());
    }
    kinds
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_second_connection_resumes_its_session() {
    let pair = pair_for("a.test");
    let (_carrier, port, _session, mut agent) = setup(&pair);
    let client = TlsConnector::from(client_config(&pair, &[b"http/1.1"]));
    let kinds = two_connections(port, &client, "a.test", &mut agent, b"").await;
    use tokio_rustls::rustls::HandshakeKind;
    assert_eq!(
        kinds,
        vec![Some(HandshakeKind::Full), Some(HandshakeKind::Resumed)]
    );
}

/// A CA, and a client certificate it signed: (CA certificate DER, client chain, client key).
struct Issued {
    ca: Vec<u8>,
    chain: Vec<tokio_rustls::rustls::pki_types::CertificateDer<'static>>,
    key: Vec<u8>,
}

fn issue_client_cert() -> Issued {
    use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair};
    use rcgen::{DistinguishedName, DnType};
    // distinct names: a leaf named as its issuer is self-signed to OpenSSL (client_cert.rs)
    let named = |name: String| {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        dn
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ca_params.distinguished_name = named(format!("client CA {n}"));
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let mut leaf_params = CertificateParams::new(vec!["client.test".to_string()]).unwrap();
    leaf_params.distinguished_name = named("client.test".into());
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &ca, &ca_key).unwrap();
    Issued {
        ca: ca.der().to_vec(),
        chain: vec![leaf.der().clone()],
        key: leaf_key.serialize_der(),
    }
}

/// A client of `pair`'s name offering HTTP/1.1, with `cert` as its certificate if any, and
/// `versions` only (empty: TLS 1.2 and 1.3).
fn client_with(
    pair: &Pair,
    cert: Option<&Issued>,
    versions: &[&'static tokio_rustls::rustls::SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(pair.der.clone().into()).unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider);
    let builder = if versions.is_empty() {
        builder.with_safe_default_protocol_versions()
    } else {
        builder.with_protocol_versions(versions)
    }
    .unwrap()
    .with_root_certificates(roots);
    let mut config = match cert {
        Some(c) => builder
            .with_client_auth_cert(
                c.chain.clone(),
                tokio_rustls::rustls::pki_types::PrivatePkcs8KeyDer::from(c.key.clone()).into(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// m.test's route on `carrier`, with the certificate 5 made to require `requires` (what
/// Python numbered 9).
fn route_requiring(
    carrier: &Carrier,
    session: &Arc<Session>,
    pair: &Pair,
    requires: &edge_core::tls::Requires,
) {
    let config =
        edge_core::tls::public_server_config_requiring(&pair.chain, &pair.key, requires).unwrap();
    carrier.certs.set_requiring(5, config, 9);
    carrier.tls_routes.set(
        "m.test".into(),
        Route {
            key: 8,
            session: Some(session.clone()),
            tunnel_id: "tn_m".into(),
            cert: 5,
            spec: 9,
            proxy: None,
            h2_upstream: None,
            capture: 0,
            ws_tcp: false,
            until: Instant::now() + Duration::from_secs(60),
            decided: false,
            responses: false,
            held: None,
        },
    );
}

/// The listener of `setup` for a.test, and m.test's route requiring TLS 1.3 only: (a.test's
/// pair, m.test's, the carrier, the port, the session, the agent's end).
fn tls13_only_m_test() -> (Pair, Pair, Carrier, u16, Arc<Session>, UnixStream) {
    let (pair, mtls) = (pair_for("a.test"), pair_for("m.test"));
    let (carrier, port, session, agent) = setup(&pair);
    let requires = edge_core::tls::Requires {
        tls13_only: true,
        ..Default::default()
    };
    route_requiring(&carrier, &session, &mtls, &requires);
    (pair, mtls, carrier, port, session, agent)
}

/// A request on a connection of `config` to `name`, and what came back: None when the
/// handshake failed or the connection ended without an answer.
async fn try_request(port: u16, config: Arc<ClientConfig>, name: &str, host: &str) -> Option<()> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut tls = TlsConnector::from(config)
        .connect(ServerName::try_from(name.to_owned()).unwrap(), tcp)
        .await
        .ok()?;
    tls.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut byte = [0u8; 1];
    match tokio::time::timeout(Duration::from_secs(2), tls.read(&mut byte)).await {
        Ok(Ok(n)) if n > 0 => Some(()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_requires_a_client_certificate_gets_it_verified_and_its_facts_to_python() {
    let (pair, mtls) = (pair_for("a.test"), pair_for("m.test"));
    let (carrier, port, session, mut agent) = setup(&pair);
    let (ours, theirs) = (issue_client_cert(), issue_client_cert());
    let requires = edge_core::tls::Requires {
        client_cas: Some(vec![ours.ca.clone()]),
        ..Default::default()
    };
    route_requiring(&carrier, &session, &mtls, &requires);
    // no certificate, or one another CA signed: the handshake fails, nothing is served
    for cert in [None, Some(&theirs)] {
        let config = client_with(&mtls, cert, &[]);
        assert!(try_request(port, config, "m.test", "m.test")
            .await
            .is_none());
    }
    assert!(carrier.inbox().take().conns.is_empty());
    // one it signed: served by the core
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut tls = TlsConnector::from(client_with(&mtls, Some(&ours), &[]))
        .connect(ServerName::try_from("m.test").unwrap(), tcp)
        .await
        .unwrap();
    tls.write_all(b"GET /m HTTP/1.1\r\nHost: m.test\r\n\r\n")
        .await
        .unwrap();
    agent_answers_204(&mut agent, b"\"Id\": \"tn_m\"").await;
    let mut head = [0u8; 12];
    tls.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 204");
    // a default name's request on it is the core's too (a.test requires nothing)
    tls.write_all(b"GET /a HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    agent_answers_204(&mut agent, b"\"Id\": \"tn_test\"").await;
    tls.read_exact(&mut head).await.unwrap();
    // another host: Python's, with what the handshake required and the client's certificate
    tls.write_all(b"GET / HTTP/1.1\r\nHost: b.test\r\n\r\n")
        .await
        .unwrap();
    let tls_facts = handed(&carrier).await.tls.unwrap();
    assert_eq!(tls_facts.spec, 9);
    assert_eq!(tls_facts.client_cert.as_deref(), Some(&ours.chain[0][..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_requires_a_client_certificate_resumes_no_session() {
    // each connection's certificate is checked as it is then (client_cert.rs), in TLS 1.2
    // and 1.3 alike
    use tokio_rustls::rustls::version::{TLS12, TLS13};
    use tokio_rustls::rustls::HandshakeKind;
    let (pair, mtls) = (pair_for("a.test"), pair_for("m.test"));
    let (carrier, port, session, mut agent) = setup(&pair);
    let ours = issue_client_cert();
    let requires = edge_core::tls::Requires {
        client_cas: Some(vec![ours.ca.clone()]),
        ..Default::default()
    };
    route_requiring(&carrier, &session, &mtls, &requires);
    for version in [&TLS12, &TLS13] {
        let client = TlsConnector::from(client_with(&mtls, Some(&ours), &[version]));
        let kinds = two_connections(port, &client, "m.test", &mut agent, b"\"Id\": \"tn_m\"").await;
        assert_eq!(kinds, vec![Some(HandshakeKind::Full); 2], "{version:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_a_name_that_requires_more_on_a_default_handshake_is_pythons() {
    let (pair, _, carrier, port, _, _agent) = tls13_only_m_test();
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut tls = TlsConnector::from(client_config(&pair, &[b"http/1.1"]))
        .connect(ServerName::try_from("a.test").unwrap(), tcp)
        .await
        .unwrap();
    tls.write_all(b"GET / HTTP/1.1\r\nHost: m.test\r\n\r\n")
        .await
        .unwrap();
    let conn = handed(&carrier).await; // Python answers it 421
    assert_eq!(conn.data, b"GET / HTTP/1.1\r\nHost: m.test\r\n\r\n");
    assert_eq!(
        (
            conn.tls.as_ref().unwrap().spec,
            conn.tls.unwrap().client_cert
        ),
        (0, None)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_requires_tls_1_3_refuses_a_tls_1_2_client() {
    use tokio_rustls::rustls::version::{TLS12, TLS13};
    let (_, mtls, carrier, port, session, _agent) = tls13_only_m_test();
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let refused = TlsConnector::from(client_with(&mtls, None, &[&TLS12]))
        .connect(ServerName::try_from("m.test").unwrap(), tcp)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("ProtocolVersion"), "{refused}");
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let tls = TlsConnector::from(client_with(&mtls, None, &[&TLS13]))
        .connect(ServerName::try_from("m.test").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(
        tls.get_ref().1.protocol_version(),
        Some(tokio_rustls::rustls::ProtocolVersion::TLSv1_3)
    );
    // and one that requires TLS 1.2 only gets it from a client that offers both
    let requires = edge_core::tls::Requires {
        tls12_only: true,
        ..Default::default()
    };
    route_requiring(&carrier, &session, &mtls, &requires);
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let tls = TlsConnector::from(client_with(&mtls, None, &[]))
        .connect(ServerName::try_from("m.test").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(
        tls.get_ref().1.protocol_version(),
        Some(tokio_rustls::rustls::ProtocolVersion::TLSv1_2)
    );
}
