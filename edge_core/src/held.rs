//! Held decisions: a decided route whose traffic policy's request phase is a function of
//! named facts of the request (its method, target, some or all fields, the connection's
//! addresses and TLS: Python's `chalicelib.core.policy.holding`) keeps the decisions Python
//! made, keyed by those facts, and applies one again to a request with the same key without
//! asking Python. Python still makes every decision; the core only repeats one for a request
//! that differs from the one it was made for in nothing the decision read.
//!
//! Bounds: [`MAX_HELD`] decisions a route (past it the route's held ones are dropped and held
//! anew: a flood of distinct keys costs what asking Python costs, nothing more), a key of at
//! most [`MAX_KEY`] bytes and a decision of at most [`MAX_DECISION`] bytes (larger ones are
//! asked each time), and [`MAX_HELD_BYTES`] for every route's together.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::decide::{Decision, Memo};
use crate::http::RequestHead;
use crate::public::TlsFacts;

/// Decisions one route holds at most.
pub const MAX_HELD: usize = 64;
/// A key longer than this is not held (its request is asked about each time).
pub const MAX_KEY: usize = 1024;
/// A decision larger than this (its head, body or fields) is not held.
pub const MAX_DECISION: usize = 8 * 1024;
/// Bytes of keys and decisions held by every route together.
pub const MAX_HELD_BYTES: usize = 64 << 20;

static HELD_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes held now by every route (keys and decisions).
pub fn held_bytes() -> usize {
    HELD_BYTES.load(Ordering::Relaxed)
}

/// The facts of a request a route's decisions are a function of.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reads {
    pub target: bool,
    /// Every field of the head.
    pub fields: bool,
    /// The values of these fields (lower-case names).
    pub named: Vec<Vec<u8>>,
    pub peer_ip: bool,
    pub peer_port: bool,
    pub local: bool,
    pub tls: bool,
}

impl Reads {
    /// From Python's names of the facts (holding.py); an error names one not known.
    pub fn parse(facts: &[String]) -> Result<Reads, String> {
        let mut reads = Reads::default();
        for fact in facts {
            match fact.as_str() {
                "method" => {} // always in the key (see `key`)
                "target" => reads.target = true,
                "fields" => reads.fields = true,
                "peer_ip" => reads.peer_ip = true,
                "peer_port" => reads.peer_port = true,
                "local" => reads.local = true,
                "tls" => reads.tls = true,
                other => match other.strip_prefix("field:") {
                    Some(name) if !name.is_empty() => {
                        reads.named.push(name.to_ascii_lowercase().into_bytes())
                    }
                    _ => return Err(format!("not a fact a decision reads: {other:?}")),
                },
            }
        }
        // what the core's own answer depends on beside the policy: whether it closes
        reads.named.push(b"connection".to_vec());
        reads.named.sort();
        reads.named.dedup();
        Ok(reads)
    }

    /// The key of `head` on a connection from `peer` to `local`: the facts read, each
    /// length-prefixed, and what the core's own handling of an answer depends on whatever the
    /// policy reads (whether a body follows, the version, the close flag, the Connection
    /// field, the method: an answer to a HEAD is written without its body); None when it is
    /// over MAX_KEY.
    pub fn key(
        &self,
        head: &RequestHead,
        peer: SocketAddr,
        local: SocketAddr,
        tls: Option<&TlsFacts>,
        bodiless: bool,
    ) -> Option<Vec<u8>> {
        let mut key = Vec::with_capacity(128);
        key.push(bodiless as u8);
        key.push(head.minor);
        key.push(head.close as u8);
        let put = |key: &mut Vec<u8>, bytes: &[u8]| {
            key.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            key.extend_from_slice(bytes);
        };
        // the method always (a HEAD's answer has no body); `method` read changes nothing
        put(&mut key, &head.method);
        if self.target {
            put(&mut key, &head.target);
        }
        if self.peer_ip {
            put(&mut key, peer.ip().to_string().as_bytes());
        }
        if self.peer_port {
            put(&mut key, &peer.port().to_le_bytes());
        }
        if self.local {
            put(&mut key, local.to_string().as_bytes());
        }
        if self.tls {
            match tls {
                Some(t) => {
                    put(&mut key, t.sni.as_bytes());
                    put(&mut key, t.version.as_bytes());
                    put(&mut key, t.cipher.as_bytes());
                    put(&mut key, t.alpn.as_deref().unwrap_or(b"\xff"));
                }
                None => key.push(0xff),
            }
        }
        if self.fields {
            put(&mut key, &(head.fields.len() as u32).to_le_bytes());
            for (name, value) in &head.fields {
                put(&mut key, name);
                put(&mut key, value);
            }
        } else {
            for name in &self.named {
                let values = head.fields.iter().filter(|(n, _)| n == name);
                put(&mut key, &(values.clone().count() as u32).to_le_bytes());
                for (_, value) in values {
                    put(&mut key, value);
                }
            }
        }
        (key.len() <= MAX_KEY).then_some(key)
    }
}

