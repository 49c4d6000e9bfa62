//! The public plain-HTTP listener: accepted here, each request head read and parsed here, and
//! a request for a host whose route Python pushed as plain served here, on a proxy stream of
//! the agent's session, without a Python call. Every other request (and its connection) goes
//! to Python with the bytes already read (edge/public.py serves it as it always did).
//!
//! The bounds are the Python path's (docs/SECURITY.md): a head within `head_timeout` of a new
//! connection's start (or of its first byte after a keep-alive request), the next request's
//! first byte within `idle_timeout`, a head of at most MAX_HEAD_BYTES, each read of a request
//! body within `body_timeout`, connections capped in total and per client address (the one
//! waiting longest for a head evicted at a cap, a new one refused when none waits), and
//! back-pressure both ways (a stream's window stops the client; a slow client stops the
//! agent's credit).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_rustls::rustls::ServerConfig;

use crate::decide::{
    Asked, AskedResponse, Decided, Decision, Decisions, Memo, ReadBody, BODY_FRAMING_SLACK,
    BODY_READ_DEADLINE, BODY_READ_MAX, DECIDE_TIMEOUT,
};
use crate::encode::Encoder;
use crate::held::Held;
use crate::http::{self, Framing, Parsed, RequestHead, ResponseHead};
use crate::inbox::Inbox;
use crate::mux::StreamError;
use crate::relay::{self, Relays};
use crate::session::{Session, Wakes};
use crate::splice;

/// Bytes read from a client or a stream at once.
pub const READ_CHUNK: usize = 64 * 1024;

/// What Python set for the listener (edge/config.py's settings).
#[derive(Clone, Debug)]
pub struct PublicListen {
    /// "http", or "https": the listener terminates TLS for the hosts whose routes carry a
    /// certificate (https.rs) and hands every other connection to Python untouched.
    pub scheme: String,
    /// From a connection's start, its ClientHello and TLS handshake within this (https).
    pub handshake_timeout: Duration,
    pub head_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    /// A request body past this many bytes goes on a fresh proxy stream (0: never);
    /// edge/public.py FRESH_STREAM_BODY.
    pub fresh_stream_body: u64,
    pub max_total: usize,
    pub max_per_address: usize,
    /// An HTTP/2 response that cannot move (its client's windows closed) for this long is
    /// reset (h2front.rs; edge/config.py EDGE_H2_STALL_TIMEOUT).
    pub h2_stall_timeout: Duration,
}

/// A host's route as Python pushed it: served by the core.
pub struct Route {
    /// Python's name for it (its records name it).
    pub key: u64,
    /// The agent session its requests go to; None for a cloud endpoint's route, each of whose
    /// requests Python decides to answer or to send to a target of its own
    /// ([`Decision::Internal`]).
    pub session: Option<Arc<Session>>,
    pub tunnel_id: String,
    /// The certificate the HTTPS listener serves the host with ([`Certs`]; 0 on the plain
    /// listener's routes).
    pub cert: u64,
    /// What the host's TLS settings require of a handshake (its certificate's number of them:
    /// [`Certs::set_requiring`]; 0: the default): when not 0, served only on a connection whose
    /// handshake was made for the same ([`Conn::tls_spec`]), else handed to Python (a 421
    /// there, as edge/tls.py's `misdirected` says).
    pub spec: u64,
    /// The route is Python's again from then on, unless renewed (pushed again): what the
    /// route's rules read from caches is that old at most.
    pub until: Instant,
    /// Each request is decided by Python first (its traffic policy's request phase:
    /// decide.rs), then carried as Python decided; false for a plain route.
    pub decided: bool,
    /// A decided route whose policy has a response phase: each response head is Python's to
    /// rewrite before it goes on (decide.rs `AskedResponse`).
    pub responses: bool,
    /// The endpoint asked for a PROXY protocol header (proxyproto.rs): its version, and the
    /// address of the listener its clients reach (the header's destination).
    pub proxy: Option<(u8, String)>,
    /// The endpoint speaks HTTP/2 (`app_protocol: "http2"`): its legs are h2up.rs's, with this
    /// `:scheme` (its upstream's); None: HTTP/1.1 on the stream.
    pub h2_upstream: Option<&'static str>,
    /// The endpoint's bodies are captured for the traffic inspector: each request's and
    /// response's first `capture` data bytes go with its record (0: none).
    pub capture: usize,
    /// The endpoint converts WebSockets to TCP (the Bind option `WebsocketTCPConverter`):
    /// the core answers each upgrade itself and converts (wstcp.rs), anything else is
    /// answered 400 (edge/wstcp.py's rules).
    pub ws_tcp: bool,
    /// A decided route whose decisions Python said hold for every request with the same
    /// facts (held.rs): the decisions held, while the route is quiet. A route pushed again
    /// under the same key, on the same session, reading the same facts keeps them
    /// ([`Routes::set`]): Python's key names the tunnel and the policy it pushed.
    pub held: Option<Arc<Held>>,
}

impl Route {
    /// The route's requests sent on to `to` instead (a forward-internal's target): the same
    /// key and listener facts, the target's session, tunnel and ways of speaking.
    fn towards(&self, to: crate::decide::Target) -> Route {
        Route {
            key: self.key,
            session: Some(to.session),
            tunnel_id: to.tunnel_id,
            cert: self.cert,
            spec: self.spec,
            until: self.until,
            decided: true,
            responses: to.responses,
            proxy: to.proxy,
            h2_upstream: to.h2_upstream,
            capture: self.capture,
            ws_tcp: to.ws_tcp,
            held: None,
        }
    }
}

/// A host's routes: one, or the members of an endpoint pool, each request served by the next
/// in turn (round robin, as Python's `Registry.http_tunnel` spreads a pool's requests).
struct Members {
    routes: Vec<Arc<Route>>,
    next: AtomicUsize,
}

impl Members {
    fn of(routes: Vec<Route>) -> Arc<Members> {
        Arc::new(Members {
            routes: routes.into_iter().map(Arc::new).collect(),
            next: AtomicUsize::new(0),
        })
    }
}

/// Host -> its routes. Python pushes and drops; a host not here goes to Python.
#[derive(Default)]
pub struct Routes {
    map: RwLock<HashMap<String, Arc<Members>>>,
}

