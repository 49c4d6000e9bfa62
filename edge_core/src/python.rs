//! The Python module `edge_core`: the typed seam's lower side (edge/carrier.py and
//! edge/session.py are its upper side, edge_core.pyi its types).

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::create_exception;
use pyo3::exceptions::{PyConnectionError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict};

use crate::carrier::{AgentListen, Carrier, Where};
use crate::decide::{Decided, Decision, Memo, Target};
use crate::encode::Encoding;
use crate::held::{Held, Reads};
use crate::mux::{Limits, StreamError};
use crate::public::{PublicListen, Route, Routes, Served};
use crate::relay::RelayTo;
use crate::session;
use crate::tls::{certified_key, sni_server_config, SniResolver};
use crate::tls::{public_server_config_requiring, Requires};

create_exception!(edge_core, StreamReset, PyConnectionError);
create_exception!(edge_core, StreamsExhausted, StreamReset);

fn stream_error(e: StreamError) -> PyErr {
    match e {
        StreamError::Reset(why) => StreamReset::new_err(why),
        StreamError::Exhausted(why) => StreamsExhausted::new_err(why),
    }
}

/// One session handed over: (listener id, session, peer host, peer port, SNI, ALPN).
type Handed = (u64, Session, String, u16, Option<String>, Option<Vec<u8>>);
/// What the core's TLS handshake agreed: (SNI, version, cipher, ALPN), OpenSSL's names, the
/// number of what it required (0: the default), the client certificate it verified (DER).
type Facts = (
    String,
    &'static str,
    &'static str,
    Option<Vec<u8>>,
    u64,
    Option<Vec<u8>>,
);

fn facts_of(t: crate::public::TlsFacts) -> Facts {
    (t.sni, t.version, t.cipher, t.alpn, t.spec, t.client_cert)
}
/// One public connection handed over: (listener id, fd, peer host, peer port, bytes read,
/// no request served on it yet, None or the facts of the TLS the core carries on, (local
/// host, port)).
type Conn<'py> = (
    u64,
    i32,
    String,
    u16,
    Bound<'py, PyBytes>,
    bool,
    Option<Facts>,
    (String, u16),
);
type Fields<'py> = Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>;
/// One request the core served: (route key, status, (body bytes in, out, started, duration),
/// served over TLS, the rest of what it was: [`Exchange`], read only when a record needs it,
/// the memo its decision carried: a decided route's, whether that decision was a held one).
type ServedRow = (
    u64,
    u16,
    (u64, u64, f64, f64),
    bool,
    Exchange,
    Option<Py<PyAny>>,
    bool,
);
/// A decided route's request waiting for its decision: (ticket, route key, (peer host,
/// port), (local host, port), None or the TLS facts, method, target, fields (names in lower
/// case), no body follows, and, asked again after decide_body, what was read of the body:
/// (its first bytes or None when the client ended first, whether they are the whole body)),
/// whether it came on a stream of an HTTP/2 connection, and whether it is its connection's
/// first request asked about the route (its `on_tcp_connect` rules run on it).
type AskedRow<'py> = (
    u64,
    u64,
    (String, u16),
    (String, u16),
    Option<Facts>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Fields<'py>,
    bool,
    Option<(Option<Bound<'py, PyBytes>>, bool)>,
    bool,
    bool,
);
/// A carried connection that ended: (splice id, bytes read from the client, written to it).
type SplicedRow = (u64, u64, u64);
/// A decided route's response head waiting for its response phase: (ticket, route key,
/// status, fields as the agent sent them, the memo of the request's decision, and, asked
/// again after decide_body, what was read of the agent's body: (its first bytes, whether they
/// are the whole body)).
type ResponseRow<'py> = (
    u64,
    u64,
    u16,
    Fields<'py>,
    Option<Py<PyAny>>,
    Option<(Option<Bound<'py, PyBytes>>, bool)>,
);
type Taken<'py> = (
    Vec<Handed>,
    Vec<(u64, u8, u32)>,
    Vec<Conn<'py>>,
    Vec<ServedRow>,
    Vec<SplicedRow>,
    Vec<AskedRow<'py>>,
    Vec<ResponseRow<'py>>,
);

/// The algorithm a decide_* call names for the core to compress with (None: none);
/// ValueError for one it does not have.
fn encoding_of(encode: Option<&str>) -> PyResult<Option<Encoding>> {
    encode
        .map(|name| {
            Encoding::named(name).ok_or_else(|| {
                PyValueError::new_err(format!("the core does not compress with {name:?}"))
            })
        })
        .transpose()
}

/// The Python object a decision's memo holds (what the decide_* calls were given).
fn memo_of(py: Python<'_>, memo: Option<Memo>) -> Option<Py<PyAny>> {
    memo.and_then(|m| m.downcast::<Py<PyAny>>().ok())
        .map(|m| m.clone_ref(py))
}

/// Fields Python handed over, as the core keeps them (a `bytes` read as a slice: pyo3 reads a
/// `Vec<u8>` item by item, ~15 ns a byte).
fn owned_fields(given: Vec<(PyBackedBytes, PyBackedBytes)>) -> Vec<crate::http::Field> {
    given
        .into_iter()
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect()
}

fn fields<'py>(py: Python<'py>, given: &[crate::http::Field]) -> Fields<'py> {
    given
        .iter()
        .map(|(n, v)| (PyBytes::new(py, n), PyBytes::new(py, v)))
        .collect()
}

/// What a route holds of its decisions: a decided route without a response phase may hold
/// them for the facts `holds` names (held.rs).
fn held_of(
    decided: bool,
    responses: bool,
    holds: Option<Vec<String>>,
) -> PyResult<Option<Arc<Held>>> {
    match holds {
        Some(facts) if decided && !responses => Ok(Some(Arc::new(Held::new(
            Reads::parse(&facts).map_err(PyValueError::new_err)?,
        )))),
        Some(_) => Err(PyValueError::new_err(
            "holds: only a decided route without a response phase",
        )),
        None => Ok(None),
    }
}

/// A route's PROXY protocol header: `version` 0 for none, 1 or 2 towards `dest` (the
/// listener's address).
/// An endpoint that speaks HTTP/2 (h2up.rs): its upstream's scheme.
fn h2_upstream_of(h2_scheme: Option<&str>) -> PyResult<Option<&'static str>> {
    match h2_scheme {
        None => Ok(None),
        Some("http") => Ok(Some("http")),
        Some("https") => Ok(Some("https")),
        Some(_) => Err(PyValueError::new_err("h2_scheme: http or https")),
    }
}

