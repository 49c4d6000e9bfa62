//! The public HTTPS listener: each connection's ClientHello is read without consuming it
//! (MSG_PEEK); a connection whose server name has a route with a certificate is terminated
//! here (rustls, ALPN `h2` and `http/1.1`) and its requests served as the plain listener
//! serves them (public.rs `connection`; over HTTP/2, each stream as one: h2front.rs). A
//! name another instance holds (a relay route) is terminated only for HTTP/1.1, whose
//! decrypted stream the holder's adopting listener reads. Every other connection goes to
//! Python untouched (its ClientHello still unread: edge/tls.py serves it as it always did).
//!
//! A request on a connection the core terminated that the core does not serve (another
//! host, an upgrade with a body, a route that expired: public.rs) goes to Python with the rest of the
//! connection over a Unix socket pair carrying the plaintext (`bridge`): the TLS session
//! stays in the core, Python gets the bytes read and the handshake's facts.
//!
//! Bounds: the ClientHello within MAX_HELLO bytes (else Python's, which reads only the first
//! record), the ClientHello and the handshake within the listener's `handshake_timeout` from
//! the connection's start; until its first request head the connection counts as waiting
//! (the one waiting longest is evicted at a cap, as on the plain listener).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::rustls::server::{Acceptor, ServerConnection};
use tokio_rustls::rustls::{CipherSuite, ProtocolVersion, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::public::{self, Conn, Handed, Public, Ticket, TlsFacts};

/// The most of a ClientHello peeked at: a TLS record header, its largest fragment and the
/// slack edge/tls.py allows (MAX_RECORD).
pub const MAX_HELLO: usize = 5 + 16384 + 2048;

/// What the ClientHello asks for, as far as the core's choice goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Hello {
    /// The server name (lower case); `http1`: no ALPN, or http/1.1 offered without h2 (the
    /// connection will be HTTP/1.1); `h2`: h2 offered.
    Read {
        name: Option<String>,
        http1: bool,
        h2: bool,
    },
    /// Not a ClientHello the core reads (Python's answer).
    Python,
    /// More bytes are needed.
    Partial,
}

/// Read `bytes` (a peek at the connection's first bytes) as a ClientHello.
pub fn read_hello(bytes: &[u8]) -> Hello {
    if bytes.is_empty() {
        return Hello::Partial;
    }
    if bytes[0] != 0x16 {
        return Hello::Python; // not a TLS handshake record
    }
    let mut acceptor = Acceptor::default();
    let mut rest = bytes;
    while !rest.is_empty() {
        match acceptor.read_tls(&mut rest) {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) => return Hello::Python,
        }
    }
    match acceptor.accept() {
        Ok(None) => Hello::Partial,
        Err(_) => Hello::Python,
        Ok(Some(accepted)) => {
            let hello = accepted.client_hello();
            let name = hello.server_name().map(|n| n.to_ascii_lowercase());
            let (http1, h2) = match hello.alpn() {
                None => (true, false),
                Some(offered) => {
                    let offered: Vec<&[u8]> = offered.collect();
                    let h2 = offered.contains(&&b"h2"[..]);
                    (offered.contains(&&b"http/1.1"[..]) && !h2, h2)
                }
            };
            Hello::Read { name, http1, h2 }
        }
    }
}

/// The ClientHello peeked at (nothing consumed) by `deadline`: None when the client closed,
/// or sent nothing whole in time.
async fn peek_hello(tcp: &TcpStream, deadline: Instant) -> Option<Hello> {
    let mut buf = vec![0u8; MAX_HELLO];
    let mut seen = 0usize;
    let mut pause = Duration::from_millis(5);
    loop {
        let n = match tokio::time::timeout_at(deadline.into(), tcp.peek(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(n)) => n,
        };
        match read_hello(&buf[..n]) {
            Hello::Partial if n == buf.len() => return Some(Hello::Python),
            Hello::Partial => {}
            done => return Some(done),
        }
        if n == seen {
            // part of it is there (so the socket stays readable): wait a little, longer
            // each time (a client trickling its ClientHello costs few wake-ups)
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        }
        seen = n;
    }
}

