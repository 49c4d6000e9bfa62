//! The carrier: a tokio runtime with the listeners it serves and the agent sessions it runs.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener as StdTcpListener, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UnixStream};
use tokio::runtime::Runtime;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use crate::decide::Decisions;
use crate::heartbeat;
use crate::inbox::{Accepted, Inbox};
use crate::mux::Limits;
use crate::public::{
    self, Admission, Certs, Handed, Public, PublicCounters, PublicListen, Routes, Tallies,
};
use crate::quickack::QuickAck;
use crate::relay::Relays;
use crate::session::{self, Session};
use crate::splice::{self, Spliced};
use crate::wstcp;

/// A client's socket the core carries: TCP, or a Unix socket (the plaintext of TLS the core
/// terminated, on its way back from Python).
trait Carried: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Carried for T {}

/// Connections queued by the kernel for a listener the carrier binds itself.
pub const BACKLOG: u32 = 1024;

/// Where a listener listens.
pub enum Where {
    /// Bind this host and port (port 0: any free port).
    Bind(String, u16),
    /// The same, with SO_REUSEPORT: every instance of a cluster on one host listens on it.
    BindShared(String, u16),
    /// A socket already bound and listening (handed over by a supervisor).
    Socket(StdTcpListener),
}

/// What an agent listener does with its connections: TLS, then a muxado session each.
pub struct AgentListen {
    pub tls: Arc<ServerConfig>,
    /// A handshake not done by then is dropped.
    pub handshake_timeout: Duration,
    /// Handshakes in progress at once on this listener; a connection beyond them is closed at
    /// once, before any byte of it is read.
    pub max_handshakes: usize,
    /// The bounds of each session.
    pub limits: Limits,
}

/// Counters of one carrier, read by the edge's operator endpoint.
#[derive(Default)]
pub struct Counters {
    pub handshakes: AtomicUsize,
    pub sessions: AtomicUsize,
    /// Client connections the core carries now ([`Carrier::splice`]).
    pub splices: AtomicUsize,
    /// ... and those it carried to their end.
    pub spliced: AtomicU64,
    pub refused: AtomicU64,
    pub failed_handshakes: AtomicU64,
}

pub struct Carrier {
    runtime: Option<Runtime>, // taken when dropped: shut down without waiting
    inbox: Arc<Inbox>,
    listeners: Mutex<HashMap<u64, JoinHandle<()>>>,
    next_id: AtomicU64,
    next_session: Arc<AtomicU64>,
    pub counters: Arc<Counters>,
    /// The plain routes Python pushed (the public listeners' fast path): the plain-HTTP
    /// listener's, and the HTTPS listener's with the certificates they name.
    pub routes: Arc<Routes>,
    pub tls_routes: Arc<Routes>,
    /// A cluster's relay routes (relay.rs): the plain-HTTP listener's and the HTTPS one's.
    pub relays: Arc<Relays>,
    pub tls_relays: Arc<Relays>,
    pub certs: Arc<Certs>,
    pub public_counters: Arc<PublicCounters>,
    /// The quiet routes' numbers (public.rs `Tallies`).
    pub tallies: Arc<Tallies>,
    /// The decided routes' requests waiting for Python (decide.rs).
    pub decisions: Arc<Decisions>,
    admissions: Mutex<Vec<Arc<Admission>>>,
    /// Listeners without a socket of their own: connections Python hands in (`adopt`).
    adopters: Mutex<HashMap<u64, Arc<Public>>>,
    /// The public listeners with a socket (closed by `close`: their HTTP/2 connections are
    /// told GOAWAY).
    publics: Mutex<HashMap<u64, Arc<Public>>>,
}

/// A connected stream socket (TCP, or Unix with `unix`) as the core carries it; within the
/// runtime's context.
fn carried(fd: OwnedFd, unix: bool) -> io::Result<Box<dyn Carried>> {
    if unix {
        let std = StdUnixStream::from(fd);
        std.set_nonblocking(true)?;
        Ok(Box::new(UnixStream::from_std(std)?))
    } else {
        let std = std::net::TcpStream::from(fd);
        std.set_nonblocking(true)?;
        Ok(Box::new(TcpStream::from_std(std)?))
    }
}