/// The most data bytes of each body a route keeps for the inspector (`capture` is clamped to
/// it): a bound on each exchange's copy, whatever Python asks.
const MAX_CAPTURE: usize = 64 * 1024;

fn proxy_of(version: u8, dest: String) -> PyResult<Option<(u8, String)>> {
    match version {
        0 => Ok(None),
        1 | 2 => Ok(Some((version, dest))),
        _ => Err(PyValueError::new_err("proxy_proto: 0, 1 or 2")),
    }
}

/// The PROXY protocol header of `version` (1 or 2) for a connection from `client` to
/// `server` (`ip:port` each): proxyproto.rs, the edge's one implementation.
#[pyfunction]
fn proxy_protocol_header<'py>(
    py: Python<'py>,
    version: u8,
    client: &str,
    server: &str,
) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &crate::proxyproto::header(version, client, server))
}

fn seconds(value: f64, name: &str) -> PyResult<Duration> {
    if value.is_finite() && value >= 0.0 {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(PyValueError::new_err(format!(
            "{name} must be a number of seconds >= 0"
        )))
    }
}

/// The session bounds from a dict of the names of mux::Limits (every one given).
fn limits_of(given: &Bound<'_, PyDict>) -> PyResult<Limits> {
    let mut limits = Limits::default();
    for (key, value) in given.iter() {
        let key: String = key.extract()?;
        let count = || -> PyResult<usize> {
            let n: usize = value.extract()?;
            if n == 0 {
                return Err(PyValueError::new_err(format!("{key} must be > 0")));
            }
            Ok(n)
        };
        match key.as_str() {
            "window" => limits.window = count()?,
            "max_streams" => limits.max_streams = count()?,
            "max_local_streams" => limits.max_local_streams = count()?,
            "linger" => limits.linger = seconds(value.extract()?, &key)?,
            "slot_grace" => limits.slot_grace = seconds(value.extract()?, &key)?,
            "pre_auth_streams" => limits.pre_auth_streams = count()?,
            "pre_auth_bytes" => limits.pre_auth_bytes = count()?,
            "out_of_order_ids" => limits.out_of_order_ids = count()?,
            "credit_batch" => limits.credit_batch = count()?,
            "write_chunk" => limits.write_chunk = count()?,
            "flush_at" => limits.flush_at = count()?,
            "unsent_pause_at" => limits.unsent_pause_at = count()?,
            _ => return Err(PyValueError::new_err(format!("no session limit {key}"))),
        }
    }
    if limits.window > crate::mux::LENGTH_MAX || limits.pre_auth_bytes > limits.window {
        return Err(PyValueError::new_err(
            "window must fit a frame, pre_auth_bytes the window",
        ));
    }
    Ok(limits)
}

#[pyclass(frozen, module = "edge_core")]
struct Core {
    carrier: Carrier,
    /// Each agent listener's certificate per SNI name (set_names).
    resolvers: Mutex<HashMap<u64, Arc<SniResolver>>>,
}

impl Core {
    /// The listener of `scheme`'s routes, and what certificate `cert` requires of a handshake
    /// (HTTPS: a certificate set; none on the plain listener).
    fn routes_for(&self, scheme: &str, cert: u64) -> PyResult<(&Routes, u64)> {
        match scheme {
            "http" => Ok((&self.carrier.routes, 0)),
            "https" => match self.carrier.certs.with_spec(cert) {
                Some((_, spec)) => Ok((&self.carrier.tls_routes, spec)),
                None => Err(PyValueError::new_err(format!("no certificate {cert}"))),
            },
            _ => Err(PyValueError::new_err("scheme: http or https")),
        }
    }
}

#[pymethods]
impl Core {
    #[new]
    #[pyo3(signature = (threads = 0))]
    fn new(threads: usize) -> PyResult<Self> {
        Ok(Core {
            carrier: Carrier::new(threads).map_err(|e| PyOSError::new_err(e.to_string()))?,
            resolvers: Mutex::new(HashMap::new()),
        })
    }

    /// The descriptor that turns readable when sessions or events wait to be taken.
    #[getter]
    fn wake_fd(&self) -> i32 {
        self.carrier.inbox().wake_fd()
    }

