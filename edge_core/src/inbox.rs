//! Where the core's news waits for the edge: accepted agent sessions, the sessions' events,
//! public connections handed over, requests served, carried connections ended and requests
//! waiting for a decision, behind one wake-up descriptor.
//!
//! The carrier's threads push; the edge's event loop watches [`Inbox::wake_fd`] and, when it
//! is readable, calls [`Inbox::take`] for everything queued. One byte is written when the
//! queues turn non-empty, so a burst of connections or events costs the loop one wake-up.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use crate::decide::{Asked, AskedResponse};
use crate::public::{Handed, Served};
use crate::session::Session;
use crate::splice::Spliced;

/// An agent connection handed to the edge: its muxado session and its facts.
pub struct Accepted {
    /// The listener it arrived on ([`crate::carrier::Carrier::listen_agents`]'s id).
    pub listener: u64,
    /// The session, already reading the agent's frames.
    pub session: Arc<Session>,
    /// The client's address as the TCP connection saw it.
    pub peer: SocketAddr,
    /// The server name the client asked for (SNI), if any.
    pub sni: Option<String>,
    /// The application protocol agreed by ALPN, if any.
    pub alpn: Option<Vec<u8>>,
}

/// One event of a session: (session key, kind, stream id); the kinds are mux::EV_*.
pub type Event = (u64, u8, u32);

#[derive(Default)]
struct Queues {
    accepted: Vec<Accepted>,
    events: Vec<Event>,
    conns: Vec<Handed>,
    served: Vec<Served>,
    spliced: Vec<Spliced>,
    asked: Vec<Asked>,
    responses: Vec<AskedResponse>,
}

impl Queues {
    fn is_empty(&self) -> bool {
        self.accepted.is_empty()
            && self.events.is_empty()
            && self.conns.is_empty()
            && self.served.is_empty()
            && self.spliced.is_empty()
            && self.asked.is_empty()
            && self.responses.is_empty()
    }
}

/// Everything one take hands over.
pub struct Taken {
    pub accepted: Vec<Accepted>,
    pub events: Vec<Event>,
    pub conns: Vec<Handed>,
    pub served: Vec<Served>,
    pub spliced: Vec<Spliced>,
    /// Decided routes' requests waiting for Python's decision.
    pub asked: Vec<Asked>,
    /// Decided routes' response heads waiting for their response phase.
    pub responses: Vec<AskedResponse>,
}

pub struct Inbox {
    queues: Mutex<Queues>,
    wake_tx: UnixStream,
    wake_rx: UnixStream,
}

impl Inbox {
    pub fn new() -> io::Result<Self> {
        let (wake_tx, wake_rx) = UnixStream::pair()?;
        wake_tx.set_nonblocking(true)?;
        wake_rx.set_nonblocking(true)?;
        Ok(Inbox {
            queues: Mutex::new(Queues::default()),
            wake_tx,
            wake_rx,
        })
    }

    /// The descriptor that becomes readable when something waits.
    pub fn wake_fd(&self) -> RawFd {
        self.wake_rx.as_raw_fd()
    }

    fn with<F: FnOnce(&mut Queues)>(&self, f: F) {
        let was_empty = {
            let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
            let was_empty = q.is_empty();
            f(&mut q);
            was_empty && !q.is_empty()
        };
        if was_empty {
            // A full pipe already holds a wake-up: nothing is lost when this write fails.
            let _ = (&self.wake_tx).write(&[1]);
        }
    }

    pub fn push(&self, accepted: Accepted) {
        self.with(|q| q.accepted.push(accepted));
    }

    /// A public connection handed to Python.
    pub fn push_conn(&self, handed: Handed) {
        self.with(|q| q.conns.push(handed));
    }

    /// A request the core served (its record).
    pub fn push_served(&self, served: Served) {
        self.with(|q| q.served.push(served));
    }

    /// A decided route's request, for Python to decide.
    pub fn push_asked(&self, asked: Asked) {
        self.with(|q| q.asked.push(asked));
    }

    /// A decided route's response head, for Python's response phase.
    pub fn push_response(&self, asked: AskedResponse) {
        self.with(|q| q.responses.push(asked));
    }

    /// A connection the core carried ended.
    pub fn push_spliced(&self, spliced: Spliced) {
        self.with(|q| q.spliced.push(spliced));
    }

    /// A session's events, in the order they happened (`events` is emptied).
    pub fn push_events(&self, key: u64, events: &mut Vec<(u8, u32)>) {
        if events.is_empty() {
            return;
        }
        self.with(|q| {
            q.events
                .extend(events.drain(..).map(|(kind, sid)| (key, kind, sid)))
        });
    }

    /// Everything queued, oldest first. The wake-up bytes are read before the queues are
    /// taken, so what is pushed meanwhile either is in this batch or wakes the loop again. A
    /// session's events come after its own hand-over (it is pushed before it reads).
    pub fn take(&self) -> Taken {
        let mut sink = [0u8; 64];
        while let Ok(n) = (&self.wake_rx).read(&mut sink) {
            if n == 0 {
                break;
            }
        }
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        Taken {
            accepted: std::mem::take(&mut q.accepted),
            events: std::mem::take(&mut q.events),
            conns: std::mem::take(&mut q.conns),
            served: std::mem::take(&mut q.served),
            spliced: std::mem::take(&mut q.spliced),
            asked: std::mem::take(&mut q.asked),
            responses: std::mem::take(&mut q.responses),
        }
    }

    pub fn len(&self) -> usize {
        let q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        q.accepted.len()
            + q.events.len()
            + q.conns.len()
            + q.served.len()
            + q.spliced.len()
            + q.asked.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
