//! The decision seam for routes with a traffic policy: the core reads a request's head as it
//! does for a plain route, hands Python the head and the connection's facts as one row (no
//! socket, no bytes of the body), and waits for Python's decision, which it then applies and
//! carries: forward the request as Python rewrote its head, answer with Python's response,
//! close, or hand the whole connection to Python (a route that changed meanwhile). A route
//! whose policy has a response phase asks again with the agent's response head, which Python
//! rewrites (or answers instead of, or closes on). A policy that reads the request's body
//! (a webhook's signature, a JWT in a form, the OWASP rules, a body's find-replace) answers
//! the first ask with [`Decision::Body`]: the core reads that much of the body into the
//! connection's buffer (still unsent: it goes on by the client's own framing after the
//! decision, or is Python's with the connection) and asks again under the same ticket with a
//! copy of it ([`ReadBody`]).
//!
//! Python never waits on the core here, and the core never calls Python: the row goes through
//! the inbox behind the one wake-up descriptor; the decision comes back by
//! [`Decisions::answer`] with the row's ticket. At most one decision waits per connection (a
//! connection reads its next head only once its request is done), so the tickets waiting are
//! bounded by the listener's connection caps; each waits at most [`DECIDE_TIMEOUT`].

use std::any::Any;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::http::{Field, Framing, RequestHead};
use crate::public::TlsFacts;

/// Python's answer must come within this, else the connection is closed without an answer
/// (an edge that stopped taking its inbox: nothing else would end the wait).
pub const DECIDE_TIMEOUT: Duration = Duration::from_secs(30);

/// The most body bytes a [`Decision::Body`] may ask for (request-body-find-replace's 1 MiB,
/// chalicelib/core/policy/actions.py MAX_FIND_REPLACE_BODY, is the largest any action reads);
/// a larger ask reads this much.
pub const BODY_READ_MAX: usize = 1024 * 1024;

/// A request's body is read for a decision within this in all (each read within the listener's
/// body timeout too); then the decision's own wait ([`DECIDE_TIMEOUT`]) starts again.
pub const BODY_READ_DEADLINE: Duration = Duration::from_secs(300);

/// A chunked body is read for a decision until its framing and data together pass twice the
/// asked size and this (a body of tiny chunks is seen as longer than the ask then): what one
/// connection holds while its request is decided is bounded by the ask, not by its framing.
pub const BODY_FRAMING_SLACK: usize = 16 * 1024;

/// What Python hands back with a decision and gets again with the request's record (its
/// policy run's results, for the record's decisions). Opaque to the core; shared by the
/// requests a held decision is applied to (held.rs).
pub type Memo = Arc<dyn Any + Send + Sync>;

/// A request of a decided route, waiting for Python.
pub struct Asked {
    pub ticket: u64,
    /// The route's key (Python's name for it).
    pub route: u64,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// The TLS the core terminated (the HTTPS listener), for the policy's `conn.tls.*`.
    pub tls: Option<TlsFacts>,
    pub head: RequestHead,
    /// Asked again after a [`Decision::Body`]: what of the body was read (None on the first
    /// ask).
    pub body: Option<ReadBody>,
    /// The request came on a stream of an HTTP/2 connection (h2front.rs): its response's body
    /// is never read for a decision here (its streams would each hold one while the caps
    /// count one connection), so a route whose response phase reads it is Python's then.
    pub multiplexed: bool,
    /// The connection's first request asked about this route (its key): the policy's
    /// `on_tcp_connect` rules run on it, once per connection and endpoint, as the Python path
    /// runs them (edge/http_policy.py `connect_phase`).
    pub fresh: bool,
}

/// The route keys a connection remembers having asked about ([`Asked::fresh`]); past this
/// many (a client cycling through hosts on one connection) they are forgotten, and the next
/// request of each is fresh again: its connection rules run once more.
pub const CONNECTED_ROUTES: usize = 8;

/// Whether `key` is new to a connection that asked about `seen` (remembered from now on).
pub fn first_ask(seen: &mut Vec<u64>, key: u64) -> bool {
    if seen.contains(&key) {
        return false;
    }
    if seen.len() >= CONNECTED_ROUTES {
        seen.clear();
    }
    seen.push(key);
    true
}