/// How a carried connection's bytes go: raw both ways (what goes to the stream first, to the
/// client first), or converted from and to WebSocket frames (the client's bytes read so far).
enum Carry {
    Raw(Vec<u8>, Vec<u8>),
    WebSocket(Vec<u8>),
}

enum Kind {
    Own,
    Shared,
}

/// Decrements a counter when dropped.
pub(crate) struct Held(Arc<Counters>, fn(&Counters) -> &AtomicUsize);

impl Drop for Held {
    fn drop(&mut self) {
        (self.1)(&self.0).fetch_sub(1, Ordering::Relaxed);
    }
}

pub(crate) fn hold(counters: &Arc<Counters>, which: fn(&Counters) -> &AtomicUsize) -> Held {
    which(counters).fetch_add(1, Ordering::Relaxed);
    Held(counters.clone(), which)
}

impl Carrier {
    /// A carrier on `threads` worker threads (0: one per core).
    pub fn new(threads: usize) -> io::Result<Self> {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.enable_all().thread_name("edge-core");
        if threads > 0 {
            builder.worker_threads(threads);
        }
        Ok(Carrier {
            runtime: Some(builder.build()?),
            inbox: Arc::new(Inbox::new()?),
            listeners: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            next_session: Arc::new(AtomicU64::new(1)),
            counters: Arc::new(Counters::default()),
            routes: Arc::new(Routes::default()),
            tls_routes: Arc::new(Routes::default()),
            relays: Arc::new(Relays::default()),
            tls_relays: Arc::new(Relays::default()),
            certs: Arc::new(Certs::default()),
            public_counters: Arc::new(PublicCounters::default()),
            tallies: Arc::new(Tallies::default()),
            decisions: Arc::new(Decisions::default()),
            admissions: Mutex::new(Vec::new()),
            adopters: Mutex::new(HashMap::new()),
            publics: Mutex::new(HashMap::new()),
        })
    }

    pub fn inbox(&self) -> &Inbox {
        &self.inbox
    }

    /// The decisions Python queued in its batch, answered (decide.rs `Decisions::flush`).
    pub fn flush_decisions(&self) {
        self.decisions.flush(self.runtime());
    }

    fn runtime(&self) -> &Runtime {
        self.runtime
            .as_ref()
            .expect("a carrier's runtime lives until it is dropped")
    }

