//! A cluster's relay opened by the core (docs/CLUSTER.md, "The relay"): for a host whose
//! endpoint another instance holds, Python pushes a *relay route* (the holder's relay address
//! and the start of the relay line: preamble, secret, kind and name); a new connection whose
//! first request names that host is then carried to the holder without Python: the core
//! connects, writes the line with the client's address, reads the holder's answer and, on
//! `HERE`, carries both connections (splice::relay) with the bytes it read first. Any other
//! answer, a connect or an answer that fails or takes longer than `CONNECT_TIMEOUT`, hands the
//! connection to Python with those bytes, which does what it did before (reads the claim
//! again, holds the connection for a moving endpoint, answers offline).
//!
//! A relay route lives `ttl` seconds unless pushed again: never staler than Python's own cache
//! of the holder (HOLDER_CACHE_SECONDS), and a holder that no longer holds answers `MOVED`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The longest wait for the holder's connection, and then for its answer (edge/cluster.py
/// CONNECT_TIMEOUT).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The holder serves the connection.
pub const HERE: &[u8] = b"HERE\r\n";
/// The most of an answer read before its line end (the longest answer is `MOVED\r\n`).
pub const MAX_ANSWER: usize = 16;

/// Where a host's connections are relayed.
pub struct RelayTo {
    /// The holder's relay listener, `host:port`.
    pub address: String,
    /// The relay line up to the client's address: `NGRELAY1 <secret> <kind> <name>`.
    pub line: Vec<u8>,
    /// The certificate the HTTPS listener terminates the host's connections with (0 on the
    /// plain listener).
    pub cert: u64,
    pub until: Instant,
}

/// The relay routes of one listener's scheme, by host.
#[derive(Default)]
pub struct Relays {
    map: RwLock<HashMap<String, Arc<RelayTo>>>,
}

impl Relays {
    pub fn set(&self, host: String, to: RelayTo) {
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(host, Arc::new(to));
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

    /// `host`'s relay route, unless it expired.
    pub fn get(&self, host: &str) -> Option<Arc<RelayTo>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        if map.is_empty() {
            return None;
        }
        map.get(host)
            .filter(|to| Instant::now() < to.until)
            .cloned()
    }

