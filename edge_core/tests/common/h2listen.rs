//! What the HTTP/2 tests share (tests/h2.rs, tests/h2_hostile.rs): the client's frames as
//! bytes, and the core's HTTPS listener with a route for a.test on a session the test plays
//! the agent on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use edge_core::carrier::{Carrier, Where};
use edge_core::public::{PublicListen, Route};
use edge_core::session::Session;
use edge_core::tls::public_server_config;
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// One HTTP/2 frame.
pub fn frame(kind: u8, flags: u8, sid: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&sid.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A request's header block: GET https, :path and :authority as literals.
pub fn request_block() -> Vec<u8> {
    let mut block = vec![0x82, 0x87];
    for (name, value) in [(&b":path"[..], &b"/"[..]), (b":authority", b"a.test")] {
        block.push(0x00);
        block.push(name.len() as u8);
        block.extend_from_slice(name);
        block.push(value.len() as u8);
        block.extend_from_slice(value);
    }
    block
}

pub fn spec() -> PublicListen {
    PublicListen {
        scheme: "https".into(),
        handshake_timeout: Duration::from_secs(5),
        head_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
        body_timeout: Duration::from_secs(5),
        fresh_stream_body: 4096,
        max_total: 100,
        max_per_address: 16,
        h2_stall_timeout: Duration::from_secs(2),
    }
}

/// The listener, its route for a.test, the played agent's end of its session, and a client
/// configuration trusting the name's certificate and offering `alpn`.
pub struct Listener {
    pub carrier: Carrier,
    pub id: u64,
    pub port: u16,
    pub session: Arc<Session>,
    pub agent: UnixStream,
    pub config: Arc<ClientConfig>,
}

pub fn listener(alpn: &[&[u8]]) -> Listener {
    let cert = rcgen::generate_simple_self_signed(vec!["a.test".into()]).unwrap();
    let (chain, key) = (
        cert.cert.pem().into_bytes(),
        cert.key_pair.serialize_pem().into_bytes(),
    );
    let carrier = Carrier::new(1).unwrap();
    let (id, local) = carrier
        .listen_public(Where::Bind("127.0.0.1".into(), 0), spec())
        .unwrap();
    let (session, agent) = super::agent_session(&carrier);
    carrier
        .certs
        .set(3, public_server_config(&chain, &key).unwrap());
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
            until: Instant::now() + Duration::from_secs(600),
            decided: false,
            responses: false,
            held: None,
        },
    );
    let mut roots = RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Listener {
        carrier,
        id,
        port: local.port(),
        session,
        agent,
        config: Arc::new(config),
    }
}

/// A TLS connection to the listener on `port` for a.test.
pub async fn connect(port: u16, config: Arc<ClientConfig>) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    TlsConnector::from(config)
        .connect(ServerName::try_from("a.test").unwrap(), tcp)
        .await
        .unwrap()
}