    fn bind(&self, at: Where) -> io::Result<TcpListener> {
        let _entered = self.runtime().enter();
        let at_kind = match at {
            Where::BindShared(..) => Kind::Shared,
            _ => Kind::Own,
        };
        match at {
            Where::Socket(listener) => {
                listener.set_nonblocking(true)?;
                TcpListener::from_std(listener)
            }
            Where::Bind(host, port) | Where::BindShared(host, port) => {
                let shared = matches!(at_kind, Kind::Shared);
                let addr = (host.as_str(), port)
                    .to_socket_addrs()?
                    .next()
                    .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, host.clone()))?;
                let socket = match addr {
                    SocketAddr::V4(_) => TcpSocket::new_v4()?,
                    SocketAddr::V6(_) => TcpSocket::new_v6()?,
                };
                socket.set_reuseaddr(true)?;
                if shared {
                    socket.set_reuseport(true)?;
                }
                socket.bind(addr)?;
                socket.listen(BACKLOG)
            }
        }
    }

    /// Start an agent listener; its id and the address it listens on.
    pub fn listen_agents(&self, at: Where, spec: AgentListen) -> io::Result<(u64, SocketAddr)> {
        let listener = self.bind(at)?;
        let local = listener.local_addr()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let task = self.runtime().spawn(accept_loop(
            id,
            listener,
            Arc::new(spec),
            self.inbox.clone(),
            self.counters.clone(),
            self.next_session.clone(),
        ));
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, task);
        Ok((id, local))
    }

    /// Start a public listener (public.rs: plain HTTP; https.rs: HTTPS); its id and address.
    pub fn listen_public(&self, at: Where, spec: PublicListen) -> io::Result<(u64, SocketAddr)> {
        let listener = self.bind(at)?;
        let local = listener.local_addr()?;
        let public = self.public(spec);
        let id = public.id;
        self.publics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, public.clone());
        let task = self.runtime().spawn(public::accept_loop(listener, public));
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, task);
        Ok((id, local))
    }

    /// A listener without a socket of its own: it serves the connections handed to it
    /// (`adopt`: a cluster's relayed connections on the instance holding their endpoint) as
    /// the public listener of its scheme serves its own (scheme "https": the decrypted stream
    /// of a connection another instance terminated, served by the HTTPS listener's routes),
    /// with its own connection caps, and hands back to Python under its id what it would
    /// hand over. Its id.
    pub fn adopter(&self, spec: PublicListen) -> u64 {
        let public = self.public(spec);
        let id = public.id;
        self.adopters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, public);
        id
    }

    /// Start a cluster's relay listener (relay.rs `accept_loop`): a right relay line for a
    /// host with a plain route is answered HERE and the connection served by the adopting
    /// listener `adopter` (kind http) or `tls_adopter` (kind https, the decrypted stream); every other connection goes to Python under the id returned, with
    /// the bytes read. Its id and address.
    pub fn listen_relay(
        &self,
        at: Where,
        secret: Vec<u8>,
        line_timeout: Duration,
        adopter: u64,
        tls_adopter: u64,
    ) -> io::Result<(u64, SocketAddr)> {
        let find = |id: u64, scheme: &str| {
            self.adopters
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&id)
                .filter(|p| p.spec.scheme == scheme)
                .cloned()
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("no {scheme} adopting listener"),
                    )
                })
        };
        let (adopter, tls_adopter) = (find(adopter, "http")?, find(tls_adopter, "https")?);
        let listener = self.bind(at)?;
        let local = listener.local_addr()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let spec = Arc::new(crate::relay::RelayListen {
            id,
            secret,
            line_timeout,
            adopter,
            tls_adopter,
        });
        let task = self
            .runtime()
            .spawn(crate::relay::accept_loop(listener, spec));
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, task);
        Ok((id, local))
    }

    /// Start a TCP port's listener (a TCP endpoint's or a reserved address's): every
    /// connection is handed to Python at once (Python decides where it goes, then the core
    /// carries it: `splice`), under the id returned. Its id and address.
    pub fn listen_tcp(&self, at: Where) -> io::Result<(u64, SocketAddr)> {
        let listener = self.bind(at)?;
        let local = listener.local_addr()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let inbox = self.inbox.clone();
        let task = self.runtime().spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let here = tcp.local_addr().unwrap_or(local);
                let Ok(std) = tcp.into_std() else {
                    continue;
                };
                inbox.push_conn(Handed {
                    listener: id,
                    fd: OwnedFd::from(std),
                    peer,
                    local: here,
                    data: Vec::new(),
                    first: true,
                    tls: None,
                });
            }
        });
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, task);
        Ok((id, local))
    }

    /// Serve the connected TCP socket `fd` on the adopting listener `id` as if it had
    /// accepted it from `peer` (the original client: its address is what the records and
    /// X-Forwarded-For name, and what the caps count), `data` (bytes read from it already)
    /// first. False when it was not taken (no such listener, at a cap: the socket closed).
    pub fn adopt(&self, id: u64, fd: OwnedFd, peer: SocketAddr, data: Vec<u8>) -> io::Result<bool> {
        let public = self
            .adopters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned();
        let Some(public) = public else {
            return Ok(false);
        };
        let std = std::net::TcpStream::from(fd);
        std.set_nonblocking(true)?;
        let _entered = self.runtime().enter();
        let tcp = TcpStream::from_std(std)?;
        let Some(ticket) = public.admission.admit(peer.ip()) else {
            return Ok(false); // at a cap, nothing to evict: refused (closed)
        };
        self.runtime()
            .spawn(public::adopted(tcp, peer, public, ticket, data));
        Ok(true)
    }

    fn public(&self, spec: PublicListen) -> Arc<Public> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let admission = Arc::new(Admission::new(
            spec.max_total,
            spec.max_per_address,
            self.public_counters.clone(),
        ));
        self.admissions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(admission.clone());
        let (routes, relays) = if spec.scheme == "https" {
            (self.tls_routes.clone(), self.tls_relays.clone())
        } else {
            (self.routes.clone(), self.relays.clone())
        };
        Arc::new(Public {
            id,
            relays,
            spec,
            routes,
            certs: self.certs.clone(),
            inbox: self.inbox.clone(),
            admission,
            counters: self.public_counters.clone(),
            carried: self.counters.clone(),
            tallies: self.tallies.clone(),
            decisions: self.decisions.clone(),
            closed: AtomicBool::new(false),
            closing: Notify::new(),
        })
    }

    /// Public connections the core holds now (all listeners).
    pub fn public_held(&self) -> usize {
        self.admissions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|a| a.held().0)
            .sum()
    }

    /// A session over a connected Unix stream socket (the carrier owns it from then on): what
    /// the edge's own tests play the agent on.
    pub fn attach(&self, fd: OwnedFd, limits: Limits) -> io::Result<Arc<Session>> {
        let std = StdUnixStream::from(fd);
        std.set_nonblocking(true)?;
        let _entered = self.runtime().enter();
        let stream = UnixStream::from_std(std)?;
        let key = self.next_session.fetch_add(1, Ordering::Relaxed);
        let session = Session::new(key, limits, self.inbox.clone());
        let held = hold(&self.counters, |c| &c.sessions);
        self.runtime().spawn({
            let session = session.clone();
            async move {
                session::run(session, stream).await;
                drop(held);
            }
        });
        Ok(session)
    }

    /// The heartbeat stream `sid` of `session` is the core's from now on: it echoes each id
    /// (crate::heartbeat) until the stream ends.
    pub fn echo(&self, session: Arc<Session>, sid: u32) {
        let wakes = session.own(sid);
        self.runtime().spawn(heartbeat::echo(session, sid, wakes));
    }

    /// Carry the connected stream socket `fd` (TCP, or Unix with `unix`; the carrier owns it
    /// from then on) and the stream `sid` of `session` both ways (crate::splice); its end and
    /// byte counts go to the inbox under the id returned.
    pub fn splice(
        &self,
        fd: OwnedFd,
        unix: bool,
        session: Arc<Session>,
        sid: u32,
        to_stream: Vec<u8>,
        to_client: Vec<u8>,
    ) -> io::Result<u64> {
        self.carry(fd, unix, session, sid, Carry::Raw(to_stream, to_client))
    }

    /// Convert between the connected stream socket `fd` (a client's WebSocket, answered 101:
    /// TCP, or Unix with `unix`; the carrier owns it from then on) and the stream `sid` of
    /// `session` (crate::wstcp), `frames` the client's bytes read after its upgrade request;
    /// its end and byte counts go to the inbox under the id returned, as a splice's.
    pub fn convert_websocket(
        &self,
        fd: OwnedFd,
        unix: bool,
        session: Arc<Session>,
        sid: u32,
        frames: Vec<u8>,
    ) -> io::Result<u64> {
        self.carry(fd, unix, session, sid, Carry::WebSocket(frames))
    }

    fn carry(
        &self,
        fd: OwnedFd,
        unix: bool,
        session: Arc<Session>,
        sid: u32,
        how: Carry,
    ) -> io::Result<u64> {
        let _entered = self.runtime().enter();
        let io = carried(fd, unix)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let wakes = session.own(sid);
        let held = hold(&self.counters, |c| &c.splices);
        let counters = self.counters.clone();
        let inbox = self.inbox.clone();
        self.runtime().spawn(async move {
            let (from_client, to_client) = match how {
                Carry::Raw(to_stream, to_client) => {
                    splice::run(io, session, sid, wakes, to_stream, to_client).await
                }
                Carry::WebSocket(frames) => wstcp::run(io, session, sid, wakes, frames).await,
            };
            drop(held);
            counters.spliced.fetch_add(1, Ordering::Relaxed);
            inbox.push_spliced(Spliced {
                id,
                from_client,
                to_client,
            });
        });
        Ok(id)
    }

    /// Carry the connected socket `a` (a Unix socket with `a_unix`, else TCP) and the TCP
    /// socket `b` both ways (splice::relay: the cluster's relay), `to_b` to `b` first and
    /// `to_a` to `a` first; both are the core's from now on. Its end comes as a carried
    /// connection's (`Spliced`, counted with them) under the id returned.
    pub fn relay(
        &self,
        a: OwnedFd,
        a_unix: bool,
        b: OwnedFd,
        to_b: Vec<u8>,
        to_a: Vec<u8>,
    ) -> io::Result<u64> {
        let _entered = self.runtime().enter();
        let (a, b) = (carried(a, a_unix)?, carried(b, false)?);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let held = hold(&self.counters, |c| &c.splices);
        let counters = self.counters.clone();
        let inbox = self.inbox.clone();
        self.runtime().spawn(async move {
            let (from_client, to_client) =
                splice::relay(a, b, to_b, to_a, splice::RELAY_LINGER).await;
            drop(held);
            counters.spliced.fetch_add(1, Ordering::Relaxed);
            inbox.push_spliced(Spliced {
                id,
                from_client,
                to_client,
            });
        });
        Ok(id)
    }

    /// Stop accepting on a listener (its socket is closed; sessions already handed over go
    /// on; a public listener's HTTP/2 connections are told GOAWAY NO_ERROR and end once
    /// their streams are served).
    pub fn close(&self, id: u64) -> bool {
        if let Some(public) = self
            .publics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
        {
            public.close();
        }
        if self
            .adopters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
            .is_some()
        {
            return true;
        }
        let task = self
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        match task {
            Some(task) => {
                task.abort();
                true
            }
            None => false,
        }
    }
}

