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