/// A connection of the HTTPS listener, from its first byte.
pub(crate) async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    public: Arc<Public>,
    ticket: Ticket,
) {
    let deadline = Instant::now() + public.spec.handshake_timeout;
    let hello = tokio::select! {
        hello = peek_hello(&tcp, deadline) => hello,
        _ = ticket.eviction() => return,
    };
    let config = match hello {
        None => return, // closed, or no ClientHello in time: as Python's listener does
        Some(Hello::Read {
            name: Some(name),
            http1,
            h2,
        }) if http1 || h2 => served_with(&public, &name, h2),
        Some(Hello::Read {
            name: None,
            http1,
            h2,
        }) if (http1 || h2) && !public.routes.is_empty() => public.certs.nameless(),
        Some(_) => None,
    };
    let Some((config, required)) = config else {
        drop(ticket); // Python's admission counts it from now on
        return public::hand_over_socket(tcp, peer, Vec::new(), true, &public);
    };
    let handshake = TlsAcceptor::from(config).accept(tcp);
    let tls = tokio::select! {
        done = tokio::time::timeout_at(deadline.into(), handshake) => done,
        _ = ticket.eviction() => return,
    };
    match tls {
        Ok(Ok(tls)) if tls.get_ref().1.alpn_protocol() == Some(b"h2") => {
            // boxed: its state is large, and only HTTP/2 connections hold it
            Box::pin(crate::h2front::serve(
                tls, peer, local, public, ticket, required,
            ))
            .await
        }
        Ok(Ok(tls)) => {
            let facts = facts(tls.get_ref().1, required);
            let conn = Terminated { tls, facts };
            public::connection(conn, peer, local, public, ticket, Vec::new()).await
        }
        _ => {
            public
                .counters
                .failed_handshakes
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The server configuration of `name`'s route, when it has one with a certificate, and the
/// number of what it requires of the handshake. A relay route's name is relayed decrypted (as
/// Python relays it) to the holder's HTTP/1.1 adopting listener: not when the client offers
/// h2.
fn served_with(public: &Public, name: &str, h2: bool) -> Option<(Arc<ServerConfig>, u64)> {
    let cert = match public.routes.peek(name) {
        Some(route) => route.cert,
        None if !h2 => public.relays.get(name)?.cert,
        None => return None,
    };
    public.certs.with_spec(cert)
}

/// What a connection's handshake agreed, in OpenSSL's names; `required`: the number of what
/// its configuration required.
pub fn facts(conn: &ServerConnection, required: u64) -> TlsFacts {
    let version = match conn.protocol_version() {
        Some(ProtocolVersion::TLSv1_3) => "TLSv1.3",
        Some(ProtocolVersion::TLSv1_2) => "TLSv1.2",
        _ => "",
    };
    let cipher = conn
        .negotiated_cipher_suite()
        .map(|s| openssl_name(s.suite()))
        .unwrap_or("");
    TlsFacts {
        sni: conn.server_name().unwrap_or("").to_owned(),
        version,
        cipher,
        alpn: conn.alpn_protocol().map(<[u8]>::to_vec),
        spec: required,
        client_cert: conn
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| leaf.to_vec()),
    }
}

/// OpenSSL's name of a cipher suite rustls negotiates.
pub fn openssl_name(suite: CipherSuite) -> &'static str {
    match suite {
        CipherSuite::TLS13_AES_128_GCM_SHA256 => "TLS_AES_128_GCM_SHA256",
        CipherSuite::TLS13_AES_256_GCM_SHA384 => "TLS_AES_256_GCM_SHA384",
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => "TLS_CHACHA20_POLY1305_SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 => "ECDHE-ECDSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 => "ECDHE-ECDSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 => {
            "ECDHE-ECDSA-CHACHA20-POLY1305"
        }
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => "ECDHE-RSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => "ECDHE-RSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-RSA-CHACHA20-POLY1305",
        _ => "",
    }
}