impl Drop for Carrier {
    fn drop(&mut self) {
        for (_, task) in self
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            task.abort();
        }
        // Sessions still running end with the runtime; nothing waits for them (a drop may
        // happen on a thread of another runtime, or at the interpreter's exit).
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn accept_loop(
    id: u64,
    listener: TcpListener,
    spec: Arc<AgentListen>,
    inbox: Arc<Inbox>,
    counters: Arc<Counters>,
    next_session: Arc<AtomicU64>,
) {
    let acceptor = TlsAcceptor::from(spec.tls.clone());
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                // Out of descriptors or memory, or a connection reset before it was
                // accepted: wait a little rather than spin, and go on.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if counters.handshakes.load(Ordering::Relaxed) >= spec.max_handshakes {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            drop(tcp);
            continue;
        }
        let handshake = hold(&counters, |c| &c.handshakes);
        let (acceptor, spec, inbox, counters) = (
            acceptor.clone(),
            spec.clone(),
            inbox.clone(),
            counters.clone(),
        );
        let key = next_session.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let _ = tcp.set_nodelay(true);
            let accepted =
                tokio::time::timeout(spec.handshake_timeout, acceptor.accept(QuickAck(tcp))).await;
            drop(handshake);
            let tls = match accepted {
                Ok(Ok(tls)) => tls,
                _ => {
                    counters.failed_handshakes.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            let (sni, alpn) = {
                let (_, conn) = tls.get_ref();
                (
                    conn.server_name().map(str::to_owned),
                    conn.alpn_protocol().map(<[u8]>::to_vec),
                )
            };
            let _session = hold(&counters, |c| &c.sessions);
            let session = Session::new(key, spec.limits.clone(), inbox.clone());
            inbox.push(Accepted {
                listener: id,
                session: session.clone(),
                peer,
                sni,
                alpn,
            });
            session::run(session, tls).await;
        });
    }
}
