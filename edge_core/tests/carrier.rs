//! The carrier as a process would use it: a real TLS client against an agent listener, its
//! muxado frames read and answered through the handed-over session.

use std::sync::Arc;
use std::time::{Duration, Instant};

use edge_core::carrier::{AgentListen, Carrier, Where};
use edge_core::inbox::Accepted;
use edge_core::mux::{encode, Limits, DATA, EV_CLOSED, EV_OPENED, FIN, SYN};
use edge_core::tls::{certified_key, server_config, sni_server_config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

struct Pair {
    chain: Vec<u8>,
    key: Vec<u8>,
    der: Vec<u8>,
}

fn pair() -> Pair {
    pair_for("localhost")
}

fn pair_for(name: &str) -> Pair {
    let cert = rcgen::generate_simple_self_signed(vec![name.into()]).unwrap();
    Pair {
        chain: cert.cert.pem().into_bytes(),
        key: cert.key_pair.serialize_pem().into_bytes(),
        der: cert.cert.der().to_vec(),
    }
}

fn listen(carrier: &Carrier, pair: &Pair, timeout: Duration, max_handshakes: usize) -> u16 {
    let spec = AgentListen {
        tls: server_config(
            &pair.chain,
            &pair.key,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        )
        .unwrap(),
        handshake_timeout: timeout,
        max_handshakes,
        limits: Limits::default(),
    };
    let (_, addr) = carrier
        .listen_agents(Where::Bind("127.0.0.1".into(), 0), spec)
        .unwrap();
    addr.port()
}

fn connector(pair: &Pair, alpn: &[&[u8]]) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots.add(pair.der.clone().into()).unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

type Events = Vec<edge_core::inbox::Event>;

fn wait_for(carrier: &Carrier, count: usize) -> (Vec<Accepted>, Events) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut got, mut events) = (Vec::new(), Vec::new());
    while got.len() < count && Instant::now() < deadline {
        let taken = carrier.inbox().take();
        got.extend(taken.accepted);
        events.extend(taken.events);
        std::thread::sleep(Duration::from_millis(5));
    }
    (got, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_both_ways_with_the_facts_and_half_close() {
    let carrier = Carrier::new(1).unwrap();
    let pair = pair();
    let port = listen(&carrier, &pair, Duration::from_secs(5), 16);
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let client_port = tcp.local_addr().unwrap().port();
    let mut tls = connector(&pair, &[b"http/1.1"])
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let handed = tokio::task::spawn_blocking({
        let carrier = Arc::new(carrier);
        move || (wait_for(&carrier, 1), carrier)
    });
    let mut hello = Vec::new();
    encode(&mut hello, DATA, SYN, 1, b"hello core");
    tls.write_all(&hello).await.unwrap();
    tls.flush().await.unwrap();
    let ((mut handed, mut events), carrier) = handed.await.unwrap();
    assert_eq!(handed.len(), 1);
    let accepted = handed.pop().unwrap();
    assert_eq!(accepted.peer.port(), client_port);
    assert_eq!(accepted.sni.as_deref(), Some("localhost"));
    assert_eq!(accepted.alpn.as_deref(), Some(&b"http/1.1"[..]));
    let session = accepted.session;
    let key = session.key;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !events.contains(&(key, EV_OPENED, 1)) {
        assert!(Instant::now() < deadline, "the stream never opened");
        events.extend(carrier.inbox().take().events);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let got = session.with(|st| st.read(1, 64, |b| b.to_vec())).unwrap();
    assert_eq!(got.as_deref(), Some(&b"hello core"[..]));
    session.with(|st| {
        st.write(1, b"answer").unwrap();
        st.close_write(1).unwrap();
    });
    session.flush();
    let mut expected = Vec::new();
    encode(&mut expected, DATA, 0, 1, b"answer");
    encode(&mut expected, DATA, FIN, 1, b"");
    let mut back = vec![0u8; expected.len()];
    tls.read_exact(&mut back).await.unwrap();
    assert_eq!(back, expected);
    tls.shutdown().await.unwrap(); // the client's end: the session ends
    while !events.contains(&(key, EV_CLOSED, 0)) {
        assert!(Instant::now() < deadline, "the session never ended");
        events.extend(carrier.inbox().take().events);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(session.lock().close_reason, "peer closed the connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_is_dropped_at_the_handshake_timeout_and_never_handed_over() {
    let carrier = Arc::new(Carrier::new(1).unwrap());
    let pair = pair();
    let port = listen(&carrier, &pair, Duration::from_millis(300), 16);
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
        .await
        .expect("closed by the timeout")
        .unwrap_or(0);
    assert_eq!(n, 0);
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert!(carrier.inbox().is_empty());
    // the connection closes as the timed-out handshake is dropped, and the counter is
    // incremented just after: waited for (milliseconds; 2 s bound), not read at once
    let c = &carrier.counters;
    let deadline = Instant::now() + Duration::from_secs(2);
    while c
        .failed_handshakes
        .load(std::sync::atomic::Ordering::Relaxed)
        == 0
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        c.failed_handshakes
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_max_handshakes_a_connection_is_closed_at_once() {
    let carrier = Arc::new(Carrier::new(1).unwrap());
    let pair = pair();
    let port = listen(&carrier, &pair, Duration::from_secs(30), 2);
    let _held: Vec<TcpStream> = vec![
        TcpStream::connect(("127.0.0.1", port)).await.unwrap(),
        TcpStream::connect(("127.0.0.1", port)).await.unwrap(),
    ];
    let deadline = Instant::now() + Duration::from_secs(5);
    while carrier
        .counters
        .handshakes
        .load(std::sync::atomic::Ordering::Relaxed)
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "the two handshakes never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut third = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(5), third.read(&mut buf))
        .await
        .expect("closed at once")
        .unwrap_or(0);
    assert_eq!(n, 0);
    assert_eq!(
        carrier
            .counters
            .refused
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[test]
fn a_key_that_is_not_pem_is_refused_with_its_reason() {
    let pair = pair();
    let err = server_config(&pair.chain, b"not a key", vec![]).unwrap_err();
    assert!(err.to_string().contains("private key"), "{err}");
    let err = server_config(b"", &pair.key, vec![]).unwrap_err();
    assert!(err.to_string().contains("certificate chain"), "{err}");
}

#[test]
fn a_closed_listener_accepts_no_more() {
    let carrier = Carrier::new(1).unwrap();
    let pair = pair();
    let spec = AgentListen {
        tls: server_config(&pair.chain, &pair.key, vec![]).unwrap(),
        handshake_timeout: Duration::from_secs(5),
        max_handshakes: 4,
        limits: Limits::default(),
    };
    let (id, addr) = carrier
        .listen_agents(Where::Bind("127.0.0.1".into(), 0), spec)
        .unwrap();
    assert!(carrier.close(id));
    assert!(!carrier.close(id));
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "still accepting");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The handshake's outcome for SNI `name` with only `trusted`'s certificate as a root: the
/// server certificate's DER, or the error.
async fn handshake(port: u16, trusted: &Pair, name: &str) -> Result<Vec<u8>, String> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let server = ServerName::try_from(name.to_string()).unwrap();
    let tls = connector(trusted, &[])
        .connect(server, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (_, conn) = tls.get_ref();
    Ok(conn.peer_certificates().unwrap()[0].to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_is_chosen_by_sni_from_names_replaced_while_listening() {
    let carrier = Carrier::new(1).unwrap();
    let (own, ingress) = (pair(), pair_for("connect.example.com"));
    let (tls, resolver) = sni_server_config(&own.chain, &own.key, vec![]).unwrap();
    let spec = AgentListen {
        tls,
        handshake_timeout: Duration::from_secs(5),
        max_handshakes: 8,
        limits: Limits::default(),
    };
    let (_, addr) = carrier
        .listen_agents(Where::Bind("127.0.0.1".into(), 0), spec)
        .unwrap();
    let port = addr.port();
    // no names yet: the listener's own certificate, which does not verify for the name
    assert!(handshake(port, &ingress, "connect.example.com")
        .await
        .is_err());
    assert_eq!(handshake(port, &own, "localhost").await.unwrap(), own.der);
    let names = [(
        "connect.example.com".to_string(),
        certified_key(&ingress.chain, &ingress.key).unwrap(),
    )];
    resolver.set(names.into_iter().collect());
    assert_eq!(resolver.names_served(), 1);
    assert_eq!(
        handshake(port, &ingress, "connect.example.com")
            .await
            .unwrap(),
        ingress.der
    );
    assert_eq!(handshake(port, &own, "localhost").await.unwrap(), own.der); // others: its own
    resolver.set(Default::default());
    assert!(handshake(port, &ingress, "connect.example.com")
        .await
        .is_err());
}