    /// Start an agent listener on (host, port), or on the listening socket `fd` (the carrier
    /// owns it from then on). Returns (listener id, port).
    #[pyo3(signature = (chain_pem, key_pem, alpn, limits, *, host = None, port = 0, fd = None,
                        handshake_timeout = 15.0, max_handshakes = 1024))]
    #[allow(clippy::too_many_arguments)]
    fn listen_agents(
        &self,
        chain_pem: &[u8],
        key_pem: &[u8],
        alpn: Vec<Vec<u8>>,
        limits: &Bound<'_, PyDict>,
        host: Option<String>,
        port: u16,
        fd: Option<i32>,
        handshake_timeout: f64,
        max_handshakes: usize,
    ) -> PyResult<(u64, u16)> {
        if !(handshake_timeout.is_finite() && handshake_timeout > 0.0) {
            return Err(PyValueError::new_err(
                "handshake_timeout must be a positive number",
            ));
        }
        if max_handshakes == 0 {
            return Err(PyValueError::new_err("max_handshakes must be > 0"));
        }
        let limits = limits_of(limits)?;
        let (tls, resolver) = sni_server_config(chain_pem, key_pem, alpn)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let at = match (fd, host) {
            // SAFETY: the caller hands the descriptor over (documented in edge_core.pyi).
            (Some(fd), _) => Where::Socket(unsafe { StdTcpListener::from_raw_fd(fd) }),
            (None, Some(host)) => Where::Bind(host, port),
            (None, None) => return Err(PyValueError::new_err("give host and port, or fd")),
        };
        let spec = AgentListen {
            tls,
            handshake_timeout: Duration::from_secs_f64(handshake_timeout),
            max_handshakes,
            limits,
        };
        let (id, local) = self
            .carrier
            .listen_agents(at, spec)
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        self.resolvers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, resolver);
        Ok((id, local.port()))
    }

    /// Replace the certificates an agent listener serves per SNI name: `names` maps a
    /// lower-case host name to (chain PEM, key PEM); a handshake naming none of them gets the
    /// listener's own certificate. Nothing changes when one pair does not load (ValueError
    /// naming it). Returns how many names are served.
    fn set_names(
        &self,
        listener: u64,
        names: HashMap<String, (Vec<u8>, Vec<u8>)>,
    ) -> PyResult<usize> {
        let resolver = self
            .resolvers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&listener)
            .cloned()
            .ok_or_else(|| PyValueError::new_err(format!("no agent listener {listener}")))?;
        let mut loaded = HashMap::with_capacity(names.len());
        for (name, (chain, key)) in names {
            let pair = certified_key(&chain, &key)
                .map_err(|e| PyValueError::new_err(format!("{name}: {e}")))?;
            pair.keys_match()
                .map_err(|e| PyValueError::new_err(format!("{name}: {e}")))?;
            loaded.insert(name.to_ascii_lowercase(), pair);
        }
        resolver.set(loaded);
        Ok(resolver.names_served())
    }

    /// Start the public plain-HTTP listener (public.rs). Returns (listener id, port).
    /// With `adopting`: a listener without a socket (no host, port or fd), which serves the
    /// connections handed to it by `adopt` (plain TCP carrying HTTP, or the decrypted stream
    /// of HTTPS another instance terminated, by the HTTPS listener's routes); its port is 0.
    #[pyo3(signature = (scheme, *, head_timeout, idle_timeout, body_timeout, fresh_stream_body,
                        max_total, max_per_address, host = None, port = 0, fd = None,
                        handshake_timeout = 15.0, h2_stall_timeout = 30.0, adopting = false))]
    #[allow(clippy::too_many_arguments)]
    fn listen_public(
        &self,
        scheme: String,
        head_timeout: f64,
        idle_timeout: f64,
        body_timeout: f64,
        fresh_stream_body: u64,
        max_total: usize,
        max_per_address: usize,
        host: Option<String>,
        port: u16,
        fd: Option<i32>,
        handshake_timeout: f64,
        h2_stall_timeout: f64,
        adopting: bool,
    ) -> PyResult<(u64, u16)> {
        if scheme != "http" && scheme != "https" {
            return Err(PyValueError::new_err("scheme: http or https"));
        }
        if adopting && (host.is_some() || fd.is_some()) {
            return Err(PyValueError::new_err("an adopting listener has no socket"));
        }
        if max_total == 0 || max_per_address == 0 {
            return Err(PyValueError::new_err("the connection caps must be > 0"));
        }
        let spec = PublicListen {
            scheme,
            handshake_timeout: seconds(handshake_timeout, "handshake_timeout")?,
            head_timeout: seconds(head_timeout, "head_timeout")?,
            idle_timeout: seconds(idle_timeout, "idle_timeout")?,
            body_timeout: seconds(body_timeout, "body_timeout")?,
            fresh_stream_body,
            max_total,
            max_per_address,
            h2_stall_timeout: seconds(h2_stall_timeout, "h2_stall_timeout")?,
        };
        if adopting {
            return Ok((self.carrier.adopter(spec), 0));
        }
        let at = match (fd, host) {
            // SAFETY: the caller hands the descriptor over (documented in edge_core.pyi).
            (Some(fd), _) => Where::Socket(unsafe { StdTcpListener::from_raw_fd(fd) }),
            (None, Some(host)) => Where::Bind(host, port),
            (None, None) => return Err(PyValueError::new_err("give host and port, or fd")),
        };
        let (id, local) = self
            .carrier
            .listen_public(at, spec)
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        Ok((id, local.port()))
    }

    /// `host`'s requests on the listener of `scheme` are served by the core on `session`'s
    /// streams (a plain route) for `ttl` seconds, unless pushed again; on the HTTPS listener
    /// with the certificate `cert` (set_cert); each decided by Python first when `decided`
    /// (take's asked rows, the decide_* calls), and each response head too when `responses`
    /// (take's response rows, decide_rewrite); with `h2_scheme` ("http" or "https": its
    /// upstream's), the endpoint speaks HTTP/2 on its streams (h2up.rs). No `session`: a
    /// cloud endpoint's route, decided (each request answered by Python, or sent on to a
    /// target its decision names: decide_internal). `capture`: each exchange's first
    /// `capture` data bytes of the request's and the response's bodies go with its record
    /// (`Exchange.request_body`, `response_body`: an endpoint whose bodies the inspector
    /// captures). `ws_tcp`: the endpoint converts WebSockets to TCP (wstcp.rs): the core
    /// answers each upgrade and converts, and answers anything else 400.
    #[pyo3(signature = (host, key, session, tunnel_id, ttl, *, scheme = "http", cert = 0, decided = false, responses = false, holds = None, h2_scheme = None, proxy_proto = 0, proxy_dest = String::new(), capture = 0, ws_tcp = false))]
    #[allow(clippy::too_many_arguments)]
    fn set_route(
        &self,
        host: String,
        key: u64,
        session: Option<PyRef<'_, Session>>,
        tunnel_id: String,
        ttl: f64,
        scheme: &str,
        cert: u64,
        decided: bool,
        responses: bool,
        holds: Option<Vec<String>>,
        h2_scheme: Option<&str>,
        proxy_proto: u8,
        proxy_dest: String,
        capture: usize,
        ws_tcp: bool,
    ) -> PyResult<()> {
        let ttl = seconds(ttl, "ttl")?;
        let h2_upstream = h2_upstream_of(h2_scheme)?;
        if ws_tcp && (session.is_none() || h2_upstream.is_some()) {
            return Err(PyValueError::new_err(
                "a WebSocket-TCP route has a session and speaks HTTP/1.1",
            ));
        }
        if session.is_none() && !decided {
            return Err(PyValueError::new_err(
                "a route without a session is decided",
            ));
        }
        let held = held_of(decided, responses, holds)?;
        let (routes, spec) = self.routes_for(scheme, cert)?;
        routes.set(
            host,
            Route {
                key,
                session: session.map(|s| s.inner.clone()),
                tunnel_id,
                cert,
                spec,
                until: std::time::Instant::now() + ttl,
                proxy: proxy_of(proxy_proto, proxy_dest.clone())?,
                h2_upstream,
                capture: capture.min(MAX_CAPTURE),
                ws_tcp,
                decided,
                responses: decided && responses,
                held,
            },
        );
        Ok(())
    }

    /// `host`'s requests on the listener of `scheme` are served by the core for `ttl` seconds
    /// (unless pushed again), spread in turn over an endpoint pool's `members`, each a route
    /// of its own: (key, session, tunnel id, decided, responses, holds: as `set_route` takes
    /// them); on the HTTPS listener with the certificate `cert`. No member drops the host's
    /// routes.
    #[pyo3(signature = (host, members, ttl, *, scheme = "http", cert = 0, proxy_dest = String::new()))]
    #[allow(clippy::type_complexity)]
    fn set_pool(
        &self,
        host: String,
        members: Vec<(
            u64,
            PyRef<'_, Session>,
            String,
            bool,
            bool,
            Option<Vec<String>>,
            u8,
            usize,
        )>,
        ttl: f64,
        scheme: &str,
        cert: u64,
        proxy_dest: String,
    ) -> PyResult<()> {
        let ttl = seconds(ttl, "ttl")?;
        let (routes, spec) = self.routes_for(scheme, cert)?;
        let until = std::time::Instant::now() + ttl;
        let mut routes_of = Vec::with_capacity(members.len());
        for (key, session, tunnel_id, decided, responses, holds, proxy_proto, capture) in members {
            routes_of.push(Route {
                key,
                session: Some(session.inner.clone()),
                tunnel_id,
                cert,
                spec,
                until,
                proxy: proxy_of(proxy_proto, proxy_dest.clone())?,
                h2_upstream: None,
                capture: capture.min(MAX_CAPTURE),
                ws_tcp: false, // a pool's members are plain or decided routes
                decided,
                responses: decided && responses,
                held: held_of(decided, responses, holds)?,
            });
        }
        routes.set_pool(host, routes_of);
        Ok(())
    }

    /// `host`'s requests on the listener of `scheme` go to Python again; False when it had
    /// no route.
    #[pyo3(signature = (host, *, scheme = "http"))]
    fn drop_route(&self, host: &str, scheme: &str) -> bool {
        match scheme {
            "https" => self.carrier.tls_routes.drop_host(host),
            _ => self.carrier.routes.drop_host(host),
        }
    }

    fn clear_routes(&self) {
        self.carrier.routes.clear();
        self.carrier.tls_routes.clear();
        self.carrier.relays.clear();
        self.carrier.tls_relays.clear();
    }

    /// A new connection whose first request names `host` on the listener of `scheme` (and
    /// that has no route there) is relayed by the core to the cluster instance at `address`
    /// (`host:port`) for `ttl` seconds, unless pushed again: the relay line is `line` (its
    /// preamble, secret, kind and name) with the client's address (relay.rs). HTTPS: its
    /// TLS terminated with the certificate `cert` (set_cert) first.
    #[pyo3(signature = (host, address, line, ttl, *, scheme = "http", cert = 0))]
    fn set_relay(
        &self,
        host: String,
        address: String,
        line: Vec<u8>,
        ttl: f64,
        scheme: &str,
        cert: u64,
    ) -> PyResult<()> {
        let relays = match scheme {
            "http" => &self.carrier.relays,
            "https" if cert != 0 => &self.carrier.tls_relays,
            "https" => {
                return Err(PyValueError::new_err(
                    "an HTTPS relay needs its certificate",
                ))
            }
            _ => return Err(PyValueError::new_err("scheme: http or https")),
        };
        if line.contains(&b'\r') || line.contains(&b'\n') {
            return Err(PyValueError::new_err("the relay line has no line break"));
        }
        let until = Instant::now() + seconds(ttl, "ttl")?;
        relays.set(
            host,
            RelayTo {
                address,
                line,
                cert,
                until,
            },
        );
        Ok(())
    }

    fn drop_relay(&self, host: &str, scheme: &str) -> bool {
        match scheme {
            "https" => self.carrier.tls_relays.drop_host(host),
            _ => self.carrier.relays.drop_host(host),
        }
    }

    /// (connections relayed by a relay route, those the holder did not take).
    fn relay_counts(&self) -> (u64, u64) {
        let c = &self.carrier.public_counters;
        (
            c.relayed.load(Ordering::Relaxed),
            c.relays_refused.load(Ordering::Relaxed),
        )
    }

    /// Routes held: (plain-HTTP listener's, HTTPS listener's).
    fn route_count(&self) -> (usize, usize) {
        (self.carrier.routes.len(), self.carrier.tls_routes.len())
    }

    /// The certificate numbered `id` (a PEM chain, leaf first, and its key) for the HTTPS
    /// listener's routes: TLS 1.2 and 1.3, ALPN h2 and http/1.1; for a name whose TLS settings
    /// Python numbered `spec` (0: none beyond the default), TLS 1.3 only (`tls13_only`) or TLS
    /// 1.2 only (`tls12_only`), a client certificate chaining to one of `client_cas` (DER)
    /// required. A route is served only on a connection whose handshake was made for the
    /// same `spec` as its certificate's.
    #[pyo3(signature = (id, chain_pem, key_pem, *, spec = 0, tls13_only = false, tls12_only = false, client_cas = None))]
    #[allow(clippy::too_many_arguments)]
    fn set_cert(
        &self,
        id: u64,
        chain_pem: &[u8],
        key_pem: &[u8],
        spec: u64,
        tls13_only: bool,
        tls12_only: bool,
        client_cas: Option<Vec<Vec<u8>>>,
    ) -> PyResult<()> {
        if id == 0 {
            return Err(PyValueError::new_err("certificate ids start at 1"));
        }
        let requires = Requires {
            tls13_only,
            tls12_only,
            client_cas,
        };
        let config = public_server_config_requiring(chain_pem, key_pem, &requires)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        self.carrier.certs.set_requiring(id, config, spec);
        Ok(())
    }

    /// The certificate a ClientHello without a server name gets (0: none; such connections
    /// are Python's).
    fn set_nameless_cert(&self, id: u64) {
        self.carrier.certs.set_nameless(id)
    }

    /// False when there was no such certificate.
    fn drop_cert(&self, id: u64) -> bool {
        self.carrier.certs.drop_cert(id)
    }

    fn cert_count(&self) -> usize {
        self.carrier.certs.len()
    }

    /// (requests served, connections handed to Python, refused at a cap, evicted, held now,
    /// TLS handshakes failed).
    fn public_counters(&self) -> (u64, u64, u64, u64, usize, u64) {
        let c = &self.carrier.public_counters;
        (
            c.served.load(Ordering::Relaxed),
            c.handed.load(Ordering::Relaxed),
            c.refused.load(Ordering::Relaxed),
            c.evicted.load(Ordering::Relaxed),
            self.carrier.public_held(),
            c.failed_handshakes.load(Ordering::Relaxed),
        )
    }

    /// A session over the connected Unix stream socket `fd` (the core owns it from then on).
    fn attach(&self, fd: i32, limits: &Bound<'_, PyDict>) -> PyResult<Session> {
        let limits = limits_of(limits)?;
        // SAFETY: the caller hands the descriptor over (documented in edge_core.pyi).
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let inner = self
            .carrier
            .attach(owned, limits)
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        Ok(Session { inner })
    }

    /// Carry the connected stream socket `fd` (the core owns it from then on; a Unix socket
    /// with `unix`) and the stream `sid` of `session` both ways (edge_core/src/splice.rs),
    /// `to_stream` to the agent first and `to_client` to the client first. Its end comes in
    /// `take` under the id returned.
    #[pyo3(signature = (fd, session, sid, *, unix = false, to_stream = None, to_client = None))]
    fn splice(
        &self,
        fd: i32,
        session: &Session,
        sid: u32,
        unix: bool,
        to_stream: Option<&[u8]>,
        to_client: Option<&[u8]>,
    ) -> PyResult<u64> {
        // SAFETY: the caller hands the descriptor over (documented in edge_core.pyi).
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        self.carrier
            .splice(
                owned,
                unix,
                session.inner.clone(),
                sid,
                to_stream.map(<[u8]>::to_vec).unwrap_or_default(),
                to_client.map(<[u8]>::to_vec).unwrap_or_default(),
            )
            .map_err(|e| PyOSError::new_err(e.to_string()))
    }

    /// Convert between the connected stream socket `fd` (a client's WebSocket, answered 101;
    /// the core owns it from then on; a Unix socket with `unix`) and the stream `sid` of
    /// `session` (edge_core/src/wstcp.rs), `frames` the client's bytes read after its upgrade
    /// request. Its end comes in `take` as a carried connection's, under the id returned.
    #[pyo3(signature = (fd, session, sid, *, unix = false, frames = None))]
    fn convert_websocket(
        &self,
        fd: i32,
        session: &Session,
        sid: u32,
        unix: bool,
        frames: Option<&[u8]>,
    ) -> PyResult<u64> {
        let frames = frames.map(<[u8]>::to_vec).unwrap_or_default();
        // SAFETY: the caller hands the descriptor over (documented in edge_core.pyi).
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        self.carrier
            .convert_websocket(owned, unix, session.inner.clone(), sid, frames)
            .map_err(|e| PyOSError::new_err(e.to_string()))
    }

    /// Carry the connected socket `a` (a Unix socket with `a_unix`) and the TCP socket `b`
    /// both ways (edge_core/src/splice.rs `relay`: the cluster's relay); the core owns both
    /// descriptors from then on. `to_b` goes to `b` first, `to_a` to `a` first. Its end comes
    /// in `take` as a carried connection's, under the id returned: (bytes read from `a`,
    /// written to it).
    #[pyo3(signature = (a, b, *, a_unix = false, to_b = None, to_a = None))]
    fn relay(
        &self,
        a: i32,
        b: i32,
        a_unix: bool,
        to_b: Option<&[u8]>,
        to_a: Option<&[u8]>,
    ) -> PyResult<u64> {
        let to_b = to_b.map(<[u8]>::to_vec).unwrap_or_default();
        let to_a = to_a.map(<[u8]>::to_vec).unwrap_or_default();
        // SAFETY: the caller hands both descriptors over (documented in edge_core.pyi).
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(a), OwnedFd::from_raw_fd(b)) };
        self.carrier
            .relay(a, a_unix, b, to_b, to_a)
            .map_err(|e| PyOSError::new_err(e.to_string()))
    }

    /// A cluster's relay listener on (host, port) (edge_core/src/relay.rs): a relay line with
    /// `secret`, of kind http, for a host with a plain route is answered HERE and served by
    /// the adopting listener `adopter`; every other connection comes in `take` under the id
    /// returned with the bytes read; no whole line within `line_timeout`: closed. Returns
    /// (listener id, port).
    #[allow(clippy::too_many_arguments)]
    fn listen_relay(
        &self,
        secret: Vec<u8>,
        adopter: u64,
        tls_adopter: u64,
        line_timeout: f64,
        host: String,
        port: u16,
    ) -> PyResult<(u64, u16)> {
        if secret.is_empty() {
            return Err(PyValueError::new_err("a relay listener needs its secret"));
        }
        let (id, local) = self
            .carrier
            .listen_relay(
                Where::Bind(host, port),
                secret,
                seconds(line_timeout, "line_timeout")?,
                adopter,
                tls_adopter,
            )
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        Ok((id, local.port()))
    }

    /// A TCP port's listener on (host, port) (SO_REUSEPORT with `shared`: a cluster's
    /// instances on one host): every connection comes in `take` at once under the id
    /// returned, for Python to decide. Returns (listener id, port).
    #[pyo3(signature = (host, port, *, shared = false))]
    fn listen_tcp(&self, host: String, port: u16, shared: bool) -> PyResult<(u64, u16)> {
        let at = if shared {
            Where::BindShared(host, port)
        } else {
            Where::Bind(host, port)
        };
        let (id, local) = self
            .carrier
            .listen_tcp(at)
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        Ok((id, local.port()))
    }

    /// Serve the connected TCP socket `fd` (the core's from now on, taken or not) on the
    /// adopting listener `listener` as one it accepted from `ip`:`port`, `data` (the bytes
    /// read from it already) first. False when it was not taken: no such listener, an
    /// address that does not parse, or at a connection cap (the socket is closed).
    fn adopt(&self, listener: u64, fd: i32, ip: &str, port: u16, data: &[u8]) -> PyResult<bool> {
        let data = data.to_vec();
        // SAFETY: the caller hands the descriptor over (documented in edge_core.pyi).
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let Ok(ip) = ip.parse::<std::net::IpAddr>() else {
            return Ok(false);
        };
        self.carrier
            .adopt(listener, fd, SocketAddr::new(ip, port), data)
            .map_err(|e| PyOSError::new_err(e.to_string()))
    }

    /// The heartbeat stream `sid` of `session` is the core's from now on (its type read by
    /// Python): each 4-byte id is echoed, and `Session.since_beat` says when the last came.
    fn echo(&self, session: &Session, sid: u32) {
        self.carrier.echo(session.inner.clone(), sid);
    }

    /// Route `key` quiet (the core counts its requests: `take_tallies`) or not (a row each
    /// in `take`).
    fn set_quiet(&self, key: u64, quiet: bool) {
        self.carrier.tallies.set_quiet(key, quiet);
    }

    /// Every quiet route's numbers since the last call: (route key, [(status, requests)],
    /// durations in seconds in the order the requests ended, body bytes in, out, [(the memo
    /// of a held decision, requests it served)]).
    #[allow(clippy::type_complexity)]
    fn take_tallies(
        &self,
        py: Python<'_>,
    ) -> Vec<(
        u64,
        Vec<(u16, u64)>,
        Vec<f64>,
        u64,
        u64,
        Vec<(Py<PyAny>, u64)>,
    )> {
        self.carrier
            .tallies
            .take()
            .into_iter()
            .map(|(key, t, held)| {
                let held = held
                    .into_iter()
                    .filter_map(|(memo, n)| memo_of(py, Some(memo)).map(|m| (m, n)))
                    .collect();
                (key, t.statuses, t.durations, t.bytes_in, t.bytes_out, held)
            })
            .collect()
    }

    /// (requests of decided routes served by a held decision, bytes held now by every
    /// route: held.rs).
    fn held_counts(&self) -> (u64, usize) {
        (
            self.carrier.public_counters.held.load(Ordering::Relaxed),
            crate::held::held_bytes(),
        )
    }

    /// Routes quiet now.
    fn quiet_count(&self) -> usize {
        self.carrier.tallies.quiet_count()
    }

    /// (connections carried now, carried to their end).
    fn splice_counts(&self) -> (usize, u64) {
        let c = &self.carrier.counters;
        (
            c.splices.load(Ordering::Relaxed),
            c.spliced.load(Ordering::Relaxed),
        )
    }

    /// Stop accepting on a listener; False when it was not listening.
    fn close(&self, listener: u64) -> bool {
        self.resolvers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&listener);
        self.carrier.close(listener)
    }

    /// Every session handed over, every session event, every public connection handed over,
    /// every request served and every carried connection ended, oldest first. An event is (session key, kind, stream id).
    fn take<'py>(&self, py: Python<'py>) -> Taken<'py> {
        let taken = self.carrier.inbox().take();
        let conns = taken
            .conns
            .into_iter()
            .map(|c| {
                (
                    c.listener,
                    c.fd.into_raw_fd(),
                    c.peer.ip().to_string(),
                    c.peer.port(),
                    PyBytes::new(py, &c.data),
                    c.first,
                    c.tls.map(facts_of),
                    (c.local.ip().to_string(), c.local.port()),
                )
            })
            .collect();
        let served = taken
            .served
            .into_iter()
            .map(|mut s| {
                let memo = memo_of(py, s.memo.take());
                let held = s.held;
                (
                    s.route,
                    s.status,
                    (s.bytes_in, s.bytes_out, s.started, s.duration),
                    s.tls,
                    Exchange { served: s },
                    memo,
                    held,
                )
            })
            .collect();
        let asked = taken
            .asked
            .into_iter()
            .map(|a| {
                let bodiless = a.bodiless();
                (
                    a.ticket,
                    a.route,
                    (a.peer.ip().to_string(), a.peer.port()),
                    (a.local.ip().to_string(), a.local.port()),
                    a.tls.map(facts_of),
                    PyBytes::new(py, &a.head.method),
                    PyBytes::new(py, &a.head.target),
                    fields(py, &a.head.fields),
                    bodiless,
                    a.body
                        .map(|b| (b.data.map(|d| PyBytes::new(py, &d)), b.complete)),
                    a.multiplexed,
                    a.fresh,
                )
            })
            .collect();
        let handed = taken
            .accepted
            .into_iter()
            .map(|a| {
                (
                    a.listener,
                    Session { inner: a.session },
                    a.peer.ip().to_string(),
                    a.peer.port(),
                    a.sni,
                    a.alpn,
                )
            })
            .collect();
        let spliced = taken
            .spliced
            .into_iter()
            .map(|s| (s.id, s.from_client, s.to_client))
            .collect();
        let responses = taken
            .responses
            .into_iter()
            .map(|r| {
                (
                    r.ticket,
                    r.route,
                    r.status,
                    fields(py, &r.fields),
                    memo_of(py, r.memo),
                    r.body
                        .map(|b| (b.data.map(|d| PyBytes::new(py, &d)), b.complete)),
                )
            })
            .collect();
        (
            handed,
            taken.events,
            conns,
            served,
            spliced,
            asked,
            responses,
        )
    }

    /// Ticket `ticket`'s response head goes on to the client with `fields` (as the response
    /// phase left them) in place of the agent's; with `encode` (`gzip` or `deflate`: the
    /// algorithm compress-response negotiated), its body compressed as it comes. After
    /// decide_body, what was read of the agent's body goes first; with `body` (the body the
    /// phase rewrote, read whole), that body instead, framed by the Content-Length `fields`
    /// say.
    #[pyo3(signature = (ticket, fields, memo = None, encode = None, body = None))]
    fn decide_rewrite(
        &self,
        ticket: u64,
        fields: Vec<(PyBackedBytes, PyBackedBytes)>,
        memo: Option<Py<PyAny>>,
        encode: Option<&str>,
        body: Option<&[u8]>,
    ) -> PyResult<()> {
        let encode = encoding_of(encode)?;
        let fields = owned_fields(fields);
        let body = body.map(<[u8]>::to_vec);
        let rewrite = Decision::Rewrite {
            fields,
            encode,
            body,
        };
        self.decided(ticket, rewrite, memo, false);
        Ok(())
    }

    /// Ticket `ticket`'s response head goes on with `fields` as decide_rewrite sends it,
    /// chunked, its body server-sent events: each piece the agent sends is handed back first
    /// (the response row asked again with it, `complete` at the end) and answered with
    /// decide_rewrite's `body` (what to send instead) or decide_close (the response cut).
    #[pyo3(signature = (ticket, fields, memo = None, encode = None))]
    fn decide_events(
        &self,
        ticket: u64,
        fields: Vec<(PyBackedBytes, PyBackedBytes)>,
        memo: Option<Py<PyAny>>,
        encode: Option<&str>,
    ) -> PyResult<()> {
        let encode = encoding_of(encode)?;
        let fields = owned_fields(fields);
        self.decided(ticket, Decision::Events { fields, encode }, memo, false);
        Ok(())
    }

    /// Ticket `ticket`'s request goes on to its route's agent with `head` (the request line
    /// and fields as Python wrote them, ending with the blank line); `memo` comes back with
    /// its record. Each decide_* call queues its decision until flush_decisions; a ticket no
    /// request waits for any more (timed out, its connection gone) is dropped then. `body`:
    /// the body the policy rewrote (the request's was read whole by decide_body), sent in
    /// place of the client's; `head` then frames it by its Content-Length.
    #[pyo3(signature = (ticket, head, memo = None, body = None))]
    fn decide_forward(
        &self,
        ticket: u64,
        head: &[u8],
        memo: Option<Py<PyAny>>,
        body: Option<&[u8]>,
    ) {
        let (head, body) = (head.to_vec(), body.map(<[u8]>::to_vec));
        self.decided(ticket, Decision::Forward { head, body }, memo, false)
    }

    /// Ticket `ticket`'s request's body is read first, up to `limit` bytes (at most
    /// BODY_READ_MAX), and the request asked again under the same ticket with what was read
    /// (take's rows: their last item). Once per request. Answering a response head: the
    /// agent's body likewise (the response row asked again), `memo` its record's meanwhile.
    #[pyo3(signature = (ticket, limit, memo = None))]
    fn decide_body(&self, ticket: u64, limit: usize, memo: Option<Py<PyAny>>) {
        self.decided(ticket, Decision::Body { limit }, memo, false)
    }

    /// Ticket `ticket`'s request goes on with `head` to another agent endpoint than its
    /// route's (the internal one a `forward-internal` sent it to): `session`'s tunnel
    /// `tunnel_id`, spoken to as `set_route` says (`h2_scheme`, `proxy_proto` and
    /// `proxy_dest`); `responses`: its response head is asked about (a response phase in
    /// force). No `head`: the client's own with `fields` appended, written by the core as
    /// decide_append's (then `hold` may say it holds for the route's requests with the same
    /// facts). Served and recorded as the route's, under its key.
    #[pyo3(signature = (
        ticket, head, session, tunnel_id, *, fields = Vec::new(), memo = None,
        responses = false, h2_scheme = None, proxy_proto = 0, proxy_dest = String::new(),
        hold = false, ws_tcp = false
    ))]
    #[allow(clippy::too_many_arguments)]
    fn decide_internal(
        &self,
        ticket: u64,
        head: Option<&[u8]>,
        session: &Session,
        tunnel_id: String,
        fields: Vec<(PyBackedBytes, PyBackedBytes)>,
        memo: Option<Py<PyAny>>,
        responses: bool,
        h2_scheme: Option<&str>,
        proxy_proto: u8,
        proxy_dest: String,
        hold: bool,
        ws_tcp: bool,
    ) -> PyResult<()> {
        let to = Target {
            session: session.inner.clone(),
            tunnel_id,
            responses,
            proxy: proxy_of(proxy_proto, proxy_dest)?,
            h2_upstream: h2_upstream_of(h2_scheme)?,
            ws_tcp,
        };
        let hold = hold && head.is_none();
        let decision = Decision::Internal {
            head: head.map(<[u8]>::to_vec),
            fields: owned_fields(fields),
            to: Box::new(to),
        };
        self.decided(ticket, decision, memo, hold);
        Ok(())
    }

    /// Ticket `ticket`'s request goes on to its route's agent with the client's head and
    /// `fields` after its own (lower-case names, none of them framing), written by the core
    /// with the X-Forwarded fields as for a plain route. `hold`: the decision holds for
    /// every request of the route with the same facts (the route's `holds`; held.rs).
    #[pyo3(signature = (ticket, fields, memo = None, hold = false))]
    fn decide_append(
        &self,
        ticket: u64,
        fields: Vec<(PyBackedBytes, PyBackedBytes)>,
        memo: Option<Py<PyAny>>,
        hold: bool,
    ) {
        let fields = owned_fields(fields);
        self.decided(ticket, Decision::Append { fields }, memo, hold)
    }

    /// Ticket `ticket`'s request is answered with `head` and `body` (as Python wrote them),
    /// the connection closed after when `close` (or when the request has a body); `hold` as
    /// for decide_append.
    #[pyo3(signature = (ticket, status, head, body, close, memo = None, hold = false))]
    #[allow(clippy::too_many_arguments)]
    fn decide_respond(
        &self,
        ticket: u64,
        status: u16,
        head: &[u8],
        body: &[u8],
        close: bool,
        memo: Option<Py<PyAny>>,
        hold: bool,
    ) {
        let decision = Decision::Respond {
            status,
            head: head.to_vec(),
            body: body.to_vec(),
            close,
        };
        self.decided(ticket, decision, memo, hold)
    }

    /// Ticket `ticket`'s connection is closed without an answer.
    fn decide_close(&self, ticket: u64) {
        self.decided(ticket, Decision::Close, None, false)
    }

    /// Ticket `ticket`'s connection is handed to Python, this request's bytes included.
    fn decide_python(&self, ticket: u64) {
        self.decided(ticket, Decision::Python, None, false)
    }

    /// Every decision made by the decide_* calls since the last flush, sent (one wake-up of
    /// the core for the batch; a decision not flushed is never sent).
    fn flush_decisions(&self) {
        self.carrier.flush_decisions();
    }

    /// Decided routes' requests waiting for a decision now.
    fn deciding(&self) -> usize {
        self.carrier.decisions.len()
    }

    /// (handshakes in progress, sessions running, connections refused over max_handshakes,
    /// handshakes failed or timed out).
    fn counters(&self) -> (usize, usize, u64, u64) {
        let c = &self.carrier.counters;
        (
            c.handshakes.load(Ordering::Relaxed),
            c.sessions.load(Ordering::Relaxed),
            c.refused.load(Ordering::Relaxed),
            c.failed_handshakes.load(Ordering::Relaxed),
        )
    }
}

