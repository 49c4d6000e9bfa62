//! An agent session on its connection: the muxado state ([`crate::mux::State`]) shared with
//! Python, a reader task that feeds it the peer's bytes and a writer task that sends what it
//! queued.
//!
//! Frames the edge's Python side queues (a request head, WNDINCs as it reads, FINs) are sent
//! when it calls [`Session::flush`], once per turn of its event loop, or at once past
//! `flush_at` bytes: the frames of one turn leave as one write (one TLS record). Frames the
//! reader queues (RSTs, resets at the end of a linger) are sent after each read. Woken with
//! more than one stream of ours open, the writer yields a turn of the runtime first, so the
//! streams the core carries batch the same way (tests/session.rs).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

use crate::inbox::Inbox;
use crate::mux::{End, Limits, State, StreamError, EV_CLOSED, EV_DONE, EV_READABLE, EV_WRITABLE};

/// Bytes read from the connection at once.
pub const READ_CHUNK: usize = 16 * 1024;
/// What the writer may still take to write its last frames (a GOAWAY) once the session ended.
pub const CLOSE_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// The wake-ups of a stream the core carries: its reader's and its writer's.
#[derive(Default)]
pub struct Wakes {
    pub readable: Notify,
    pub writable: Notify,
}

pub struct Session {
    pub key: u64,
    state: Mutex<State>,
    inbox: Arc<Inbox>,
    writer: Notify,
    reader: Notify,
    /// Streams the core itself carries (the public listener's fast path): their events wake
    /// these instead of going to Python.
    owned: Mutex<HashMap<u32, Arc<Wakes>>>,
    born: Instant,
    /// The agent's last heartbeat (crate::heartbeat), in nanoseconds after `born` (0: none
    /// yet, the session's start counts as one), and the heartbeats counted.
    last_beat: AtomicU64,
    beats: AtomicU64,
}

impl Session {
    pub fn new(key: u64, limits: Limits, inbox: Arc<Inbox>) -> Arc<Self> {
        Arc::new(Session {
            key,
            state: Mutex::new(State::new(limits)),
            inbox,
            writer: Notify::new(),
            reader: Notify::new(),
            owned: Mutex::new(HashMap::new()),
            born: Instant::now(),
            last_beat: AtomicU64::new(0),
            beats: AtomicU64::new(0),
        })
    }

    /// The agent's heartbeat arrived now.
    pub fn beat(&self) {
        let at = self.born.elapsed().as_nanos().max(1) as u64;
        self.last_beat.store(at, Ordering::Relaxed);
        self.beats.fetch_add(1, Ordering::Relaxed);
    }

    /// The time since the agent's last heartbeat (since the session began, before the first).
    pub fn since_beat(&self) -> Duration {
        let at = Duration::from_nanos(self.last_beat.load(Ordering::Relaxed));
        self.born.elapsed().saturating_sub(at)
    }

    /// The heartbeats counted since the session began.
    pub fn beats(&self) -> u64 {
        self.beats.load(Ordering::Relaxed)
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `f` on the state; then its events go to the inbox, the writer is woken past
    /// `flush_at` and the reader when the session closed or a linger began.
    pub fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut st = self.lock();
        let linger = st.next_linger();
        let result = f(&mut st);
        let write = st.closed || st.out.len() >= st.limits.flush_at;
        let read = st.closed || (linger.is_none() && st.next_linger().is_some());
        let mut events = std::mem::take(&mut st.events);
        drop(st);
        if !events.is_empty() {
            self.route_owned(&mut events);
        }
        self.inbox.push_events(self.key, &mut events);
        if write {
            self.writer.notify_one();
        }
        if read {
            self.reader.notify_one();
        }
        result
    }

    /// Events of streams the core carries wake their carrier; the session's end wakes them all
    /// (and goes to Python too).
    fn route_owned(&self, events: &mut Vec<(u8, u32)>) {
        let owned = self.owned.lock().unwrap_or_else(|e| e.into_inner());
        if owned.is_empty() {
            return;
        }
        events.retain(|(kind, sid)| match *kind {
            EV_READABLE | EV_WRITABLE => match owned.get(sid) {
                Some(wakes) => {
                    if *kind == EV_READABLE {
                        wakes.readable.notify_one();
                    } else {
                        wakes.writable.notify_one();
                    }
                    false
                }
                None => true,
            },
            EV_CLOSED => {
                owned.values().for_each(|w| {
                    w.readable.notify_one();
                    w.writable.notify_one();
                });
                true
            }
            _ => true,
        });
    }

    /// A stream of ours the core carries itself (Python never sees it): its wake-up.
    pub fn own(&self, sid: u32) -> Arc<Wakes> {
        let notify = Arc::new(Wakes::default());
        self.owned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(sid, notify.clone());
        notify
    }