impl Routes {
    /// `host`'s route from now on. A renewal (the same key and session, the same facts read)
    /// keeps the decisions the route held.
    pub fn set(&self, host: String, mut route: Route) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        let old = map.get(&host).and_then(|m| m.routes.first());
        if let (Some(old), Some(new)) = (old, route.held.as_ref()) {
            if let Some(kept) = old.held.as_ref() {
                if old.key == route.key
                    && same_session(&old.session, &route.session)
                    && kept.reads == new.reads
                {
                    route.held = Some(kept.clone());
                }
            }
        }
        map.insert(host, Members::of(vec![route]));
    }

    /// `host`'s routes from now on are an endpoint pool's `members`, its requests spread over
    /// them in turn; no member drops the host. A member renewed (the same key and session,
    /// the same facts read) keeps the decisions it held, as [`Routes::set`] keeps a route's.
    pub fn set_pool(&self, host: String, mut members: Vec<Route>) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        if members.is_empty() {
            map.remove(&host);
            return;
        }
        // the turn goes on where it was: Python pushes a used pool again at its checks, and a
        // pool asked less often than that would otherwise always start at its first member
        let next = map
            .get(&host)
            .map_or(0, |old| old.next.load(Ordering::Relaxed));
        if let Some(old) = map.get(&host) {
            for member in members.iter_mut() {
                let kept = old
                    .routes
                    .iter()
                    .find(|o| o.key == member.key && same_session(&o.session, &member.session));
                if let (Some(o), Some(new)) = (kept, member.held.as_ref()) {
                    if let Some(h) = o.held.as_ref().filter(|h| h.reads == new.reads) {
                        member.held = Some(h.clone());
                    }
                }
            }
        }
        let members = Members::of(members);
        members.next.store(next, Ordering::Relaxed);
        map.insert(host, members);
    }

    pub fn drop_host(&self, host: &str) -> bool {
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(host)
            .is_some()
    }

    pub fn clear(&self) {
        self.map.write().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The route that serves `host`'s next request, unless it expired: a pool's next member
    /// in turn.
    pub fn get(&self, host: &str) -> Option<Arc<Route>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let members = map.get(host)?;
        let route = match members.routes.len() {
            1 => &members.routes[0],
            // the member whose turn it is, or the next whose session has not ended (its agent
            // gone before Python dropped the member: its requests would fail) while one is live
            n => {
                let turn = members.next.fetch_add(1, Ordering::Relaxed);
                (0..n)
                    .map(|i| &members.routes[(turn + i) % n])
                    .find(|r| r.session.as_ref().is_some_and(|s| !s.with(|st| st.closed)))
                    .unwrap_or(&members.routes[turn % n])
            }
        };
        (Instant::now() < route.until).then(|| route.clone())
    }

    /// `host`'s first route, unless it expired, without taking a pool's turn (what a TLS
    /// handshake or a relay reads of the host: its certificate, that it is served).
    pub fn peek(&self, host: &str) -> Option<Arc<Route>> {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(host)
            .and_then(|members| members.routes.first())
            .filter(|route| Instant::now() < route.until)
            .cloned()
    }

    pub fn len(&self) -> usize {
        self.map.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The certificates the HTTPS listener serves, by the number Python gave each: a server
/// configuration each (TLS 1.2 and 1.3, ALPN http/1.1), made once when pushed.
#[derive(Default)]
pub struct Certs {
    /// id -> its configuration, and the number of what it requires of a handshake (0: no
    /// more than the listener's default; else Python's number for a name's TLS settings).
    map: RwLock<HashMap<u64, (Arc<ServerConfig>, u64)>>,
    /// The one a ClientHello without a server name gets (0: none, such a connection is
    /// Python's); its requests are routed by Host alone, as Python's listener does.
    nameless: AtomicU64,
}

impl Certs {
    pub fn set_nameless(&self, id: u64) {
        self.nameless.store(id, Ordering::Relaxed);
    }

    /// The nameless ClientHello's configuration, and what it requires.
    pub fn nameless(&self) -> Option<(Arc<ServerConfig>, u64)> {
        match self.nameless.load(Ordering::Relaxed) {
            0 => None,
            id => self.with_spec(id),
        }
    }

    /// Certificate `id`, for handshakes that require no more than the listener's default.
    pub fn set(&self, id: u64, config: Arc<ServerConfig>) {
        self.set_requiring(id, config, 0);
    }

    /// Certificate `id`, made for handshakes that require what Python numbered `spec`.
    pub fn set_requiring(&self, id: u64, config: Arc<ServerConfig>, spec: u64) {
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, (config, spec));
    }

    pub fn drop_cert(&self, id: u64) -> bool {
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
            .is_some()
    }

    pub fn get(&self, id: u64) -> Option<Arc<ServerConfig>> {
        self.with_spec(id).map(|(config, _)| config)
    }

    /// Certificate `id`'s configuration and the number of what it requires.
    pub fn with_spec(&self, id: u64) -> Option<(Arc<ServerConfig>, u64)> {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned()
    }

    pub fn len(&self) -> usize {
        self.map.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the TLS handshake of a connection the core terminated agreed (for Python's
/// `conn.tls.*`: the names are OpenSSL's, as Python's own handshakes report them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFacts {
    pub sni: String,
    pub version: &'static str,
    pub cipher: &'static str,
    pub alpn: Option<Vec<u8>>,
    /// The number of what the handshake was made to require ([`Certs::set_requiring`]; 0:
    /// the listener's default): a request whose host's route requires something else is
    /// Python's (which answers it 421, as a misdirected request).
    pub spec: u64,
    /// The client certificate the handshake verified (DER, the leaf), for the policy's
    /// `conn.tls.client.*`.
    pub client_cert: Option<Vec<u8>>,
}

/// A connection handed to Python: the socket and the bytes the core read from it.
pub struct Handed {
    pub listener: u64,
    pub fd: OwnedFd,
    pub peer: SocketAddr,
    /// The listener's address the client connected to.
    pub local: SocketAddr,
    pub data: Vec<u8>,
    /// No request was served on it yet (Python's head timeout is a new connection's).
    pub first: bool,
    /// None: the client's own socket (on the HTTPS listener: untouched, its ClientHello
    /// still unread). Some: the TLS the core terminated goes on in the core, and `fd` is one
    /// end of a Unix socket pair carrying the plaintext both ways (https.rs `bridge`).
    pub tls: Option<TlsFacts>,
}

/// One request the core served: what Python's records and metrics need.
pub struct Served {
    pub route: u64,
    /// Served over TLS the core terminated (the HTTPS listener).
    pub tls: bool,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// The request's head as the client sent it (parsed again only for the records made:
    /// one allocation per request rather than one per field).
    pub request_head: Vec<u8>,
    pub status: u16,
    /// The final response's head as the agent sent it (empty for the core's own answers).
    pub response_head: Vec<u8>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Seconds since the epoch at the request head, and the exchange's duration.
    pub started: f64,
    pub duration: f64,
    /// What Python handed back with the request's decision (a decided route's), returned
    /// with the record.
    pub memo: Option<Memo>,
    /// The decision was a held one (held.rs): Python did not count its policy's decisions
    /// when it made it for this request.
    pub held: bool,
    /// The first data bytes of the request's and the response's bodies, for a route whose
    /// bodies the inspector captures (`Route::capture`); empty otherwise.
    pub request_body: Vec<u8>,
    pub response_body: Vec<u8>,
    /// The request's body was all read (an agent may answer before it was: then the body
    /// kept is only its start).
    pub request_ended: bool,
    /// The route kept the bodies for the record (`Route::capture`): the two above are the
    /// bodies' starts, not merely empty.
    pub captured: bool,
}

/// What the core counts of one route's requests while the route is quiet: Python wants no
/// record of them (no inspector room, no subscription asks), only their numbers, taken in
/// one batch ([`Tallies::take`]) instead of a row and a wake-up per request.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RouteTally {
    /// (status, requests), in the order each status was first seen.
    pub statuses: Vec<(u16, u64)>,
    /// Each request's duration in seconds, in the order they ended.
    pub durations: Vec<f64>,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl RouteTally {
    fn add(&mut self, served: &Served) {
        match self.statuses.iter_mut().find(|(s, _)| *s == served.status) {
            Some((_, n)) => *n += 1,
            None => self.statuses.push((served.status, 1)),
        }
        self.durations.push(served.duration);
        self.bytes_in += served.bytes_in;
        self.bytes_out += served.bytes_out;
    }
}

/// Routes Python made quiet, and what they served since the last take (both listeners').
#[derive(Default)]
pub struct Tallies {
    inner: Mutex<HashMap<u64, Quiet>>,
}

#[derive(Default)]
struct Quiet {
    /// Still quiet (false: made loud again, its last numbers not taken yet).
    on: bool,
    tally: RouteTally,
    /// Requests served by a held decision: the decision's memo and how many.
    held: HeldCounts,
}

/// The requests a quiet route served by each held decision: its memo, how many.
pub type HeldCounts = Vec<(Memo, u64)>;

/// Distinct held decisions one quiet route counts between two takes; a request of another
/// comes as a row.
pub const TALLY_HELD_MAX: usize = 256;

/// Requests one quiet route may count between two takes; past it the route's requests come
/// as rows again (Python takes the tallies at least once a second, so this holds a route at
/// 65,536 requests a second; a route Python forgot holds at most this much).
pub const TALLY_MAX: usize = 1 << 16;

impl Tallies {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Quiet>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Route `key` quiet (its requests counted here) or not (a row each).
    pub fn set_quiet(&self, key: u64, quiet: bool) {
        let mut map = self.lock();
        if quiet {
            map.entry(key).or_default().on = true;
        } else if let Some(q) = map.get_mut(&key) {
            q.on = false;
            if q.tally.durations.is_empty() {
                map.remove(&key);
            }
        }
    }

    /// Counted here (true) when its route is quiet; else the caller hands over its row.
    pub fn count(&self, served: &Served) -> bool {
        let mut map = self.lock();
        match map.get_mut(&served.route) {
            Some(q) if q.on && q.tally.durations.len() < TALLY_MAX => {
                if let (true, Some(memo)) = (served.held, served.memo.as_ref()) {
                    match q.held.iter().position(|(m, _)| Arc::ptr_eq(m, memo)) {
                        Some(at) => q.held[at].1 += 1,
                        None if q.held.len() < TALLY_HELD_MAX => q.held.push((memo.clone(), 1)),
                        None => return false,
                    }
                }
                q.tally.add(served);
                true
            }
            _ => false,
        }
    }

    /// Route `key` is quiet now.
    pub fn is_quiet(&self, key: u64) -> bool {
        self.lock().get(&key).is_some_and(|q| q.on)
    }

    /// Every route's numbers since the last take (those that counted nothing left out); a
    /// quiet route stays quiet with an empty tally.
    pub fn take(&self) -> Vec<(u64, RouteTally, HeldCounts)> {
        let mut map = self.lock();
        let mut out = Vec::new();
        map.retain(|key, q| {
            if !q.tally.durations.is_empty() {
                out.push((
                    *key,
                    std::mem::take(&mut q.tally),
                    std::mem::take(&mut q.held),
                ));
            }
            q.on
        });
        out
    }

    /// Routes quiet now.
    pub fn quiet_count(&self) -> usize {
        self.lock().values().filter(|q| q.on).count()
    }
}

/// Counters of the public listeners, read by the edge's operator endpoint and tests.
#[derive(Default)]
pub struct PublicCounters {
    pub served: AtomicU64,
    pub handed: AtomicU64,
    pub refused: AtomicU64,
    pub evicted: AtomicU64,
    /// TLS handshakes the HTTPS listener began and that failed or timed out.
    pub failed_handshakes: AtomicU64,
    /// Requests of decided routes served by a held decision (held.rs), Python not asked.
    pub held: AtomicU64,
    /// Connections relayed to the instance holding their endpoint by a relay route (relay.rs).
    pub relayed: AtomicU64,
    /// ... and those the holder did not take (or could not be reached): Python's then.
    pub relays_refused: AtomicU64,
}

// ---- admission ------------------------------------------------------------------------------

/// The connection caps (edge/admission.py's rules, for the connections the core holds).
pub struct Admission {
    max_total: usize,
    max_per_address: usize,
    state: Mutex<AdmissionState>,
    counters: Arc<PublicCounters>,
}

#[derive(Default)]
struct AdmissionState {
    total: usize,
    per_address: HashMap<IpAddr, usize>,
    waiting: BTreeMap<u64, Arc<Slot>>,
    waiting_by_address: HashMap<IpAddr, BTreeSet<u64>>,
    next: u64,
}

struct Slot {
    address: IpAddr,
    released: AtomicBool,
    evict: Notify,
}

/// One admitted connection; dropping it gives its place back.
pub struct Ticket {
    /// None: a ticket that counts nothing (an HTTP/2 stream's virtual connection, whose
    /// client connection holds the real one: h2front.rs).
    admission: Option<Arc<Admission>>,
    slot: Arc<Slot>,
    seq: Option<u64>, // in the waiting list under this number
}

impl Admission {
    pub fn new(max_total: usize, max_per_address: usize, counters: Arc<PublicCounters>) -> Self {
        Admission {
            max_total,
            max_per_address,
            state: Mutex::new(AdmissionState::default()),
            counters,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AdmissionState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A ticket, or None: at a cap with no waiting connection to make room (refused).
    pub fn admit(self: &Arc<Self>, address: IpAddr) -> Option<Ticket> {
        let mut st = self.lock();
        if st.per_address.get(&address).copied().unwrap_or(0) >= self.max_per_address {
            let oldest = st
                .waiting_by_address
                .get(&address)
                .and_then(|s| s.iter().next().copied());
            if !self.evict(&mut st, oldest) {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        if st.total >= self.max_total {
            let oldest = st.waiting.keys().next().copied();
            if !self.evict(&mut st, oldest) {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        st.total += 1;
        *st.per_address.entry(address).or_insert(0) += 1;
        Some(Ticket {
            admission: Some(self.clone()),
            slot: Arc::new(Slot {
                address,
                released: AtomicBool::new(false),
                evict: Notify::new(),
            }),
            seq: None,
        })
    }

    fn evict(&self, st: &mut AdmissionState, seq: Option<u64>) -> bool {
        let Some(seq) = seq else {
            return false;
        };
        let Some(slot) = st.waiting.remove(&seq) else {
            return false;
        };
        Self::unwait(st, slot.address, seq);
        Self::release(st, &slot);
        slot.evict.notify_one();
        self.counters.evicted.fetch_add(1, Ordering::Relaxed);
        true
    }

    fn unwait(st: &mut AdmissionState, address: IpAddr, seq: u64) {
        st.waiting.remove(&seq);
        if let Some(set) = st.waiting_by_address.get_mut(&address) {
            set.remove(&seq);
            if set.is_empty() {
                st.waiting_by_address.remove(&address);
            }
        }
    }

    fn release(st: &mut AdmissionState, slot: &Slot) {
        if slot.released.swap(true, Ordering::Relaxed) {
            return;
        }
        st.total -= 1;
        if let Some(n) = st.per_address.get_mut(&slot.address) {
            *n -= 1;
            if *n == 0 {
                st.per_address.remove(&slot.address);
            }
        }
    }

    /// (connections held, addresses)
    pub fn held(&self) -> (usize, usize) {
        let st = self.lock();
        (st.total, st.per_address.len())
    }
}

impl Ticket {
    /// A ticket that counts nothing and is never evicted (its connection is part of one
    /// that holds a real ticket).
    pub(crate) fn free() -> Ticket {
        Ticket {
            admission: None,
            slot: Arc::new(Slot {
                address: IpAddr::from([0, 0, 0, 0]),
                released: AtomicBool::new(false),
                evict: Notify::new(),
            }),
            seq: None,
        }
    }

    /// The connection waits for a request head: it may be evicted from now on.
    pub(crate) fn waiting(&mut self) {
        if self.seq.is_some() || self.slot.released.load(Ordering::Relaxed) {
            return;
        }
        let Some(admission) = &self.admission else {
            return;
        };
        let mut st = admission.lock();
        let seq = st.next;
        st.next += 1;
        st.waiting.insert(seq, self.slot.clone());
        st.waiting_by_address
            .entry(self.slot.address)
            .or_default()
            .insert(seq);
        self.seq = Some(seq);
    }

    /// A request is being served: never evicted while so.
    pub(crate) fn busy(&mut self) {
        if let (Some(seq), Some(admission)) = (self.seq.take(), &self.admission) {
            let mut st = admission.lock();
            Admission::unwait(&mut st, self.slot.address, seq);
        }
    }

    pub(crate) fn evicted(&self) -> bool {
        self.slot.released.load(Ordering::Relaxed)
    }

    /// Returns once the connection is evicted (at once if it was).
    pub(crate) async fn eviction(&self) {
        if !self.evicted() {
            self.slot.evict.notified().await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let Some(admission) = &self.admission else {
            return;
        };
        let mut st = admission.lock();
        if let Some(seq) = self.seq.take() {
            Admission::unwait(&mut st, self.slot.address, seq);
        }
        Admission::release(&mut st, &self.slot);
    }
}

// ---- the listener ---------------------------------------------------------------------------

pub struct Public {
    pub id: u64,
    pub spec: PublicListen,
    /// The plain routes of this listener's scheme.
    pub routes: Arc<Routes>,
    /// The relay routes of this listener's scheme (a cluster's: relay.rs).
    pub relays: Arc<Relays>,
    /// The certificates its routes name (the HTTPS listener's).
    pub certs: Arc<Certs>,
    pub inbox: Arc<Inbox>,
    pub admission: Arc<Admission>,
    pub counters: Arc<PublicCounters>,
    /// The carrier's: a WebSocket-TCP connection the listener converts counts as a carried
    /// connection (`splices`, `spliced`), as one Python hands to the core does.
    pub carried: Arc<crate::carrier::Counters>,
    /// The quiet routes' numbers (shared by both listeners).
    pub tallies: Arc<Tallies>,
    /// The decided routes' requests waiting for Python (shared by both listeners).
    pub decisions: Arc<Decisions>,
    /// The listener was closed (`Carrier::close`): connections that can say so end (HTTP/2's
    /// GOAWAY).
    pub closed: AtomicBool,
    pub closing: Notify,
}

impl Public {
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.closing.notify_waiters();
    }

    /// Returns once the listener is closed (at once if it was).
    pub async fn closed(&self) {
        let notified = self.closing.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        notified.await
    }
}

pub async fn accept_loop(listener: TcpListener, public: Arc<Public>) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Some(mut ticket) = public.admission.admit(peer.ip()) else {
            drop(tcp); // at a cap, nothing to evict: refused
            continue;
        };
        ticket.waiting(); // in the order of arrival: the oldest is evicted first
        let public = public.clone();
        tokio::spawn(async move {
            let _ = tcp.set_nodelay(true);
            let local = tcp
                .local_addr()
                .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
            if public.spec.scheme == "https" {
                // boxed: a plain connection's task does not hold the HTTPS path's state
                Box::pin(crate::https::connection(tcp, peer, local, public, ticket)).await;
            } else {
                connection(tcp, peer, local, public, ticket, Vec::new()).await;
            }
        });
    }
}

/// What reading a head ended with.
enum Head {
    Request(RequestHead),
    /// Python's (a head the core does not parse, or the peer closed mid-head).
    ToPython,
    /// Closed: timed out, evicted, or the peer went away between requests.
    Closed,
}

async fn read_head<C: Conn>(
    tcp: &mut C,
    buf: &mut Vec<u8>,
    first: bool,
    spec: &PublicListen,
    ticket: &Ticket,
) -> Head {
    let now = Instant::now();
    let mut deadline = now
        + if first {
            spec.head_timeout
        } else {
            spec.idle_timeout
        };
    let mut started = !buf.is_empty();
    if started && !first {
        deadline = now + spec.head_timeout;
    }
    loop {
        if !buf.is_empty() {
            match http::parse_request(buf) {
                Parsed::Done(head) => return Head::Request(head),
                Parsed::Invalid(_) => return Head::ToPython,
                Parsed::Partial => {}
            }
        }
        if ticket.evicted() {
            return Head::Closed;
        }
        buf.reserve(16 * 1024);
        let read = tokio::select! {
            read = tokio::time::timeout_at(deadline.into(), tcp.read_buf(buf)) => read,
            _ = ticket.slot.evict.notified() => return Head::Closed,
        };
        match read {
            Err(_) | Ok(Err(_)) => return Head::Closed,
            Ok(Ok(0)) if buf.is_empty() => return Head::Closed,
            Ok(Ok(0)) => return Head::ToPython, // closed mid-head: Python's answer
            Ok(Ok(_)) => {}
        }
        if !started {
            started = true;
            let by_head = Instant::now() + spec.head_timeout;
            deadline = if first {
                deadline.min(by_head)
            } else {
                by_head
            };
        }
    }
}

/// Buffers a connection reuses from one exchange to the next (a small request's allocations
/// are then made once per connection); one that grew past KEEP_SCRATCH is let go after its
/// exchange, so an idle keep-alive connection holds at most 3 × KEEP_SCRATCH of them.
#[derive(Default)]
struct Scratch {
    /// What goes to the agent first: the proxy header, the request's head, its first bytes.
    out: Vec<u8>,
    /// The response as read from the stream.
    rbuf: Vec<u8>,
    /// A pipelined request's bytes read while a response is relayed.
    pipelined: Vec<u8>,
}

pub const KEEP_SCRATCH: usize = 16 * 1024;

impl Scratch {
    fn settle(&mut self) {
        for v in [&mut self.out, &mut self.rbuf, &mut self.pipelined] {
            v.clear();
            if v.capacity() > KEEP_SCRATCH {
                *v = Vec::new();
            }
        }
    }
}

/// The agent side of a client connection: a proxy stream of the route's session.
struct Leg {
    route: Arc<Route>,
    session: Arc<Session>,
    sid: u32,
    wakes: Arc<Wakes>,
    reusable: bool,
    /// An HTTP/2 endpoint's leg: the HTTP/1.1 end of h2up.rs's connection, which owns the
    /// stream (and finishes it once this end is dropped and its connection is done).
    h2: Option<H2Leg>,
}

struct H2Leg {
    rd: tokio::sync::Mutex<tokio::io::ReadHalf<tokio::io::DuplexStream>>,
    wr: tokio::sync::Mutex<tokio::io::WriteHalf<tokio::io::DuplexStream>>,
    /// Dropped with the leg: h2up.rs drops the exchange in flight (its stream reset).
    _held: tokio::sync::oneshot::Sender<()>,
}

impl Leg {
    fn end(self) {
        if self.h2.is_none() {
            self.session.disown(self.sid);
        }
    }
}

/// A client connection a public listener serves: plain TCP, or TLS the core terminated.
pub trait Conn: AsyncRead + AsyncWrite + Unpin + Send + Sized + 'static {
    type Reader<'a>: AsyncRead + Unpin + Send
    where
        Self: 'a;
    type Writer<'a>: AsyncWrite + Unpin + Send
    where
        Self: 'a;

    /// Its two directions, used at once (a response relayed while the client is watched).
    fn halves(&mut self) -> (Self::Reader<'_>, Self::Writer<'_>);

    /// The rest of the connection is Python's, with `data` (the bytes read and not served);
    /// `ticket` holds the connection's place while the core still carries any of it.
    fn hand_over(
        self,
        peer: SocketAddr,
        data: Vec<u8>,
        first: bool,
        public: &Public,
        ticket: Ticket,
    );

    /// What the TLS handshake agreed, for a connection the core terminated.
    fn tls_facts(&self) -> Option<TlsFacts>;

    /// The number of what the connection's TLS handshake was made to require (0: the
    /// listener's default, or no TLS).
    fn tls_spec(&self) -> u64 {
        0
    }

    /// A signal that the client is gone even while nothing reads the connection (an HTTP/2
    /// stream's reset, for its virtual connection: h2front.rs); None for a socket, whose
    /// reset a read sees.
    fn abort(&self) -> Option<Arc<Abort>> {
        None
    }

    /// One stream of a multiplexed client connection (HTTP/2: h2front.rs's virtual
    /// connections), which the connection caps do not count one by one.
    fn multiplexed(&self) -> bool {
        self.abort().is_some()
    }
}

/// A client gone, told to an exchange that may be waiting on the agent (the stream's window)
/// rather than reading its client.
#[derive(Default)]
pub struct Abort {
    set: AtomicBool,
    notify: Notify,
}

impl Abort {
    pub fn set(&self) {
        self.set.store(true, Ordering::Relaxed);
        self.notify.notify_waiters();
    }

    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::Relaxed)
    }

    /// Returns once set (at once if it was).
    pub async fn wait(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.is_set() {
            return;
        }
        notified.await
    }
}

/// Returns once `abort` is set; never for None.
async fn aborted(abort: &Option<Arc<Abort>>) {
    match abort {
        Some(abort) => abort.wait().await,
        None => std::future::pending().await,
    }
}

impl Conn for TcpStream {
    type Reader<'a> = ReadHalf<'a>;
    type Writer<'a> = WriteHalf<'a>;

    fn halves(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        self.split()
    }

    fn tls_facts(&self) -> Option<TlsFacts> {
        None
    }

    fn hand_over(
        self,
        peer: SocketAddr,
        data: Vec<u8>,
        first: bool,
        public: &Public,
        ticket: Ticket,
    ) {
        drop(ticket); // Python's admission counts it from now on
        hand_over_socket(self, peer, data, first, public);
    }
}

/// `tcp` to Python as it is (the plain listener's hand-over; the HTTPS listener's before
/// any byte was read).
pub fn hand_over_socket(
    tcp: TcpStream,
    peer: SocketAddr,
    data: Vec<u8>,
    first: bool,
    public: &Public,
) {
    let local = tcp
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let Ok(std) = tcp.into_std() else {
        return;
    };
    public.counters.handed.fetch_add(1, Ordering::Relaxed);
    public.inbox.push_conn(Handed {
        listener: public.id,
        fd: OwnedFd::from(std),
        peer,
        local,
        data,
        first,
        tls: None,
    });
}

/// A connection handed in by Python (`Carrier::adopt`: a cluster's relayed connection on the
/// instance holding its endpoint), served as an accepted one from `peer`, `data` first.
pub(crate) async fn adopted(
    tcp: TcpStream,
    peer: SocketAddr,
    public: Arc<Public>,
    ticket: Ticket,
    data: Vec<u8>,
) {
    let _ = tcp.set_nodelay(true);
    let local = tcp
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    connection(tcp, peer, local, public, ticket, data).await;
}

pub(crate) async fn connection<C: Conn>(
    mut tcp: C,
    peer: SocketAddr,
    local: SocketAddr,
    public: Arc<Public>,
    mut ticket: Ticket,
    mut buf: Vec<u8>,
) {
    let mut first = true;
    let mut leg: Option<Leg> = None;
    let mut scratch = Scratch::default();
    let mut asked_routes: Vec<u64> = Vec::new(); // (Asked::fresh)
    let client_addr = peer.to_string();
    let client_ip = peer.ip().to_string();
    loop {
        ticket.waiting();
        let mut head = match read_head(&mut tcp, &mut buf, first, &public.spec, &ticket).await {
            Head::Request(head) => head,
            Head::ToPython => break hand_over(tcp, peer, buf, first, &public, leg, ticket),
            Head::Closed => break end_leg(leg),
        };
        ticket.busy();
        let mut route = match public.routes.get(&head.host) {
            // (towards an HTTP/2 endpoint, a target its `:path` carries unchanged: h2up.rs;
            // a host whose TLS settings require more than the default, on a connection whose
            // handshake was made for other settings: Python's, a 421 there)
            // (an upgrade: a WebSocket-TCP route's to answer, or any other HTTP/1.1 route's
            // to forward and switch after the agent's 101; not on an HTTP/2 stream)
            Some(route)
                if (http::carriable(&head)
                    || (http::carriable_upgrade(&head)
                        && (route.ws_tcp
                            || (route.h2_upstream.is_none() && tcp.abort().is_none()))))
                    && (route.h2_upstream.is_none()
                        || crate::h2up::carriable_target(&head.target))
                    && (route.spec == 0 || route.spec == tcp.tls_spec()) =>
            {
                route
            }
            None if first => match public.relays.get(&head.host) {
                // another instance holds the host's endpoint: the whole connection goes
                // there (the ticket held while it is relayed)
                Some(to) => match relay::open(&to, peer).await {
                    Some((up, rest)) => {
                        public.counters.relayed.fetch_add(1, Ordering::Relaxed);
                        splice::relay(tcp, up, buf, rest, splice::RELAY_LINGER).await;
                        return;
                    }
                    None => {
                        // Python's from now on (it reads the claim again, and pushes the
                        // route anew once a holder answers HERE)
                        public.relays.drop_host(&head.host);
                        public
                            .counters
                            .relays_refused
                            .fetch_add(1, Ordering::Relaxed);
                        break hand_over(tcp, peer, buf, first, &public, leg, ticket);
                    }
                },
                None => break hand_over(tcp, peer, buf, first, &public, leg, ticket),
            },
            _ => break hand_over(tcp, peer, buf, first, &public, leg, ticket),
        };
        // a decided route's request: Python's decision first (decide.rs)
        let mut given = Given::default();
        if route.decided {
            let len = head.len;
            let bodiless = matches!(head.framing, Framing::None | Framing::Length(0));
            let tls = tcp.tls_facts();
            // a held decision (held.rs) while the route is quiet: no record wants its memo
            let key = route
                .held
                .as_ref()
                .filter(|_| public.tallies.is_quiet(route.key))
                .and_then(|h| h.reads.key(&head, peer, local, tls.as_ref(), bodiless));
            let hit = match (&route.held, &key) {
                (Some(h), Some(k)) => h.get(k),
                _ => None,
            };
            // what was read of the body for the decision (a policy that reads it)
            let mut read: Option<BodyRead> = None;
            let (decision, memo, held) = match hit {
                Some(hit) => {
                    public.counters.held.fetch_add(1, Ordering::Relaxed);
                    (hit.decision.clone(), hit.memo.clone(), true)
                }
                None => {
                    let (ticket_no, waiting) = public.decisions.ticket();
                    // (an HTTP/2 stream is a connection of its own, as on the Python path:
                    // a virtual connection kept for the host's next stream asks anew)
                    let fresh =
                        tcp.multiplexed() || crate::decide::first_ask(&mut asked_routes, route.key);
                    public.inbox.push_asked(Asked {
                        ticket: ticket_no,
                        route: route.key,
                        peer,
                        local,
                        tls: tls.clone(),
                        head: head.clone(),
                        body: None,
                        multiplexed: tcp.multiplexed(),
                        fresh,
                    });
                    let Some(mut decided) = waiting.decided(DECIDE_TIMEOUT).await else {
                        break end_leg(leg);
                    };
                    if let Decision::Body { limit } = decided.decision {
                        // the body first (at most the ask), then asked again: the run goes on
                        // under the same ticket. Not on a stream of an HTTP/2 connection:
                        // its streams would each hold a body while the caps count one
                        // connection (the Python path serves it, its run told to end)
                        let limit = limit.min(BODY_READ_MAX);
                        let timeout = public.spec.body_timeout;
                        let mut got = if tcp.multiplexed() {
                            None
                        } else {
                            read_body(&mut tcp, &mut buf, &head, limit, timeout).await
                        };
                        let waiting = public.decisions.again(ticket_no);
                        public.inbox.push_asked(Asked {
                            ticket: ticket_no,
                            route: route.key,
                            peer,
                            local,
                            tls,
                            head: head.clone(),
                            body: Some(ReadBody {
                                complete: got.as_ref().is_some_and(|r| r.complete),
                                data: got.as_mut().map(|r| std::mem::take(&mut r.data)),
                            }),
                            multiplexed: tcp.multiplexed(),
                            fresh,
                        });
                        if tcp.multiplexed() {
                            drop(waiting);
                            break hand_over(tcp, peer, buf, first, &public, leg, ticket);
                        }
                        if got.is_none() {
                            break end_leg(leg); // the client ended, stalled or broke framing
                        }
                        read = got;
                        // the decision's wait starts again once the body is read (Python's)
                        let Some(again) = waiting.decided(DECIDE_TIMEOUT).await else {
                            break end_leg(leg);
                        };
                        decided = again;
                        if matches!(decided.decision, Decision::Body { .. }) {
                            decided.decision = Decision::Close; // asked twice: a broken run
                        }
                    }
                    let Decided {
                        decision,
                        memo,
                        hold,
                    } = decided;
                    if let (true, None, Some(h), Some(k)) = (hold, &read, &route.held, key) {
                        h.hold(k, &decision, memo.as_ref());
                    }
                    (decision, memo, false)
                }
            };
            match decision {
                Decision::Forward {
                    head: forwarded,
                    body: None,
                } => {
                    given = Given {
                        head: Some(forwarded),
                        memo,
                        held,
                        ..Given::default()
                    }
                }
                Decision::Forward {
                    head: forwarded,
                    body: Some(body),
                } => {
                    // the policy rewrote the body (read whole): it goes on in place of the
                    // client's, framed by its length (Python's head says it)
                    let Some(extent) = read.as_ref().and_then(|r| r.extent) else {
                        let _ = tcp.shutdown().await;
                        break end_leg(leg);
                    };
                    buf.splice(len..len + extent, body.iter().copied());
                    head = RequestHead {
                        framing: Framing::Length(body.len() as u64),
                        ..head
                    };
                    given = Given {
                        head: Some(forwarded),
                        memo,
                        held,
                        ..Given::default()
                    }
                }
                Decision::Body { .. } => {
                    // (never from a held decision: Body is not holdable)
                    let _ = tcp.shutdown().await;
                    break end_leg(leg);
                }
                Decision::Append { fields } => {
                    given = Given {
                        added: fields,
                        memo,
                        held,
                        ..Given::default()
                    }
                }
                Decision::Internal {
                    head: forwarded,
                    fields,
                    to,
                } => {
                    if to.h2_upstream.is_some() && !crate::h2up::carriable_target(&head.target) {
                        break hand_over(tcp, peer, buf, first, &public, leg, ticket);
                    }
                    // served as the route's (its key, its records), on the target's session
                    route = Arc::new(route.towards(*to));
                    given = Given {
                        head: forwarded,
                        added: fields,
                        memo,
                        held,
                    }
                }
                Decision::Respond {
                    status,
                    head: response,
                    body,
                    close,
                } => {
                    // (an upgrade answered by anything but a 101 ends the connection, and says
                    // so, as Python's HTTP/1.1 ends it: a held answer may have been made for
                    // a request that asked none)
                    // (a body read whole for the decision is the request's: its bytes are
                    // left behind with its head)
                    let whole = read.as_ref().and_then(|r| r.extent);
                    let keep =
                        (bodiless || whole.is_some()) && !close && !head.close && !head.upgrade;
                    let response = if head.upgrade && !close {
                        http::closing(&response)
                    } else {
                        response
                    };
                    // what of the request's body came with its head (the record's, as the
                    // Python path keeps what it had read when the policy answered)
                    let (request_body, request_ended) =
                        kept_after_head(&head, &buf[len..], route.capture);
                    let record = Served {
                        route: route.key,
                        tls: public.spec.scheme == "https", // a relayed one too (adopted)
                        peer,
                        local,
                        request_head: buf[..len].to_vec(),
                        status,
                        response_head: response.clone(),
                        bytes_in: 0,
                        bytes_out: body.len() as u64,
                        started: wall_now(),
                        duration: 0.0,
                        memo,
                        held,
                        request_body,
                        response_body: body[..route.capture.min(body.len())].to_vec(),
                        request_ended,
                        captured: route.capture > 0,
                    };
                    let written = async {
                        tcp.write_all(&response).await?;
                        tcp.write_all(&body).await?;
                        tcp.flush().await
                    };
                    let ok = tokio::time::timeout(public.spec.body_timeout, written)
                        .await
                        .is_ok_and(|w| w.is_ok());
                    public.counters.served.fetch_add(1, Ordering::Relaxed);
                    if !public.tallies.count(&record) {
                        public.inbox.push_served(record);
                    }
                    if !(ok && keep) {
                        let _ = tcp.shutdown().await;
                        break end_leg(leg);
                    }
                    buf.drain(..len + whole.unwrap_or(0));
                    first = false;
                    continue;
                }
                // a close, or a response's decision given for a request: closed
                Decision::Close | Decision::Rewrite { .. } | Decision::Events { .. } => {
                    let _ = tcp.shutdown().await;
                    break end_leg(leg);
                }
                Decision::Python => break hand_over(tcp, peer, buf, first, &public, leg, ticket),
            }
        }
        if route.ws_tcp {
            // the edge answers the upgrade itself and converts (wstcp.rs); the connection
            // ends with it
            end_leg(leg);
            let Some((tcp, buf)) =
                converted(tcp, buf, &head, &route, &public, peer, local, given).await
            else {
                return;
            };
            break hand_over(tcp, peer, buf, first, &public, None, ticket);
        }
        // the proxy stream: the one kept, or a new one
        let fresh = match head.framing {
            Framing::Length(n) => {
                public.spec.fresh_stream_body > 0 && n > public.spec.fresh_stream_body
            }
            Framing::Chunked => public.spec.fresh_stream_body > 0, // a length not known
            _ => false,
        };
        let kept = match leg.take() {
            Some(mut l) if l.reusable && !fresh && same_route(&l.route, &route) => {
                l.route = route.clone(); // what this request's decision said of its answer
                Some(l)
            }
            Some(l) => {
                l.end();
                None
            }
            None => None,
        };
        scratch.settle();
        let mut out = std::mem::take(&mut scratch.out);
        let current = match kept {
            Some(l) => l,
            None => {
                let Some(session) = route.session.clone() else {
                    // a cloud endpoint's request decided to go on with no target of its own
                    // (never, from Python): Python's
                    break hand_over(tcp, peer, buf, first, &public, None, ticket);
                };
                let Some(sid) = open_stream(&session).await else {
                    // all slots taken by open streams, or the session ended: Python waits for
                    // a slot, or gives the answer the route's end calls for
                    break hand_over(tcp, peer, buf, first, &public, None, ticket);
                };
                let wakes = session.own(sid);
                let mut header =
                    http::proxy_header(&route.tunnel_id, &client_addr, &public.spec.scheme, "3");
                if let Some((version, dest)) = &route.proxy {
                    header.extend(crate::proxyproto::header(*version, &client_addr, dest));
                }
                let h2 = match route.h2_upstream {
                    Some(scheme) => {
                        let (end, held) =
                            crate::h2up::start(session.clone(), sid, wakes.clone(), header, scheme);
                        let (rd, wr) = tokio::io::split(end);
                        Some(H2Leg {
                            rd: tokio::sync::Mutex::new(rd),
                            wr: tokio::sync::Mutex::new(wr),
                            _held: held,
                        })
                    }
                    None => {
                        out.extend_from_slice(&header);
                        None
                    }
                };
                Leg {
                    route: route.clone(),
                    session,
                    sid,
                    wakes,
                    reusable: false,
                    h2,
                }
            }
        };
        first = false;
        let raw_head = buf[..head.len].to_vec();
        buf.drain(..head.len);
        let outcome = exchange(
            &mut tcp,
            &mut buf,
            &head,
            raw_head,
            current,
            &mut out,
            &mut scratch,
            &public,
            peer,
            local,
            &client_ip,
            given,
        )
        .await;
        scratch.out = out;
        match outcome {
            (true, l) => {
                leg = l;
                public.counters.served.fetch_add(1, Ordering::Relaxed);
            }
            (false, l) => {
                public.counters.served.fetch_add(1, Ordering::Relaxed);
                end_leg(l);
                return;
            }
        }
    }
}

/// A WebSocket-TCP route's request (edge/wstcp.py's rules): a WebSocket upgrade is answered
/// 101 and converted to the route's stream until either side ends (wstcp.rs), anything else
/// answered 400 ERR_NGROK_3002; each recorded as the Python path records it (the 101 when it
/// is sent). Some: no stream could be opened now, the connection and its bytes are Python's.
#[allow(clippy::too_many_arguments)]
async fn converted<C: Conn>(
    mut tcp: C,
    mut buf: Vec<u8>,
    head: &RequestHead,
    route: &Route,
    public: &Public,
    peer: SocketAddr,
    local: SocketAddr,
    given: Given,
) -> Option<(C, Vec<u8>)> {
    let started = Instant::now();
    let mut record = Served {
        route: route.key,
        tls: public.spec.scheme == "https",
        peer,
        local,
        request_head: buf[..head.len].to_vec(),
        status: 0,
        response_head: Vec::new(),
        bytes_in: 0,
        bytes_out: 0,
        started: wall_now(),
        duration: 0.0,
        memo: given.memo,
        held: given.held,
        request_body: Vec::new(),
        response_body: Vec::new(),
        request_ended: true,
        captured: route.capture > 0,
    };
    let answered = |mut record: Served, answer: &[u8]| {
        let at = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(answer.len(), |p| p + 4);
        record.response_head = answer[..at].to_vec();
        record.bytes_out = (answer.len() - at) as u64;
        http::keep(&mut record.response_body, route.capture, &answer[at..]);
        record.duration = started.elapsed().as_secs_f64();
        public.counters.served.fetch_add(1, Ordering::Relaxed);
        if !public.tallies.count(&record) {
            public.inbox.push_served(record);
        }
    };
    let (accept, session) = match (http::websocket_accept(head), route.session.clone()) {
        (Some(accept), Some(session)) => (accept, session),
        (accept, _) => {
            let (status, code, msg) = match accept {
                None => (400, "ERR_NGROK_3002", crate::wstcp::NOT_UPGRADE),
                Some(_) => (502, "ERR_NGROK_3200", "The endpoint is offline."),
            };
            let answer = error_answer(status, code, msg);
            record.status = status;
            let _ = tcp.write_all(&answer).await;
            let _ = tcp.shutdown().await;
            answered(record, &answer);
            return None;
        }
    };
    let Some(sid) = open_stream(&session).await else {
        return Some((tcp, buf)); // Python waits for a slot, or answers as the route's end says
    };
    let wakes = session.own(sid);
    let client_addr = peer.to_string();
    let mut header = http::proxy_header(&route.tunnel_id, &client_addr, &public.spec.scheme, "3");
    if let Some((version, dest)) = &route.proxy {
        header.extend(crate::proxyproto::header(*version, &client_addr, dest));
    }
    if session.write_owned(sid, &wakes, &header).await.is_err() {
        session.disown(sid);
        let answer = error_answer(502, "ERR_NGROK_3200", "The endpoint is offline.");
        record.status = 502;
        let _ = tcp.write_all(&answer).await;
        let _ = tcp.shutdown().await;
        answered(record, &answer);
        return None;
    }
    let switched = format!(
        "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: {accept}\r\n\r\n"
    );
    // recorded as sent, as the Python path records it (its write may still fail)
    record.status = 101;
    answered(record, switched.as_bytes());
    if tcp.write_all(switched.as_bytes()).await.is_err() {
        session.disown(sid); // the client went away before its 101
        return None;
    }
    buf.drain(..head.len);
    let held = crate::carrier::hold(&public.carried, |c| &c.splices);
    crate::wstcp::run(tcp, session, sid, wakes, buf).await;
    drop(held);
    public.carried.spliced.fetch_add(1, Ordering::Relaxed);
    None
}

/// What Python decided of a decided route's request: the head to send (None: the core
/// writes it, with the fields the policy appended if any) and the memo its record returns.
#[derive(Default)]
struct Given {
    head: Option<Vec<u8>>,
    /// Fields the policy appended (the core writes the head with them).
    added: Vec<http::Field>,
    memo: Option<Memo>,
    /// A held decision (held.rs), not one Python made for this request.
    held: bool,
}

/// Seconds since the epoch.
fn wall_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A slot in grace (mux.rs `slot_grace`: a stream of ours that ended less than 200 ms ago)
/// is waited for here at most this long in all: at a high rate of new streams (a new
/// connection per request) the grace, not open streams, is what holds the slots.
pub const SLOT_WAIT: Duration = Duration::from_secs(2);

/// A new stream of ours on `session`, waiting for the slots in grace to come back when they
/// are what is full (at most SLOT_WAIT); None when the slots are held by open streams (Python
/// waits for those, with the session's events) or the session ended.
async fn open_stream(session: &Session) -> Option<u32> {
    let deadline = Instant::now() + SLOT_WAIT;
    loop {
        match session.with(|st| st.open()) {
            Ok(sid) => return Some(sid),
            Err(StreamError::Exhausted(_)) => {
                let next = session.with(|st| st.next_slot())?;
                if Instant::now() + next > deadline {
                    return None;
                }
                tokio::time::sleep(next.max(Duration::from_millis(1))).await;
            }
            Err(_) => return None,
        }
    }
}

/// The same endpoint on the same session (a route pushed again to renew it is the same).
fn same_route(a: &Route, b: &Route) -> bool {
    a.key == b.key && same_session(&a.session, &b.session) && a.tunnel_id == b.tunnel_id
}

/// The same agent session, or none on both.
fn same_session(a: &Option<Arc<Session>>, b: &Option<Arc<Session>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

fn end_leg(leg: Option<Leg>) {
    if let Some(l) = leg {
        l.end();
    }
}

fn hand_over<C: Conn>(
    tcp: C,
    peer: SocketAddr,
    data: Vec<u8>,
    first: bool,
    public: &Public,
    leg: Option<Leg>,
    ticket: Ticket,
) {
    end_leg(leg);
    tcp.hand_over(peer, data, first, public, ticket);
}

/// Up to READ_CHUNK bytes of a stream appended to `buf`: 0 at the agent's EOF.
async fn stream_read(leg: &Leg, buf: &mut Vec<u8>) -> Result<usize, StreamError> {
    if let Some(h2) = &leg.h2 {
        let start = buf.len();
        buf.resize(start + READ_CHUNK, 0);
        let read = h2.rd.lock().await.read(&mut buf[start..]).await;
        buf.truncate(start + *read.as_ref().unwrap_or(&0));
        return read.map_err(|e| StreamError::Reset(e.to_string()));
    }
    leg.session
        .read_owned(leg.sid, &leg.wakes, buf, READ_CHUNK)
        .await
}

/// `data` queued on the stream as its window allows, then sent.
async fn stream_write(leg: &Leg, data: &[u8]) -> Result<(), StreamError> {
    if let Some(h2) = &leg.h2 {
        return h2
            .wr
            .lock()
            .await
            .write_all(data)
            .await
            .map_err(|e| StreamError::Reset(e.to_string()));
    }
    leg.session.write_owned(leg.sid, &leg.wakes, data).await
}

/// The contract's error body (edge/http_io.py error_body) and its operation id.
pub(crate) fn error_body(status: u16, code: &str, msg: &str) -> (String, String) {
    let op = operation_id();
    let body = format!(
        "{{\"error_code\": {}, \"status_code\": {}, \"msg\": {}, \"details\": {{\"operation_id\": {}}}}}",
        http::json_str(code),
        status,
        http::json_str(msg),
        http::json_str(&op)
    );
    (body, op)
}

/// The contract's error answer (edge/http_io.py error_response), the connection closed after.
fn error_answer(status: u16, code: &str, msg: &str) -> Vec<u8> {
    let (body, op) = error_body(status, code, msg);
    format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nngrok-error-code: {code}\r\noperation-id: {op}\r\nconnection: close\r\n\r\n{body}",
        http::phrase(status),
        body.len()
    )
    .into_bytes()
}

/// The first `capture` data bytes of a request's body that came with its head (`after`: the
/// bytes read past the head), and whether they are the whole body.
fn kept_after_head(head: &RequestHead, after: &[u8], capture: usize) -> (Vec<u8>, bool) {
    match head.framing {
        Framing::Length(n) => {
            let here = (n.min(after.len() as u64)) as usize;
            let mut kept = Vec::new();
            http::keep(&mut kept, capture, &after[..here]);
            (kept, here as u64 == n)
        }
        Framing::Chunked => {
            let mut chunks = http::Chunks::keeping(capture);
            let done = chunks.feed(after).is_ok_and(|(_, done)| done);
            (chunks.kept, done)
        }
        _ => (Vec::new(), true),
    }
}

/// What [`read_body`] read of a request's body for its decision.
struct BodyRead {
    /// Its first data bytes, at most the ask (chunk framing left out).
    data: Vec<u8>,
    /// `data` is the whole body.
    complete: bool,
    /// The whole body is in the buffer: its bytes there (framing included) past the head.
    extent: Option<usize>,
}

/// Reads into `buf` (past the head) until `limit` data bytes of the body are there, one more
/// tells it is longer, or the body ended; each read (at most [`READ_CHUNK`]) within
/// `timeout`, all of them within [`BODY_READ_DEADLINE`]. The bytes stay in `buf`, unsent: the
/// decision sends them on by the client's framing, or hands them to Python with the
/// connection. A chunked body is read until its bytes in `buf` pass 2 × `limit` +
/// [`BODY_FRAMING_SLACK`] (then seen as longer than the ask). None: the client ended or
/// stalled first, or broke its chunked framing.
async fn read_body<C: Conn>(
    tcp: &mut C,
    buf: &mut Vec<u8>,
    head: &RequestHead,
    limit: usize,
    timeout: Duration,
) -> Option<BodyRead> {
    let start = head.len;
    let deadline = tokio::time::Instant::now() + BODY_READ_DEADLINE;
    let mut chunks = http::Chunks::keeping(limit + 1);
    let mut fed = start; // (chunked) the bytes of buf fed to `chunks`
    loop {
        match head.framing {
            Framing::Length(n) => {
                let want = n.min(limit as u64 + 1) as usize;
                let here = buf.len() - start;
                if here >= want {
                    let complete = n <= limit as u64;
                    return Some(BodyRead {
                        data: buf[start..start + want.min(limit)].to_vec(),
                        complete,
                        extent: complete.then_some(n as usize),
                    });
                }
            }
            Framing::Chunked => {
                let (take, done) = chunks.feed(&buf[fed..]).ok()?;
                fed += take;
                let longer = chunks.kept.len() > limit;
                if done || longer || fed - start > 2 * limit + BODY_FRAMING_SLACK {
                    let complete = done && !longer;
                    let mut data = std::mem::take(&mut chunks.kept);
                    data.truncate(limit);
                    return Some(BodyRead {
                        data,
                        complete,
                        extent: complete.then_some(fed - start),
                    });
                }
            }
            _ => {
                return Some(BodyRead {
                    data: Vec::new(),
                    complete: true,
                    extent: Some(0),
                })
            }
        }
        // one read of READ_CHUNK at most (read_buf would fill whatever the buffer's growth
        // left spare, as much again as it holds)
        let end = buf.len();
        buf.resize(end + READ_CHUNK, 0);
        let by = deadline.min(tokio::time::Instant::now() + timeout);
        let n = match tokio::time::timeout_at(by, tcp.read(&mut buf[end..])).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => 0,
        };
        buf.truncate(end + n);
        if n == 0 {
            return None;
        }
    }
}

/// A new operation id (chalicelib/core/ids.py new_id("op")): milliseconds and 112 random
/// bits, 27 base-62 digits.
fn operation_id() -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let mut random = [0u8; 14];
    // SAFETY: getrandom writes at most random.len() bytes into the buffer.
    unsafe {
        libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0);
    }
    let mut number = (millis << 112) | random.iter().fold(0u128, |n, b| (n << 8) | *b as u128);
    let mut digits = [b'0'; 27];
    for d in digits.iter_mut().rev() {
        *d = ALPHABET[(number % 62) as usize];
        number /= 62;
    }
    format!("op_{}", String::from_utf8_lossy(&digits))
}