/// A connection whose TLS the core terminated (HTTP/1.1), with its handshake's facts.
pub struct Terminated {
    tls: TlsStream<TcpStream>,
    facts: TlsFacts,
}

impl AsyncRead for Terminated {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tls).poll_read(cx, buf)
    }
}

impl AsyncWrite for Terminated {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tls).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tls).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tls.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tls).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tls).poll_shutdown(cx)
    }
}

impl Conn for Terminated {
    type Reader<'a> = tokio::io::ReadHalf<&'a mut Terminated>;
    type Writer<'a> = tokio::io::WriteHalf<&'a mut Terminated>;

    fn halves(&mut self) -> (Self::Reader<'_>, Self::Writer<'_>) {
        tokio::io::split(self)
    }

    fn tls_facts(&self) -> Option<TlsFacts> {
        Some(self.facts.clone())
    }

    fn tls_spec(&self) -> u64 {
        self.facts.spec
    }

    fn hand_over(
        self,
        peer: SocketAddr,
        data: Vec<u8>,
        first: bool,
        public: &Public,
        ticket: Ticket,
    ) {
        let local = self
            .tls
            .get_ref()
            .0
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let facts = self.facts.clone();
        bridge_to_python(self, facts, peer, local, data, first, public, ticket);
    }
}

/// The rest of `client` (plaintext of TLS the core terminated) to Python over a Unix socket
/// pair ([`bridge`]), with the bytes read and the handshake's facts; `ticket` holds the
/// connection's place while the bridge lasts.
#[allow(clippy::too_many_arguments)]
pub(crate) fn bridge_to_python<T>(
    client: T,
    facts: TlsFacts,
    peer: SocketAddr,
    local: SocketAddr,
    data: Vec<u8>,
    first: bool,
    public: &Public,
    ticket: Ticket,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Ok((ours, theirs)) = std::os::unix::net::UnixStream::pair() else {
        return;
    };
    if ours.set_nonblocking(true).is_err() {
        return;
    }
    let Ok(ours) = UnixStream::from_std(ours) else {
        return;
    };
    public.counters.handed.fetch_add(1, Ordering::Relaxed);
    public.inbox.push_conn(Handed {
        listener: public.id,
        fd: theirs.into(),
        peer,
        local,
        data,
        first,
        tls: Some(facts),
    });
    tokio::spawn(async move {
        bridge(client, ours).await;
        drop(ticket);
    });
}

/// The plaintext of a TLS connection the core terminated, carried both ways to Python's end
/// of a socket pair, until Python's end is done: the client's end of stream (or a TLS
/// close_notify) is a half-close towards Python; any other failure on the client's side
/// closes Python's end at once; Python's end of stream sends close_notify and ends the
/// connection (nothing more is read from a client Python has finished with).
pub async fn bridge<T, P>(client: T, python: P)
where
    T: AsyncRead + AsyncWrite + Unpin,
    P: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_rd, mut client_wr) = tokio::io::split(client);
    let (mut py_rd, mut py_wr) = tokio::io::split(python);
    let up = async {
        match tokio::io::copy(&mut client_rd, &mut py_wr).await {
            Ok(_) => {
                let _ = py_wr.shutdown().await;
                std::future::pending::<()>().await
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                let _ = py_wr.shutdown().await; // a FIN without close_notify: a half-close
                std::future::pending::<()>().await
            }
            Err(_) => {} // reset, or Python's end gone: close both
        }
    };
    let down = async {
        let _ = tokio::io::copy(&mut py_rd, &mut client_wr).await;
        let _ = client_wr.shutdown().await;
    };
    tokio::select! {
        _ = up => {},
        _ = down => {},
    }
}