/// What the core read of a request's body for its decision: at most the asked size of data
/// (chunk framing left out), and whether that is the whole body; None when the client ended,
/// stalled past the body timeout or broke its framing first (the connection is closed, and
/// the run asking for it ends with no decision).
pub struct ReadBody {
    pub data: Option<Vec<u8>>,
    pub complete: bool,
}

impl Asked {
    /// No body follows the head: an answer leaves the connection usable.
    pub fn bodiless(&self) -> bool {
        matches!(self.head.framing, Framing::None | Framing::Length(0))
    }
}

/// The response head of a decided route whose policy has a response phase, waiting for
/// Python: the agent's status and fields, and the memo of the request's decision (the policy
/// run the response phase goes on with).
pub struct AskedResponse {
    pub ticket: u64,
    pub route: u64,
    pub status: u16,
    pub fields: Vec<Field>,
    pub memo: Option<Memo>,
    /// Asked again after a [`Decision::Body`] (a phase that reads the response's body:
    /// response-body-find-replace, owasp-crs-response's `process_body`): what of the agent's
    /// body was read, unsent (None on the first ask).
    pub body: Option<ReadBody>,
}

/// What Python decided for one request.
#[derive(Clone)]
pub enum Decision {
    /// On to the route's agent with this head (request line and fields, X-Forwarded ones
    /// included, as Python wrote it); the body follows by the client's own framing, or, when
    /// `body` is given (a body the policy rewrote: read whole after a [`Decision::Body`]),
    /// that body instead of the client's, framed by the Content-Length Python's head says.
    Forward {
        head: Vec<u8>,
        body: Option<Vec<u8>>,
    },
    /// Read up to this many bytes of the request's body and ask again with them (once per
    /// request; a second ask closes the connection). Answering a response head: the agent's
    /// body, likewise (the response phase's second ask, [`AskedResponse::body`]).
    Body { limit: usize },
    /// On to another agent endpoint than the route's own (the internal endpoint a policy's
    /// `forward-internal` sent it to) with this head, or with none: the client's own head
    /// with `fields` after its own and the X-Forwarded ones, as [`Decision::Append`] writes
    /// it (the policy only appended fields: such a decision may be held). The body follows
    /// by the client's own framing, and the request is served and recorded as the route's.
    Internal {
        head: Option<Vec<u8>>,
        fields: Vec<Field>,
        to: Box<Target>,
    },
    /// On to the route's agent with the client's own head and these fields after its own
    /// (names in lower case, none of them framing), X-Forwarded ones added by the core as for a
    /// plain route: the common policy that only appends headers, without Python writing the
    /// whole head.
    Append { fields: Vec<Field> },
    /// Answer with this response (its head and its body, as Python wrote them); the
    /// connection stays usable when the request had no body and `close` is false.
    Respond {
        status: u16,
        head: Vec<u8>,
        body: Vec<u8>,
        close: bool,
    },
    /// A response head goes on to the client with these fields (as the response phase left
    /// them) in place of the agent's; its body follows by the agent's framing, or, with
    /// `encode` (compress-response negotiated it: Python's head says so), compressed as it
    /// comes and chunked (encode.rs). After a [`Decision::Body`], what was read goes first,
    /// then the rest as it comes; or, with `body` (the policy rewrote the body, read whole),
    /// `body` alone, framed by the Content-Length Python's fields say.
    Rewrite {
        fields: Vec<Field>,
        encode: Option<crate::encode::Encoding>,
        body: Option<Vec<u8>>,
    },
    /// A response head goes on as [`Decision::Rewrite`] sends it (chunked: no Content-Length,
    /// `encode` as there), its body server-sent events the policy rewrites message by message
    /// (`on_event_stream_message`): each piece read from the agent is Python's first, the
    /// response row asked again with it ([`AskedResponse::body`], `complete` at the body's
    /// end) and answered with what to send instead (a [`Decision::Rewrite`]'s `body`: the
    /// messages it completed, rewritten), or closed (the response cut there).
    Events {
        fields: Vec<Field>,
        encode: Option<crate::encode::Encoding>,
    },
    /// Close the connection without an answer.
    Close,
    /// The connection is Python's from this request on (nothing was run for it).
    Python,
}