enum Failed {
    /// The stream could not be written: the endpoint went offline.
    Offline,
    /// The agent ended the stream before a response: its upstream is unreachable.
    Unreachable,
    /// Not a valid HTTP/1.1 response.
    BadResponse,
    /// The client went away, or failed a bound: close without an answer.
    Client,
}

/// One request served on `leg`: (keep the connection, the leg to keep).
#[allow(clippy::too_many_arguments)]
async fn exchange<C: Conn>(
    tcp: &mut C,
    buf: &mut Vec<u8>,
    head: &RequestHead,
    raw_head: Vec<u8>,
    leg: Leg,
    out: &mut Vec<u8>,
    scratch: &mut Scratch,
    public: &Public,
    peer: SocketAddr,
    local: SocketAddr,
    client_ip: &str,
    given: Given,
) -> (bool, Option<Leg>) {
    let started = Instant::now();
    let wall = wall_now();
    let spec = &public.spec;
    // whether the head the agent gets asks to switch (a decided head may have dropped it)
    let asked = match &given.head {
        Some(decided) => matches!(http::parse_request(decided), Parsed::Done(h) if h.upgrade),
        None => head.upgrade,
    };
    match given.head {
        Some(decided) => out.extend_from_slice(&decided),
        None => http::upstream_head_with(head, &given.added, client_ip, &spec.scheme, out),
    }
    let mut body_left = match head.framing {
        Framing::Length(n) => n,
        _ => 0,
    };
    // a chunked body: its bytes pass unchanged, its end found by its framing
    let capture = leg.route.capture;
    let mut chunks = (head.framing == Framing::Chunked).then(|| http::Chunks::keeping(capture));
    let mut kept = Vec::new(); // a Content-Length body's first bytes (the inspector's)
    let (now, body_done) = match chunks.as_mut() {
        Some(c) => match c.feed(buf) {
            Ok(fed) => fed,
            Err(_) => return (false, Some(leg)), // bad framing: closed, as Python closes
        },
        None => {
            let now = (body_left.min(buf.len() as u64)) as usize;
            (now, body_left == now as u64)
        }
    };
    if chunks.is_none() {
        http::keep(&mut kept, capture, &buf[..now]);
    }
    out.extend_from_slice(&buf[..now]);
    buf.drain(..now);
    let bytes_in = match &chunks {
        Some(c) => c.data,
        None => {
            body_left -= now as u64;
            now as u64
        }
    };
    let mut record = Served {
        route: leg.route.key,
        tls: spec.scheme == "https", // a relayed one too (adopted)
        peer,
        local,
        request_head: raw_head,
        status: 0,
        response_head: Vec::new(),
        bytes_in,
        bytes_out: 0,
        started: wall,
        duration: 0.0,
        memo: given.memo,
        held: given.held,
        request_body: Vec::new(),
        response_body: Vec::new(),
        request_ended: body_done,
        captured: capture > 0,
    };
    let host = head.host.clone();
    let abort = tcp.abort();
    let wrote = tokio::select! {
        wrote = stream_write(&leg, out) => wrote.map_err(|_| Failed::Offline),
        _ = aborted(&abort) => Err(Failed::Client),
    };
    let result = if let Err(failed) = wrote {
        record.request_body = match chunks.as_mut() {
            Some(c) => std::mem::take(&mut c.kept),
            None => std::mem::take(&mut kept),
        };
        Err((failed, false))
    } else {
        let multiplexed = tcp.multiplexed();
        let (mut rd, mut wr) = tcp.halves();
        let pumped = AtomicBool::new(body_done);
        let carried = AtomicU64::new(0);
        let Scratch {
            rbuf, pipelined, ..
        } = scratch;
        let done = {
            // The client's side: the rest of the body, then watched while the response comes
            // (edge/public.py watch_client): a reset ends the exchange at once, the agent
            // silent or not; a FIN is a half-close and is not watched; bytes of a pipelined
            // request wait (up to MAX_HEAD_BYTES) for the next head.
            let client_side = async {
                if let Some(c) = chunks.as_mut().filter(|_| !body_done) {
                    let after = c.data;
                    pump_chunked(
                        &mut rd,
                        &leg,
                        c,
                        spec.body_timeout,
                        &carried,
                        after,
                        pipelined,
                    )
                    .await?;
                    pumped.store(true, Ordering::Relaxed);
                } else if body_left > 0 {
                    let taken = &mut kept;
                    pump_body(&mut rd, &leg, body_left, spec.body_timeout, &carried, taken).await?;
                    pumped.store(true, Ordering::Relaxed);
                }
                loop {
                    if pipelined.len() >= http::MAX_HEAD_BYTES {
                        std::future::pending::<()>().await;
                    }
                    pipelined.reserve(4096);
                    match rd.read_buf(pipelined).await {
                        Ok(0) => std::future::pending::<()>().await,
                        Ok(_) => {}
                        Err(_) => return Err::<(), ()>(()),
                    }
                }
            };
            tokio::pin!(client_side);
            let respond = respond(
                &mut wr,
                &leg,
                head,
                asked,
                multiplexed,
                &mut record,
                rbuf,
                public,
            );
            tokio::pin!(respond);
            tokio::select! {
                _ = &mut client_side => Err((Failed::Client, false)),
                done = &mut respond => done.map(|r| (r, pumped.load(Ordering::Relaxed))),
                // an HTTP/2 stream reset while the exchange waits on the agent's window
                _ = aborted(&abort) => Err((Failed::Client, false)),
            }
        };
        record.bytes_in += carried.load(Ordering::Relaxed);
        record.request_body = match chunks.as_mut() {
            Some(c) => std::mem::take(&mut c.kept),
            None => kept,
        };
        record.request_ended = pumped.load(Ordering::Relaxed);
        buf.extend_from_slice(pipelined);
        done
    };
    record.duration = started.elapsed().as_secs_f64();
    if result.is_ok() && record.status == 101 && leg.h2.is_none() {
        // switched: recorded now (as the Python path records a 101), then both sides' bytes
        // carried until both are done (splice.rs), the client's read so far first, the
        // agent's after its 101 too; the connection ends with it
        if !public.tallies.count(&record) {
            public.inbox.push_served(record);
        }
        let to_client = std::mem::take(&mut scratch.rbuf);
        let held = crate::carrier::hold(&public.carried, |c| &c.splices);
        let Leg {
            session,
            sid,
            wakes,
            ..
        } = leg;
        splice::run(
            &mut *tcp,
            session,
            sid,
            wakes,
            std::mem::take(buf),
            to_client,
        )
        .await;
        drop(held);
        public.carried.spliced.fetch_add(1, Ordering::Relaxed);
        return (false, None);
    }
    let (keep, leg) = match result {
        Ok(((client_keep, leg_keep), body_done)) => {
            // (an upgrade answered by anything but a 101 ends the connection, as Python's
            // HTTP/1.1 ends it)
            let client_keep = client_keep && !head.upgrade;
            let mut leg = leg;
            leg.reusable = leg_keep && body_done;
            if client_keep && body_done {
                (true, Some(leg))
            } else {
                let _ = tcp.shutdown().await;
                (false, Some(leg))
            }
        }
        Err((failed, started)) => {
            let answer = match failed {
                Failed::Offline => Some((
                    502,
                    "ERR_NGROK_3200",
                    format!("The endpoint {}://{host} is offline.", spec.scheme),
                )),
                Failed::Unreachable => Some((
                    502,
                    "ERR_NGROK_8012",
                    format!(
                        "The agent serving {}://{host} could not reach its upstream service.",
                        spec.scheme
                    ),
                )),
                Failed::BadResponse => Some((
                    502,
                    "ERR_NGROK_3004",
                    "The upstream server returned an invalid or incomplete HTTP response."
                        .to_string(),
                )),
                Failed::Client => None,
            };
            if let (Some((status, code, msg)), false) = (answer, started) {
                record.status = status;
                let answer = error_answer(status, code, &msg);
                if capture > 0 {
                    // the record's body: the answer's, as the client got it
                    let at = answer
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .map_or(0, |p| p + 4);
                    http::keep(&mut record.response_body, capture, &answer[at..]);
                }
                let _ = tcp.write_all(&answer).await;
                let _ = tcp.shutdown().await;
            }
            (false, Some(leg))
        }
    };
    if record.status != 0 && !public.tallies.count(&record) {
        public.inbox.push_served(record);
    }
    (keep, leg)
}