/// A decision held, the memo it was made with (its policy run: what a request applying it
/// again is counted with).
pub struct HeldDecision {
    pub decision: Decision,
    pub memo: Option<Memo>,
    /// Bytes it counts for (its key's too).
    size: usize,
}

/// Whether `decision` may be held, and its size: a forward carries the client's whole head
/// (its own X-Forwarded fields too), which differs in more than the key; a close leaves no
/// record to count the policy run's decisions with; a change of the route's path (to
/// Python) or a response's rewrite is never held.
fn holdable(decision: &Decision) -> Option<usize> {
    let size = match decision {
        Decision::Append { fields } => fields.iter().map(|(n, v)| n.len() + v.len() + 16).sum(),
        Decision::Respond { head, body, .. } => head.len() + body.len(),
        // a target's append (its session held with it until the route is dropped: the
        // registry's internal endpoints changing drops it, edge/fast_path.py)
        Decision::Internal {
            head: None,
            fields,
            to,
        } => {
            fields
                .iter()
                .map(|(n, v)| n.len() + v.len() + 16)
                .sum::<usize>()
                + to.tunnel_id.len()
                + 64
        }
        Decision::Close
        | Decision::Forward { .. }
        | Decision::Body { .. }
        | Decision::Internal { .. }
        | Decision::Rewrite { .. }
        | Decision::Events { .. }
        | Decision::Python => return None,
    };
    (size <= MAX_DECISION).then_some(size + 64)
}

/// Decisions by key, and the bytes they count for.
type Table = (HashMap<Vec<u8>, Arc<HeldDecision>>, usize);

/// One route's held decisions.
pub struct Held {
    pub reads: Reads,
    map: Mutex<Table>,
}

impl Held {
    pub fn new(reads: Reads) -> Held {
        Held {
            reads,
            map: Mutex::new((HashMap::new(), 0)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The decision held for `key`.
    pub fn get(&self, key: &[u8]) -> Option<Arc<HeldDecision>> {
        self.lock().0.get(key).cloned()
    }

    /// `decision` (made for a request of `key`) held, unless it may not be or a bound says
    /// no; a route at MAX_HELD drops the ones it held first.
    pub fn hold(&self, key: Vec<u8>, decision: &Decision, memo: Option<&Memo>) -> bool {
        let Some(size) = holdable(decision).map(|s| s + key.len()) else {
            return false;
        };
        let mut guard = self.lock();
        let (map, bytes) = &mut *guard;
        if map.len() >= MAX_HELD {
            HELD_BYTES.fetch_sub(*bytes, Ordering::Relaxed);
            map.clear();
            *bytes = 0;
        }
        if HELD_BYTES.fetch_add(size, Ordering::Relaxed) + size > MAX_HELD_BYTES {
            HELD_BYTES.fetch_sub(size, Ordering::Relaxed);
            return false;
        }
        let held = HeldDecision {
            decision: decision.clone(),
            memo: memo.cloned(),
            size,
        };
        *bytes += size;
        if let Some(old) = map.insert(key, Arc::new(held)) {
            // the same key decided again (two requests asked before either was held)
            *bytes -= old.size;
            HELD_BYTES.fetch_sub(old.size, Ordering::Relaxed);
        }
        true
    }

    /// Decisions held now.
    pub fn len(&self) -> usize {
        self.lock().0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let bytes = self.lock().1;
        HELD_BYTES.fetch_sub(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append() -> Decision {
        Decision::Append {
            fields: vec![(b"x-a".to_vec(), vec![b'a'; MAX_DECISION - 64])],
        }
    }

    /// The process-wide count (the only test of this binary that holds: it is exact).
    #[test]
    fn every_routes_bytes_are_counted_bounded_and_released() {
        let start = held_bytes();
        let one = Held::new(Reads::default());
        assert!(one.hold(b"k".to_vec(), &append(), None));
        let size = held_bytes() - start;
        assert!(size > MAX_DECISION - 64 && size < MAX_DECISION + 256);
        // a route at MAX_HELD drops what it held: its bytes with it
        for i in 1..=MAX_HELD {
            assert!(one.hold(format!("k{i:03}").into_bytes(), &append(), None));
        }
        assert_eq!(one.len(), 1);
        assert_eq!(held_bytes() - start, size + 3); // the one key is 3 bytes longer
        drop(one);
        assert_eq!(held_bytes(), start, "a dropped route's bytes are released");
        // MAX_HELD_BYTES for every route together: past it nothing more is held
        let routes: Vec<Held> = (0..MAX_HELD_BYTES / (size * (MAX_HELD - 1)) + 2)
            .map(|_| Held::new(Reads::default()))
            .collect();
        let mut refused = 0;
        for route in &routes {
            for i in 0..MAX_HELD - 1 {
                if !route.hold(format!("k{i:03}").into_bytes(), &append(), None) {
                    refused += 1;
                }
            }
        }
        assert!(refused > 0 && held_bytes() <= MAX_HELD_BYTES);
        assert!(held_bytes() > MAX_HELD_BYTES - 2 * MAX_DECISION);
        drop(routes);
        assert_eq!(held_bytes(), start);
    }
}