    pub fn len(&self) -> usize {
        self.map.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The relay connection for a client at `peer`, once the holder answered `HERE`: the
/// connection and the bytes it sent after its answer. None: not reached, not answered in
/// time, or another answer (the connection is closed).
pub async fn open(to: &RelayTo, peer: SocketAddr) -> Option<(TcpStream, Vec<u8>)> {
    let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
    let mut up = tokio::time::timeout_at(deadline, TcpStream::connect(to.address.as_str()))
        .await
        .ok()?
        .ok()?;
    let _ = up.set_nodelay(true);
    let mut line = Vec::with_capacity(to.line.len() + 64);
    line.extend_from_slice(&to.line);
    line.extend_from_slice(format!(" {} {}\r\n", peer.ip(), peer.port()).as_bytes());
    tokio::time::timeout_at(deadline, up.write_all(&line))
        .await
        .ok()?
        .ok()?;
    let mut answer: Vec<u8> = Vec::with_capacity(64);
    let mut chunk = [0u8; 64];
    loop {
        if let Some(end) = answer.windows(2).position(|w| w == b"\r\n") {
            let (said, rest) = answer.split_at(end + 2);
            return (said == HERE).then(|| (up, rest.to_vec()));
        }
        if answer.len() >= MAX_ANSWER {
            return None;
        }
        let n = tokio::time::timeout_at(deadline, up.read(&mut chunk))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        answer.extend_from_slice(&chunk[..n]);
    }
}

// ---- the relay listener ----------------------------------------------------------------------

/// The relay line's first word.
pub const PREAMBLE: &[u8] = b"NGRELAY1";
/// The most of a relay line read (edge/cluster.py MAX_PREAMBLE): past it, Python's (closed).
pub const MAX_LINE: usize = 512;

/// The relay listener of a cluster instance (edge/cluster.py's rules): a connection whose
/// relay line is whole and right (the secret compared in constant time), of kind `http` (or
/// `https`: the decrypted stream of a TLS connection the relaying instance terminated), for a
/// host this instance has a route for on that listener, gets `HERE` and is served by that
/// scheme's adopting listener (public.rs `adopted`) as the original client's, whose address
/// the line names (a host whose TLS settings require more than the default has its requests
/// handed to Python there, which answers 421: the relaying instance's handshake asked for
/// none of it). Every other connection goes to Python with the bytes read (its line included), which
/// applies the same rules and answers or closes as it always did; a connection that sends no
/// whole line within `line_timeout` (or nothing) is closed.
pub struct RelayListen {
    pub id: u64,
    pub secret: Vec<u8>,
    pub line_timeout: Duration,
    /// The adopting listeners: the plain-HTTP one's and the HTTPS one's (scheme "https",
    /// the HTTPS listener's routes, over the plain relay connection).
    pub adopter: Arc<crate::public::Public>,
    pub tls_adopter: Arc<crate::public::Public>,
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What a whole relay line asks the core, when the core can answer it: whether it is the
/// decrypted stream of an HTTPS connection, the host and the original client. None: Python's.
pub fn served_here(line: &[u8], secret: &[u8]) -> Option<(bool, String, SocketAddr)> {
    let text = std::str::from_utf8(line).ok()?;
    let parts: Vec<&str> = text.split_ascii_whitespace().collect();
    if parts.len() != 6 || parts[0].as_bytes() != PREAMBLE {
        return None;
    }
    if !same(parts[1].as_bytes(), secret) || !matches!(parts[2], "http" | "https") {
        return None;
    }
    let ip: std::net::IpAddr = parts[4].parse().ok()?;
    let port: u16 = parts[5].parse().ok()?;
    Some((
        parts[2] == "https",
        parts[3].to_ascii_lowercase(),
        SocketAddr::new(ip, port),
    ))
}

pub async fn accept_loop(listener: tokio::net::TcpListener, spec: Arc<RelayListen>) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let spec = spec.clone();
        tokio::spawn(async move { relayed_in(tcp, peer, spec).await });
    }
}

async fn relayed_in(mut tcp: TcpStream, peer: SocketAddr, spec: Arc<RelayListen>) {
    let deadline = tokio::time::Instant::now() + spec.line_timeout;
    let mut buf: Vec<u8> = Vec::with_capacity(MAX_LINE);
    let mut chunk = [0u8; MAX_LINE];
    let end = loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            break Some(end);
        }
        if buf.len() >= MAX_LINE {
            break None;
        }
        let want = MAX_LINE - buf.len();
        match tokio::time::timeout_at(deadline, tcp.read(&mut chunk[..want])).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return, // closed, failed or no line in time: closed, nothing answered
        }
    };
    let here = end.and_then(|end| served_here(&buf[..end], &spec.secret));
    let adopter = match &here {
        Some((false, _, _)) => &spec.adopter,
        Some((true, _, _)) => &spec.tls_adopter,
        None => return hand_to_python(tcp, peer, buf, &spec),
    };
    let Some((_, _, client)) = here.filter(|(_, host, _)| adopter.routes.peek(host).is_some())
    else {
        return hand_to_python(tcp, peer, buf, &spec);
    };
    let Some(ticket) = adopter.admission.admit(client.ip()) else {
        return hand_to_python(tcp, peer, buf, &spec); // at a cap: Python's rules answer
    };
    if tcp.write_all(HERE).await.is_err() {
        return;
    }
    let rest = buf.split_off(end.unwrap_or(0) + 2);
    crate::public::adopted(tcp, client, adopter.clone(), ticket, rest).await;
}

fn hand_to_python(tcp: TcpStream, peer: SocketAddr, data: Vec<u8>, spec: &RelayListen) {
    let local = tcp
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let Ok(std) = tcp.into_std() else {
        return;
    };
    spec.adopter.inbox.push_conn(crate::public::Handed {
        listener: spec.id,
        fd: std::os::fd::OwnedFd::from(std),
        peer,
        local,
        data,
        first: true,
        tls: None,
    });
}