/// The rest of a Content-Length body, client to stream (`carried` counts the bytes as they
/// go: a response may end the exchange before the body is all sent).
async fn pump_body<R: AsyncRead + Unpin>(
    rd: &mut R,
    leg: &Leg,
    mut left: u64,
    timeout: Duration,
    carried: &AtomicU64,
    kept: &mut Vec<u8>,
) -> Result<(), ()> {
    let capture = leg.route.capture;
    let mut chunk = vec![0u8; READ_CHUNK.min(left as usize).max(1)];
    while left > 0 {
        let want = (left as usize).min(chunk.len());
        let n = match tokio::time::timeout(timeout, rd.read(&mut chunk[..want])).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return Err(()),
            Ok(Ok(n)) => n,
        };
        http::keep(kept, capture, &chunk[..n]);
        stream_write(leg, &chunk[..n]).await.map_err(|_| ())?;
        left -= n as u64;
        carried.fetch_add(n as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// The rest of a chunked body, client to stream, passed through as it comes until its last
/// chunk and trailers; bytes after them are the next request's (`pipelined`). `carried`
/// counts the body's data bytes past the `before` already counted; bad framing ends it.
async fn pump_chunked<R: AsyncRead + Unpin>(
    rd: &mut R,
    leg: &Leg,
    chunks: &mut http::Chunks,
    timeout: Duration,
    carried: &AtomicU64,
    before: u64,
    pipelined: &mut Vec<u8>,
) -> Result<(), ()> {
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        let n = match tokio::time::timeout(timeout, rd.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return Err(()),
            Ok(Ok(n)) => n,
        };
        let (take, done) = chunks.feed(&chunk[..n]).map_err(|_| ())?;
        stream_write(leg, &chunk[..take]).await.map_err(|_| ())?;
        carried.store(chunks.data - before, Ordering::Relaxed);
        if done {
            pipelined.extend_from_slice(&chunk[take..n]);
            return Ok(());
        }
    }
}

/// The agent's response relayed: (the client's connection stays open, the stream may serve
/// the next request); Err((why, whether the response had begun)).
#[allow(clippy::too_many_arguments)]
async fn respond<W: AsyncWrite + Unpin>(
    wr: &mut W,
    leg: &Leg,
    req: &RequestHead,
    asked: bool,
    multiplexed: bool,
    record: &mut Served,
    rbuf: &mut Vec<u8>,
    public: &Public,
) -> Result<(bool, bool), (Failed, bool)> {
    let head_request = req.method == b"HEAD";
    let resp: ResponseHead = loop {
        match http::parse_response(rbuf) {
            Parsed::Done(resp) if resp.status < 200 => {
                if resp.status == 101 && !(asked && http::switches(&resp)) {
                    // no upgrade was asked of the agent, or its 101 does not say it switches
                    // (edge/http1.py refuses both: 502)
                    return Err((Failed::BadResponse, false));
                }
                if resp.status == 101 {
                    // switched (edge/public.py `_switch`): the head as the agent gave it,
                    // recorded; the exchange carries raw bytes both ways from now on
                    let mut out = Vec::new();
                    http::client_head(&resp, false, false, &mut out);
                    record.status = 101;
                    record.response_head = rbuf[..resp.len].to_vec();
                    rbuf.drain(..resp.len);
                    wr.write_all(&out)
                        .await
                        .map_err(|_| (Failed::Client, true))?;
                    return Ok((false, false));
                }
                let mut out = Vec::new();
                http::client_head(&resp, true, false, &mut out);
                rbuf.drain(..resp.len);
                wr.write_all(&out)
                    .await
                    .map_err(|_| (Failed::Client, false))?;
                continue;
            }
            Parsed::Done(resp) => break resp,
            Parsed::Invalid(_) => return Err((Failed::BadResponse, false)),
            Parsed::Partial => {}
        }
        match stream_read(leg, rbuf).await {
            Ok(0) if rbuf.is_empty() => return Err((Failed::Unreachable, false)),
            Ok(0) => return Err((Failed::BadResponse, false)),
            Ok(_) => {}
            Err(_) => return Err((Failed::Unreachable, false)),
        }
    };
    let head_bytes = rbuf[..resp.len].to_vec();
    rbuf.drain(..resp.len);
    let mut resp = resp;
    let mut rewritten = false;
    let mut encoding = None;
    let bodiless = head_request || resp.status == 204 || resp.status == 304 || resp.status < 200;
    // what the agent's side delimits (none for a response that has no body, whatever its head
    // says: client_head frames the client's side alike)
    let from_agent = if bodiless {
        Framing::None
    } else {
        resp.framing
    };
    let mut left = match from_agent {
        Framing::Length(n) => n,
        _ => 0,
    };
    let capture = leg.route.capture;
    // (every data byte of a chunked body kept, taken as it is fed, when the core frames the
    // client's side itself; else the inspector's first bytes)
    let mut chunks = http::Chunks::keeping(usize::MAX);
    let mut ended = matches!(from_agent, Framing::None | Framing::Length(0));
    // what the response phase read of the agent's body (Decision::Body), unsent yet
    let mut prefix: Option<Vec<u8>> = None;
    // the body's server-sent events are Python's to rewrite, piece by piece, under this
    // ticket (Decision::Events)
    let mut events: Option<u64> = None;
    if leg.route.responses {
        // the route's response phase, in Python, on the head (decide.rs)
        let (ticket, waiting) = public.decisions.ticket();
        public.inbox.push_response(AskedResponse {
            ticket,
            route: leg.route.key,
            status: resp.status,
            fields: resp.fields.clone(),
            memo: record.memo.take(),
            body: None,
        });
        let Some(Decided {
            mut decision, memo, ..
        }) = waiting.decided(DECIDE_TIMEOUT).await
        else {
            return Err((Failed::Client, false));
        };
        record.memo = memo;
        if let Decision::Body { limit } = decision {
            // the phase reads the body (at most the ask, and one read past it), unsent, then
            // is asked again under the same ticket. Never on a stream of an HTTP/2 connection
            // (Python hands such a request over before it goes on: decide.rs Asked).
            if multiplexed {
                return Err((Failed::BadResponse, false)); // (answered: never a silent drop)
            }
            let limit = limit.min(BODY_READ_MAX);
            let (data, complete) =
                read_response_body(leg, rbuf, from_agent, &mut left, &mut chunks, limit)
                    .await
                    .map_err(|failed| (failed, false))?;
            ended = complete;
            let waiting = public.decisions.again(ticket);
            public.inbox.push_response(AskedResponse {
                ticket,
                route: leg.route.key,
                status: resp.status,
                fields: resp.fields.clone(),
                memo: record.memo.take(),
                body: Some(ReadBody {
                    data: Some(data.clone()),
                    complete,
                }),
            });
            let Some(again) = waiting.decided(DECIDE_TIMEOUT).await else {
                return Err((Failed::Client, false));
            };
            record.memo = again.memo;
            decision = again.decision;
            prefix = Some(data);
        }
        match decision {
            Decision::Rewrite {
                fields,
                body: Some(body),
                ..
            } => {
                // the body the phase rewrote, in place of the agent's (read whole), framed by
                // a Content-Length of its size (whatever framing fields Python's head had); a
                // response with no body gets its head alone
                if !bodiless && (!ended || prefix.is_none()) {
                    return Err((Failed::Client, false)); // (a broken run: never asked so)
                }
                drop(prefix.take()); // (what was read is done with: not held while writing)
                let agent_framing = resp.framing;
                resp.fields = fields;
                resp.fields.retain(|(name, _)| {
                    !name.eq_ignore_ascii_case(b"transfer-encoding")
                        && !name.eq_ignore_ascii_case(b"content-length")
                });
                let body = if bodiless { Vec::new() } else { body };
                if !bodiless {
                    let size = body.len().to_string().into_bytes();
                    resp.fields.push((b"content-length".to_vec(), size));
                }
                resp.framing = Framing::Length(body.len() as u64);
                let mut out = Vec::with_capacity(resp.len + 64);
                let (to_client, client_keep) =
                    http::client_head(&resp, head_request, req.close || req.upgrade, &mut out);
                record.status = resp.status;
                record.response_head = out.clone();
                record.bytes_out = body.len() as u64;
                http::keep(&mut record.response_body, capture, &body);
                // the head, then the body as it is (not copied after the head)
                wr.write_all(&out)
                    .await
                    .map_err(|_| (Failed::Client, false))?;
                wr.write_all(&body)
                    .await
                    .map_err(|_| (Failed::Client, true))?;
                // bytes past the response, a body only the agent's close ended, or one the
                // head said nothing of (a bodiless answer's, left unread): the stream serves
                // no other request
                let declared_body = !matches!(agent_framing, Framing::Length(0) | Framing::None);
                let leg_keep = !resp.close
                    && !req.close
                    && rbuf.is_empty()
                    && from_agent != Framing::UntilClose
                    && !(to_client == Framing::None && declared_body);
                return Ok((client_keep, leg_keep));
            }
            Decision::Rewrite { fields, encode, .. } => {
                resp.fields = fields;
                rewritten = true;
                encoding = encode;
            }
            Decision::Events { fields, encode } if prefix.is_none() => {
                resp.fields = fields;
                rewritten = true;
                encoding = encode;
                events = Some(ticket).filter(|_| !bodiless);
            }
            Decision::Respond {
                status,
                head,
                body,
                close,
            } => {
                // the policy answers instead: the agent's response is dropped, both ends close
                // (to an upgrade: saying so, as edge/http1.py's answer to an upgrade says it)
                let head = if close || !req.upgrade {
                    head
                } else {
                    http::closing(&head)
                };
                record.status = status;
                record.bytes_out = body.len() as u64;
                record.response_head = head.clone();
                http::keep(&mut record.response_body, leg.route.capture, &body);
                wr.write_all(&[head, body].concat())
                    .await
                    .map_err(|_| (Failed::Client, true))?;
                return Ok((false, false));
            }
            _ => return Err((Failed::Client, false)),
        }
    }
    let mut out = Vec::with_capacity(resp.len + rbuf.len() + 64);
    // compress-response: a response with a body goes to the client compressed and chunked
    // (its length is not known before its end), whatever the agent's framing
    let mut encoder = encoding.filter(|_| !bodiless).map(Encoder::new);
    // the core frames the client's side itself, chunked: a body compressed, or a chunked one
    // whose first data went to the response phase (read out of its framing: the rest is
    // framed anew); the agent's trailers are not sent then
    let reframed = encoder.is_some()
        || events.is_some()
        || (prefix.is_some() && from_agent == Framing::Chunked && !bodiless);
    let agent_framing = resp.framing;
    if reframed {
        resp.fields.retain(|(name, _)| {
            !name.eq_ignore_ascii_case(b"transfer-encoding")
                && !name.eq_ignore_ascii_case(b"content-length")
        });
        resp.framing = Framing::UntilClose; // (client_head chunks such a body)
    } else {
        chunks.keep_only(capture.saturating_sub(chunks.kept.len()));
    }
    // (an upgrade answered otherwise than by a 101: the connection ends, and says so, as
    // edge/http1.py's answer to an upgrade says it)
    let (to_client, client_keep) =
        http::client_head(&resp, head_request, req.close || req.upgrade, &mut out);
    resp.framing = agent_framing;
    record.status = resp.status;
    // the record's head: as the client gets it when the response phase rewrote it
    record.response_head = if rewritten { out.clone() } else { head_bytes };
    // whether the stream can serve another request
    let declared_body = !matches!(resp.framing, Framing::Length(0) | Framing::None);
    let mut leg_keep = !resp.close && !req.close;
    if to_client == Framing::None && declared_body {
        leg_keep = false; // a body the head said nothing of would answer nothing
    }
    // the client's chunks are the core's to end (with the last chunk, once the body ended)
    let chunked_here = reframed || from_agent == Framing::UntilClose;
    if let Some(data) = prefix.take().filter(|_| !bodiless) {
        // what the response phase read goes first, as the agent's framing has it
        let piece = match encoder.as_mut() {
            Some(enc) => enc.feed(&data),
            None => data,
        };
        http::keep(&mut record.response_body, capture, &piece);
        record.bytes_out += piece.len() as u64;
        if chunked_here {
            http::chunk(&piece, &mut out);
        } else {
            out.extend_from_slice(&piece);
        }
    }
    let mut begun = false;
    loop {
        // the body bytes in rbuf
        if !rbuf.is_empty() && !ended {
            if reframed {
                // the body's data, compressed as it comes when compressing (the record keeps
                // and counts what the client gets, as the Python path's did)
                let data = match from_agent {
                    Framing::Length(_) => {
                        let take = (left.min(rbuf.len() as u64)) as usize;
                        left -= take as u64;
                        ended = left == 0;
                        rbuf.drain(..take).collect::<Vec<u8>>()
                    }
                    Framing::Chunked => {
                        let (used, done) = chunks
                            .feed(rbuf)
                            .map_err(|_| (Failed::BadResponse, begun))?;
                        rbuf.drain(..used);
                        ended = done; // (its trailers, if any, are not sent: a new body)
                        std::mem::take(&mut chunks.kept)
                    }
                    Framing::UntilClose => std::mem::take(rbuf),
                    Framing::None => Vec::new(),
                };
                let data = match events {
                    // (a read of framing alone has nothing for Python, until the body's end)
                    Some(ticket) if !data.is_empty() || ended => {
                        // the head (and what went before) first: the client has it while
                        // Python rewrites the piece, and keeps it if the stream is cut
                        if !out.is_empty() {
                            wr.write_all(&out)
                                .await
                                .map_err(|_| (Failed::Client, begun))?;
                            out.clear();
                            begun = true;
                        }
                        rewrite_events(public, leg, ticket, record, data, ended)
                            .await
                            .map_err(|failed| (failed, begun))?
                    }
                    _ => data,
                };
                // (nothing to compress: no flush, no empty block sent as a chunk)
                let piece = match encoder.as_mut() {
                    Some(enc) if !data.is_empty() => enc.feed(&data),
                    _ => data,
                };
                http::keep(&mut record.response_body, capture, &piece);
                record.bytes_out += piece.len() as u64;
                http::chunk(&piece, &mut out);
            } else {
                match from_agent {
                    Framing::Length(_) => {
                        let take = (left.min(rbuf.len() as u64)) as usize;
                        http::keep(&mut record.response_body, capture, &rbuf[..take]);
                        out.extend_from_slice(&rbuf[..take]);
                        record.bytes_out += take as u64;
                        rbuf.drain(..take);
                        left -= take as u64;
                        ended = left == 0;
                    }
                    Framing::Chunked => {
                        let (used, done) = chunks
                            .feed(rbuf)
                            .map_err(|_| (Failed::BadResponse, begun))?;
                        out.extend_from_slice(&rbuf[..used]);
                        record.bytes_out = chunks.data; // the body's bytes, not its framing
                        record.response_body.append(&mut chunks.kept);
                        rbuf.drain(..used);
                        ended = done;
                    }
                    Framing::UntilClose => {
                        http::keep(&mut record.response_body, capture, rbuf);
                        http::chunk(rbuf, &mut out);
                        record.bytes_out += rbuf.len() as u64;
                        rbuf.clear();
                    }
                    Framing::None => {}
                }
            }
        }
        if ended && chunked_here && !bodiless {
            // the body ended (an UntilClose one: the agent closed while the phase read it)
            finish(encoder.take(), record, capture, &mut out);
            if from_agent == Framing::UntilClose {
                leg_keep = false;
            }
        }
        if ended && !rbuf.is_empty() {
            leg_keep = false; // bytes past the response: the stream is not reusable
        }
        if !out.is_empty() {
            wr.write_all(&out)
                .await
                .map_err(|_| (Failed::Client, true))?;
            out.clear();
            begun = true;
        }
        if ended {
            return Ok((client_keep, leg_keep));
        }
        match stream_read(leg, rbuf).await {
            Ok(0) if from_agent == Framing::UntilClose => {
                if let Some(ticket) = events {
                    // the stream's end: what the messages' rewriter still holds, run as one
                    let tail = rewrite_events(public, leg, ticket, record, Vec::new(), true)
                        .await
                        .map_err(|failed| (failed, begun))?;
                    let piece = match encoder.as_mut() {
                        Some(enc) if !tail.is_empty() => enc.feed(&tail),
                        _ => tail,
                    };
                    http::keep(&mut record.response_body, capture, &piece);
                    record.bytes_out += piece.len() as u64;
                    http::chunk(&piece, &mut out);
                }
                finish(encoder.take(), record, capture, &mut out);
                wr.write_all(&out)
                    .await
                    .map_err(|_| (Failed::Client, true))?;
                return Ok((client_keep, false));
            }
            Ok(0) | Err(_) => return Err((Failed::Unreachable, true)),
            Ok(_) => {}
        }
    }
}

/// One piece of an event stream's body through the policy's `on_event_stream_message` rules
/// (Decision::Events): the response row asked again with it (`ended`: the body's end) and
/// what Python sends instead (the messages it completed, rewritten); Err when Python cut the
/// response (a message past its bound: never passed on unrewritten) or did not answer.
async fn rewrite_events(
    public: &Public,
    leg: &Leg,
    ticket: u64,
    record: &Served,
    data: Vec<u8>,
    ended: bool,
) -> Result<Vec<u8>, Failed> {
    let waiting = public.decisions.again(ticket);
    public.inbox.push_response(AskedResponse {
        ticket,
        route: leg.route.key,
        status: record.status,
        fields: Vec::new(),
        memo: record.memo.clone(),
        body: Some(ReadBody {
            data: Some(data),
            complete: ended,
        }),
    });
    match waiting.decided(DECIDE_TIMEOUT).await {
        Some(Decided {
            decision: Decision::Rewrite {
                body: Some(body), ..
            },
            ..
        }) => Ok(body),
        _ => Err(Failed::Client),
    }
}

/// The end of a body the core chunks itself: the compressor's tail (when compressing), then
/// the last chunk.
fn finish(encoder: Option<Encoder>, record: &mut Served, capture: usize, out: &mut Vec<u8>) {
    if let Some(enc) = encoder {
        let tail = enc.finish();
        http::keep(&mut record.response_body, capture, &tail);
        record.bytes_out += tail.len() as u64;
        http::chunk(&tail, out);
    }
    out.extend_from_slice(b"0\r\n\r\n");
}

/// The agent's body read for the response phase (Decision::Body): its data (out of its
/// framing) until it ends or passes `limit` bytes (by at most one read: what one response
/// holds is bounded by the ask), and whether that is the whole body (a body of exactly
/// `limit` bytes is read to its end: whole); what was read is
/// consumed from `rbuf` (`left` and `chunks` go on from where it stopped). Err when the agent
/// ended the stream or broke its framing first.
async fn read_response_body(
    leg: &Leg,
    rbuf: &mut Vec<u8>,
    from_agent: Framing,
    left: &mut u64,
    chunks: &mut http::Chunks,
    limit: usize,
) -> Result<(Vec<u8>, bool), Failed> {
    let mut data = Vec::new();
    loop {
        match from_agent {
            Framing::None | Framing::Length(0) => return Ok((data, true)),
            Framing::Length(_) => {
                let take = ((*left).min(rbuf.len() as u64)) as usize;
                data.extend(rbuf.drain(..take));
                *left -= take as u64;
                if *left == 0 {
                    return Ok((data, true));
                }
            }
            Framing::Chunked => {
                let (used, done) = chunks.feed(rbuf).map_err(|_| Failed::BadResponse)?;
                rbuf.drain(..used);
                data.append(&mut chunks.kept);
                if done {
                    return Ok((data, true));
                }
            }
            Framing::UntilClose => data.append(rbuf),
        }
        if data.len() > limit {
            return Ok((data, false)); // past the ask: not all of it
        }
        match stream_read(leg, rbuf).await {
            Ok(0) if from_agent == Framing::UntilClose => return Ok((data, true)),
            // the agent ended before its body did (as the Python path's parser says it: not
            // a valid response), or its stream was reset (its upstream unreachable)
            Ok(0) => return Err(Failed::BadResponse),
            Err(_) => return Err(Failed::Unreachable),
            Ok(_) => {}
        }
    }
}