impl Core {
    fn decided(&self, ticket: u64, decision: Decision, memo: Option<Py<PyAny>>, hold: bool) {
        let memo = memo.map(|m| Arc::new(m) as Memo);
        self.carrier.decisions.queue(
            ticket,
            Decided {
                decision,
                memo,
                hold,
            },
        )
    }
}

/// The heads and addresses of one request the core served, made into Python objects only
/// when read (most requests only count: edge/events.py makes a record of few).
#[pyclass(frozen, module = "edge_core")]
struct Exchange {
    served: Served,
}

#[pymethods]
impl Exchange {
    #[getter]
    fn peer(&self) -> (String, u16) {
        (self.served.peer.ip().to_string(), self.served.peer.port())
    }

    #[getter]
    fn local(&self) -> (String, u16) {
        (self.served.local.ip().to_string(), self.served.local.port())
    }

    #[getter]
    fn method<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let head = self.request();
        PyBytes::new(py, head.as_ref().map_or(&b""[..], |h| &h.method))
    }

    #[getter]
    fn target<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let head = self.request();
        PyBytes::new(py, head.as_ref().map_or(&b""[..], |h| &h.target))
    }

    /// The first data bytes of the request's body (a route whose bodies the inspector
    /// captures: `set_route`'s `capture`; else empty).
    #[getter]
    fn request_body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.served.request_body)
    }

    /// The route kept the bodies for the record (`set_route`'s `capture`).
    #[getter]
    fn captured(&self) -> bool {
        self.served.captured
    }

    /// The request's body was all read (else what `request_body` kept is only its start).
    #[getter]
    fn request_ended(&self) -> bool {
        self.served.request_ended
    }

    /// The first data bytes of the response's body, as `request_body`.
    #[getter]
    fn response_body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.served.response_body)
    }

    /// The request's fields, names in lower case, values trimmed.
    #[getter]
    fn request_fields<'py>(&self, py: Python<'py>) -> Fields<'py> {
        self.request()
            .map_or_else(Vec::new, |head| fields(py, &head.fields))
    }

    #[getter]
    fn reason<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let head = self.response();
        PyBytes::new(py, head.as_ref().map_or(&b""[..], |h| &h.reason))
    }

    /// The response's fields, names in lower case.
    #[getter]
    fn response_fields<'py>(&self, py: Python<'py>) -> Fields<'py> {
        self.response().map_or_else(Vec::new, |head| {
            head.fields
                .iter()
                .map(|(name, value)| {
                    (
                        PyBytes::new(py, &name.to_ascii_lowercase()),
                        PyBytes::new(py, value),
                    )
                })
                .collect()
        })
    }
}