/// Where an [`Decision::Internal`] sends a request: an agent endpoint's session and tunnel,
/// and how the core speaks to it (as a route of that endpoint would say).
#[derive(Clone)]
pub struct Target {
    pub session: Arc<crate::session::Session>,
    pub tunnel_id: String,
    /// Its response heads are Python's to rewrite first (the response phase in force there).
    pub responses: bool,
    /// The endpoint's PROXY protocol header: its version and the listener's address.
    pub proxy: Option<(u8, String)>,
    /// The endpoint speaks HTTP/2 (h2up.rs) with this `:scheme`.
    pub h2_upstream: Option<&'static str>,
    /// The endpoint converts WebSockets to TCP (an edge route's converter, a converting
    /// endpoint): the core answers the upgrade and converts (wstcp.rs), as for a route
    /// pushed `ws_tcp`.
    pub ws_tcp: bool,
}

/// A decision and the memo its record carries back.
pub struct Decided {
    pub decision: Decision,
    pub memo: Option<Memo>,
    /// Python says the decision holds for every request of the route with the same key
    /// (held.rs): the route's policy reads nothing else.
    pub hold: bool,
}

/// The decisions waiting, by ticket (shared by both public listeners), and the decisions
/// Python made in its current batch, queued until it flushes them.
#[derive(Default)]
pub struct Decisions {
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Decided>>>,
    queued: Mutex<Vec<(u64, Decided)>>,
}

impl Decisions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Decided>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new ticket and the receiver its decision comes on.
    pub fn ticket(&self) -> (u64, Waiting<'_>) {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        (ticket, self.again(ticket))
    }

    /// A second wait under a ticket already answered once (the ask after a
    /// [`Decision::Body`]): Python's run goes on under the same ticket.
    pub fn again(&self, ticket: u64) -> Waiting<'_> {
        let (tx, rx) = oneshot::channel();
        self.lock().insert(ticket, tx);
        Waiting {
            decisions: self,
            ticket,
            rx,
        }
    }

    /// Python's decision for `ticket`; false when nothing waits for it (answered already,
    /// timed out, or its connection ended).
    pub fn answer(&self, ticket: u64, decided: Decided) -> bool {
        let sender = self.lock().remove(&ticket);
        match sender {
            Some(tx) => tx.send(decided).is_ok(),
            None => false,
        }
    }

    /// A decision made for `ticket`, sent with the others of its batch by [`Self::flush`]:
    /// answering wakes the request's task, which from the edge's thread is a wake-up of a
    /// parked worker (a system call) per request; from a task of the runtime it is a push on
    /// a run queue.
    pub fn queue(&self, ticket: u64, decided: Decided) {
        self.queued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((ticket, decided));
    }

    /// The decisions queued since the last flush, answered by one task on `runtime` (one
    /// wake-up from the caller's thread for the whole batch).
    pub fn flush(self: &Arc<Self>, runtime: &tokio::runtime::Runtime) {
        let batch = std::mem::take(&mut *self.queued.lock().unwrap_or_else(|e| e.into_inner()));
        if batch.is_empty() {
            return;
        }
        let decisions = self.clone();
        runtime.spawn(async move {
            for (ticket, decided) in batch {
                decisions.answer(ticket, decided);
            }
        });
    }

    /// Decisions waiting now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One ticket's wait; its entry leaves the table when the wait ends, however it ends.
pub struct Waiting<'a> {
    decisions: &'a Decisions,
    ticket: u64,
    rx: oneshot::Receiver<Decided>,
}

impl Waiting<'_> {
    /// The decision, or None when none came within `timeout` (or the edge dropped it).
    pub async fn decided(mut self, timeout: Duration) -> Option<Decided> {
        match tokio::time::timeout(timeout, &mut self.rx).await {
            Ok(Ok(decided)) => Some(decided),
            _ => None,
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.decisions.lock().remove(&self.ticket);
    }
}