    /// The core is done with a stream it carried: FIN, as `finish` (mux.rs) has it.
    pub fn disown(&self, sid: u32) {
        self.owned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&sid);
        self.with(|st| st.finish(sid));
        self.flush();
    }

    /// Send what is queued.
    pub fn flush(&self) {
        if !self.lock().out.is_empty() {
            self.writer.notify_one();
        }
    }

    /// Up to `max` bytes of a stream the core carries (`own`) appended to `buf`: 0 at the
    /// peer's EOF. Credit the read earned goes out at once.
    pub async fn read_owned(
        &self,
        sid: u32,
        wakes: &Wakes,
        buf: &mut Vec<u8>,
        max: usize,
    ) -> Result<usize, StreamError> {
        loop {
            let (got, credit) = self.with(|st| {
                let queued = st.out.len();
                let got = st.read(sid, max, |b| {
                    buf.extend_from_slice(b);
                    b.len()
                });
                (got, st.out.len() > queued)
            });
            if credit {
                self.flush();
            }
            match got? {
                Some(n) => return Ok(n),
                None => wakes.readable.notified().await,
            }
        }
    }

    /// `data` queued on a stream the core carries as its window allows, then sent.
    pub async fn write_owned(
        &self,
        sid: u32,
        wakes: &Wakes,
        data: &[u8],
    ) -> Result<(), StreamError> {
        let mut at = 0;
        while at < data.len() {
            let taken = self.with(|st| st.write(sid, &data[at..]))?;
            if taken == 0 {
                self.flush();
                wakes.writable.notified().await;
            }
            at += taken;
        }
        self.flush();
        Ok(())
    }
}

/// Serve `session` on `io` until it ends, whatever the reason; EV_DONE once the connection
/// is closed (what was queued before the end written, within CLOSE_WRITE_TIMEOUT).
pub async fn run<IO>(session: Arc<Session>, io: IO)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (r, w) = tokio::io::split(io);
    let writer = tokio::spawn(write_loop(session.clone(), w));
    read_loop(&session, r).await;
    session.with(|st| st.close("session closed"));
    let _ = writer.await;
    session
        .inbox
        .push_events(session.key, &mut vec![(EV_DONE, 0)]);
}

async fn read_loop<R: AsyncRead + Unpin>(session: &Session, mut r: R) {
    let mut buf = vec![0u8; READ_CHUNK];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let (closed, paused, next_linger) = {
            let mut st = session.lock();
            (st.closed, st.reading_paused(), st.next_linger())
        };
        if closed {
            return;
        }
        let linger = async move {
            match next_linger {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending::<()>().await,
            }
        };
        if paused {
            tokio::select! {
                _ = session.reader.notified() => {}
                _ = linger => {
                    session.with(|st| st.lingers_due(Instant::now()));
                    session.flush();
                }
            }
            continue;
        }
        tokio::select! {
            read = r.read(&mut buf) => {
                let n = match read {
                    Ok(0) => {
                        session.with(|st| st.close("peer closed the connection"));
                        return;
                    }
                    Err(e) => {
                        session.with(|st| st.close(&format!("connection lost: {e}")));
                        return;
                    }
                    Ok(n) => n,
                };
                pending.extend_from_slice(&buf[..n]);
                let fed = session.with(|st| {
                    let fed = st.feed(&mut pending);
                    match &fed {
                        Err(End::Protocol(code, message)) => {
                            st.go_away(*code, &format!("protocol error: {message}"))
                        }
                        Err(End::GoneAway(reason)) => st.close(reason),
                        Ok(()) => {}
                    }
                    fed
                });
                if fed.is_err() {
                    return;
                }
                if pending.is_empty() && pending.capacity() > 2 * READ_CHUNK {
                    pending = Vec::new();
                }
                session.flush();
            }
            _ = session.reader.notified() => {}
            _ = linger => {
                session.with(|st| st.lingers_due(Instant::now()));
                session.flush();
            }
        }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(session: Arc<Session>, mut w: W) {
    let mut spare: Vec<u8> = Vec::new();
    let mut deadline: Option<Instant> = None; // once closed: the last frames' bound
    loop {
        let mut batch = std::mem::take(&mut spare);
        let closed = {
            let mut st = session.lock();
            std::mem::swap(&mut st.out, &mut batch);
            st.in_flight = batch.len();
            st.closed
        };
        if closed && deadline.is_none() {
            deadline = Some(Instant::now() + CLOSE_WRITE_TIMEOUT);
        }
        if batch.is_empty() {
            if closed {
                break;
            }
            spare = batch;
            session.writer.notified().await;
            // With other streams of ours under way, let the tasks woken with this one queue
            // their frames first: the requests of one turn of the runtime leave in one write
            // (one TLS record, one system call). A lone request leaves at once.
            if session.lock().local_open > 1 {
                tokio::task::yield_now().await;
            }
            continue;
        }
        let write = async {
            w.write_all(&batch).await?;
            w.flush().await
        };
        let result = match deadline {
            Some(at) => tokio::time::timeout_at(at.into(), write)
                .await
                .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into())),
            None => write.await,
        };
        if let Err(e) = result {
            session.with(|st| {
                st.in_flight = 0;
                st.out.clear();
                st.close(&format!("connection lost: {e}"));
            });
            return;
        }
        batch.clear();
        if batch.capacity() <= 4 * READ_CHUNK {
            spare = batch;
        }
        if session.with(|st| st.written()) {
            session.reader.notify_one();
        }
    }
    let at = deadline.unwrap_or_else(|| Instant::now() + CLOSE_WRITE_TIMEOUT);
    let _ = tokio::time::timeout_at(at.into(), w.shutdown()).await;
}