impl Exchange {
    /// The heads were parsed when served: parsed again here (None: an answer of the core's).
    fn request(&self) -> Option<crate::http::RequestHead> {
        match crate::http::parse_request(&self.served.request_head) {
            crate::http::Parsed::Done(head) => Some(head),
            _ => None,
        }
    }

    fn response(&self) -> Option<crate::http::ResponseHead> {
        match crate::http::parse_response(&self.served.response_head) {
            crate::http::Parsed::Done(head) => Some(head),
            _ => None,
        }
    }
}

/// One agent session (mux::State's operations; edge/session.py wraps it).
#[pyclass(frozen, module = "edge_core")]
struct Session {
    inner: Arc<session::Session>,
}

#[pymethods]
impl Session {
    #[getter]
    fn key(&self) -> u64 {
        self.inner.key
    }

    fn open(&self) -> PyResult<u32> {
        self.inner.with(|st| st.open()).map_err(stream_error)
    }

    /// Arm EV_SLOT; seconds until the first slot in grace comes back, if any.
    fn want_slot(&self) -> Option<f64> {
        self.inner
            .with(|st| st.want_slot())
            .map(|d| d.as_secs_f64())
    }

    /// Up to `n` bytes, b"" at the peer's EOF, None when the reader must wait (EV_READABLE).
    fn read<'py>(
        &self,
        py: Python<'py>,
        sid: u32,
        n: usize,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let (got, credit) = self.inner.with(|st| {
            let queued = st.out.len();
            let got = st.read(sid, n, |bytes| PyBytes::new(py, bytes));
            (got, st.out.len() > queued)
        });
        if credit {
            self.inner.flush(); // a WNDINC: the peer may be waiting for it
        }
        got.map_err(stream_error)
    }

    /// Queue data[offset:] as the window allows: the bytes taken (0: wait for EV_WRITABLE).
    fn write(&self, sid: u32, data: &[u8], offset: usize) -> PyResult<usize> {
        let rest = data.get(offset..).unwrap_or_default();
        self.inner
            .with(|st| st.write(sid, rest))
            .map_err(stream_error)
    }

    fn close_write(&self, sid: u32) -> PyResult<()> {
        self.inner
            .with(|st| st.close_write(sid))
            .map_err(stream_error)
    }

    fn finish(&self, sid: u32) {
        self.inner.with(|st| st.finish(sid))
    }

    /// Reset the stream and release it (its owner is done with it).
    fn reset(&self, sid: u32, code: u32) {
        self.inner.with(|st| {
            st.reset(sid, code);
            st.release(sid);
        })
    }

    /// (unread bytes, peer side open, done, finished), None for a stream no longer held.
    fn facts(&self, sid: u32) -> Option<(usize, bool, bool, bool)> {
        self.inner.lock().stream_facts(sid)
    }

    fn authenticate(&self) {
        self.inner.with(|st| st.authenticate())
    }

    /// Seconds since the agent's last heartbeat (`Core.echo`), or since the session began.
    #[getter]
    fn since_beat(&self) -> f64 {
        self.inner.since_beat().as_secs_f64()
    }

    /// The heartbeats the core echoed on this session.
    #[getter]
    fn beats(&self) -> u64 {
        self.inner.beats()
    }

    #[getter]
    fn authenticated(&self) -> bool {
        self.inner.lock().authenticated()
    }

    fn go_away(&self, code: u32, message: &str) {
        self.inner.with(|st| st.go_away(code, message))
    }

    fn close(&self, reason: &str) {
        self.inner.with(|st| st.close(reason))
    }

    fn flush(&self) {
        self.inner.flush()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.lock().closed
    }

    #[getter]
    fn close_reason(&self) -> String {
        self.inner.lock().close_reason.clone()
    }

    /// (ours open, the peer's open, lingering, ours in grace, entries held, unsent bytes,
    /// ids passed over, the peer's highest id).
    fn counts(&self) -> (usize, usize, usize, usize, usize, usize, usize, u32) {
        let mut st = self.inner.lock();
        (
            st.local_open,
            st.remote_open,
            st.lingering(),
            st.cooling(),
            st.held(),
            st.unsent(),
            st.passed_over(),
            st.last_remote_id(),
        )
    }
}

#[pymodule]
fn edge_core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    m.add("WS_MAX_FRAME", crate::wstcp::MAX_FRAME)?;
    m.add("BODY_READ_MAX", crate::decide::BODY_READ_MAX)?;
    m.add(
        "BODY_READ_SECONDS",
        crate::decide::BODY_READ_DEADLINE.as_secs_f64(),
    )?;
    m.add("StreamReset", m.py().get_type::<StreamReset>())?;
    m.add("StreamsExhausted", m.py().get_type::<StreamsExhausted>())?;
    m.add_class::<Core>()?;
    m.add_class::<Session>()?;
    m.add_class::<Exchange>()?;
    m.add_function(wrap_pyfunction!(proxy_protocol_header, m)?)?;
    Ok(())
}
