//! Where accepted connections wait for the edge: a queue and a wake-up descriptor.
//!
//! The carrier's threads push; the edge's event loop watches [`Inbox::wake_fd`] and, when it
//! is readable, calls [`Inbox::take`] for everything queued. One byte is written when the
//! queue turns non-empty, so a burst of connections costs the loop one wake-up.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

/// A connection handed to the edge: its end of the plaintext socket pair and its facts.
#[derive(Debug)]
pub struct Accepted {
    /// The listener it arrived on ([`crate::carrier::Carrier::listen`]'s id).
    pub listener: u64,
    /// The edge's end of the Unix socket pair, non-blocking; the relay holds the other.
    pub fd: OwnedFd,
    /// The client's address as the TCP connection saw it.
    pub peer: SocketAddr,
    /// The server name the client asked for (SNI), if any.
    pub sni: Option<String>,
    /// The application protocol agreed by ALPN, if any.
    pub alpn: Option<Vec<u8>>,
}

pub struct Inbox {
    queue: Mutex<Vec<Accepted>>,
    wake_tx: UnixStream,
    wake_rx: UnixStream,
}

impl Inbox {
    pub fn new() -> io::Result<Self> {
        let (wake_tx, wake_rx) = UnixStream::pair()?;
        wake_tx.set_nonblocking(true)?;
        wake_rx.set_nonblocking(true)?;
        Ok(Inbox {
            queue: Mutex::new(Vec::new()),
            wake_tx,
            wake_rx,
        })
    }

    /// The descriptor that becomes readable when connections wait.
    pub fn wake_fd(&self) -> RawFd {
        self.wake_rx.as_raw_fd()
    }

    pub fn push(&self, accepted: Accepted) {
        let was_empty = {
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.push(accepted);
            queue.len() == 1
        };
        if was_empty {
            // A full pipe already holds a wake-up: nothing is lost when this write fails.
            let _ = (&self.wake_tx).write(&[1]);
        }
    }

    /// Everything queued, oldest first. The wake-up bytes are read before the queue is taken,
    /// so a connection pushed meanwhile either is in this batch or wakes the loop again.
    pub fn take(&self) -> Vec<Accepted> {
        let mut sink = [0u8; 64];
        while let Ok(n) = (&self.wake_rx).read(&mut sink) {
            if n == 0 {
                break;
            }
        }
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn len(&self) -> usize {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
