//! HTTP/2 with clients on the public HTTPS listener, for the connections the core terminates
//! (https.rs: ALPN `h2` chosen). The protocol is the `h2` crate's (the server side hyper
//! runs); each stream is served by the HTTP/1.1 path itself (public.rs `connection`) over a
//! **virtual connection**: an in-process pipe on which the stream's request is written as an
//! HTTP/1.1 request and the answer read back as an HTTP/1.1 response, turned into HEADERS,
//! DATA and trailers. So routing, decided routes and held decisions, the records, the error
//! answers and the hand-over to Python are the HTTP/1.1 ones, written once (as
//! edge/h2front.py serves each stream through edge/public.py's request path). A virtual
//! connection whose exchange ended cleanly is kept for the connection's next stream to the
//! same host (with its proxy stream, as a keep-alive connection keeps its own); one handed
//! to Python is Python's (`HttpFront` over the TLS bridge, as on HTTP/1.1) until it ends.
//!
//! A connection's streams and its virtual connections are not tasks of their own: the
//! connection's task drives them all ([`Tasks`]), so a request's trips between the h2 codec,
//! its stream and its virtual connection are polls within one task on one thread, as an
//! HTTP/1.1 connection's are, and only the agent's session wakes it from another task. One
//! connection's streams therefore share one thread at a time; the connections spread over
//! the runtime's threads.
//!
//! The bounds are edge/h2front.py's (docs/HTTP2.md), each a named constant: streams per
//! connection, the header block (encoded and decoded), 16 KiB frames, the flow-control
//! windows (a request's body is credited back only once it went on towards the agent), the
//! response queued per stream, a response that cannot move for `h2_stall_timeout`, the
//! streams a client resets and the frames that cost an answer or carry nothing per
//! `BUDGET`, each plus half the streams answered meanwhile. The frame budgets and the
//! header-block bounds are read off the bytes before `h2` sees them ([`Watched`]): the frame
//! that passes a bound never reaches it, and the connection ends with GOAWAY
//! ENHANCE_YOUR_CALM.

use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_rustls::server::TlsStream;

use crate::http::{self as h1, Framing, Parsed};
use crate::https;
use crate::public::{self, Abort, Conn, Public, Ticket, TlsFacts};

/// Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
pub const MAX_CONCURRENT_STREAMS: u32 = 100;
/// Streams being served or winding down at once; a stream past it is refused.
pub const MAX_TASKS: usize = 2 * MAX_CONCURRENT_STREAMS as usize;
/// A request body held per stream and per connection before it went on to the agent.
pub const STREAM_WINDOW: u32 = 64 * 1024;
pub const CONNECTION_WINDOW: u32 = 1024 * 1024;
/// A header block as sent (HEADERS and its CONTINUATIONs), and as decoded.
pub const MAX_HEADER_BLOCK: usize = 64 * 1024;
pub const MAX_HEADER_LIST_SIZE: usize = 64 * 1024;
/// The decoder's dynamic table (SETTINGS_HEADER_TABLE_SIZE, h2's and RFC 7541's default).
pub const HEADER_TABLE_SIZE: usize = 4096;
/// Frames are never larger than HTTP/2's default.
pub const MAX_FRAME_SIZE: u32 = 16 * 1024;
/// A response's bytes held per stream beyond what the client's windows let through.
pub const LOW_WATER: usize = 64 * 1024;
/// The window of the frame budgets.
pub const BUDGET: Duration = Duration::from_secs(10);
/// Streams the client resets per BUDGET (rapid reset), plus half the streams answered.
pub const MAX_RESETS: u64 = 200;
/// SETTINGS, PING, PRIORITY, empty DATA and unknown frames per BUDGET, plus half the
/// streams answered.
pub const MAX_CONTROL: u64 = 1000;
/// Idle virtual connections kept per client connection.
const KEEP_VIRTUAL: usize = MAX_CONCURRENT_STREAMS as usize;
/// How long the connection is still driven once it was told to end (its GOAWAY flushed).
const CLOSING: Duration = Duration::from_secs(2);
/// Bytes read from a virtual connection at once: a response's body, and its head.
const READ_CHUNK: usize = 64 * 1024;
const HEAD_CHUNK: usize = 8 * 1024;
/// The first read of an answer: a small answer's head and body whole, in an allocation glibc
/// serves from its small bins (one of 1 KiB or more first consolidates its fast bins: a
/// measured cost on every request when it was 8 KiB). A longer head grows it by HEAD_CHUNK.
const FIRST_READ: usize = 960;

// ---- the frames' budgets, read off the bytes ------------------------------------------------

/// What the frames' reader and the connection share: the trip, and the streams answered.
#[derive(Default)]
struct Watch {
    tripped: AtomicBool,
    notify: Notify,
    answered: AtomicU64,
}

impl Watch {
    fn trip(&self) {
        self.tripped.store(true, Ordering::Relaxed);
        self.notify.notify_one();
    }
}

/// The frame being read, and what the budgets count.
pub struct Frames {
    preface: usize,
    head: [u8; 9],
    have: usize,
    left: usize,
    kind: u8,
    flags: u8,
    /// The HEADERS frame's payload (its padding and priority stripped once it is whole).
    payload: Vec<u8>,
    /// The header block so far, and its bytes on the wire.
    block: Vec<u8>,
    block_wire: usize,
    sizes: ListSizes,
    /// The block being read is one h2 never decodes (a HEADERS frame depending on its own
    /// stream: h2's stream error comes before HPACK, framed_read.rs), so neither does the model.
    skip: bool,
    pub resets: u64,
    pub control: u64,
    since: Instant,
    /// The streams answered when the budget's window began.
    answered_before: u64,
}

impl Default for Frames {
    fn default() -> Self {
        Frames {
            preface: 24,
            head: [0; 9],
            have: 0,
            left: 0,
            kind: 0,
            flags: 0,
            payload: Vec::new(),
            block: Vec::new(),
            block_wire: 0,
            sizes: ListSizes::default(),
            skip: false,
            resets: 0,
            control: 0,
            since: Instant::now(),
            answered_before: 0,
        }
    }
}

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

impl Frames {
    /// Read `data` (the client's next bytes); Some(n): a bound was passed by the frame that
    /// starts at `n` (0 when it started before `data`), whose bytes must not go on.
    /// `answered`: the streams answered in the budget's window so far.
    pub fn scan(&mut self, data: &[u8], answered: u64, now: Instant) -> Option<usize> {
        if now.duration_since(self.since) > BUDGET {
            self.since = now;
            self.resets = 0;
            self.control = 0;
            self.answered_before = answered;
        }
        let answered = answered.saturating_sub(self.answered_before);
        let mut i = 0;
        let mut frame_start = 0;
        while i < data.len() {
            if self.preface > 0 {
                let take = self.preface.min(data.len() - i);
                self.preface -= take;
                i += take;
                continue;
            }
            if self.have < 9 {
                if self.have == 0 {
                    frame_start = i;
                }
                let take = (9 - self.have).min(data.len() - i);
                self.head[self.have..self.have + take].copy_from_slice(&data[i..i + take]);
                self.have += take;
                i += take;
                if self.have < 9 {
                    break;
                }
                if !self.began(answered) {
                    return Some(frame_start);
                }
                if self.left == 0 && !self.ended() {
                    return Some(frame_start);
                }
                continue;
            }
            let take = self.left.min(data.len() - i);
            if self.kind == HEADERS {
                self.payload.extend_from_slice(&data[i..i + take]);
            } else if self.kind == CONTINUATION {
                self.block.extend_from_slice(&data[i..i + take]);
            }
            self.left -= take;
            i += take;
            if self.left == 0 && !self.ended() {
                return Some(frame_start);
            }
        }
        None
    }

    /// A frame's header was read: count it; false when it passes a budget or the block's bound.
    fn began(&mut self, answered: u64) -> bool {
        let h = &self.head;
        self.left = ((h[0] as usize) << 16) | ((h[1] as usize) << 8) | h[2] as usize;
        self.kind = h[3];
        self.flags = h[4];
        let earned = answered / 2;
        match self.kind {
            RST_STREAM => self.resets += 1,
            SETTINGS | PING if self.flags & ACK == 0 => self.control += 1,
            PRIORITY => self.control += 1,
            DATA if self.left == 0 && self.flags & END_STREAM == 0 => self.control += 1,
            kind if kind > CONTINUATION => self.control += 1,
            HEADERS => {
                self.block.clear();
                self.payload.clear();
                self.block_wire = 0;
            }
            _ => {}
        }
        if matches!(self.kind, HEADERS | CONTINUATION) {
            self.block_wire += self.left;
            if self.block_wire > MAX_HEADER_BLOCK {
                return false;
            }
        }
        self.resets <= MAX_RESETS + earned && self.control <= MAX_CONTROL + earned
    }

    /// A frame's payload was read whole: false when its header block decodes past the bound.
    fn ended(&mut self) -> bool {
        self.have = 0;
        if self.kind == HEADERS {
            let mut p = &self.payload[..];
            let mut pad = 0usize;
            if self.flags & PADDED != 0 && !p.is_empty() {
                pad = p[0] as usize;
                p = &p[1..];
            }
            self.skip = false;
            if self.flags & PRIORITY_FLAG != 0 {
                let sid =
                    u32::from_be_bytes([self.head[5], self.head[6], self.head[7], self.head[8]])
                        & 0x7fff_ffff;
                if let Some(dep) = p.get(..4) {
                    let dep = u32::from_be_bytes([dep[0], dep[1], dep[2], dep[3]]) & 0x7fff_ffff;
                    self.skip = dep == sid;
                }
                p = p.get(5..).unwrap_or(&[]);
            }
            let fragment = &p[..p.len().saturating_sub(pad)];
            self.block.extend_from_slice(fragment);
            self.payload.clear();
        }
        if !matches!(self.kind, HEADERS | CONTINUATION) || self.flags & END_HEADERS == 0 {
            return true;
        }
        let block = std::mem::take(&mut self.block);
        self.block_wire = 0;
        if std::mem::take(&mut self.skip) {
            return true;
        }
        // the model reads more than h2 does (longer integers, a size update anywhere): a block
        // it cannot read, h2 refuses too (COMPRESSION_ERROR), so it ends the connection here
        matches!(self.sizes.block(&block), Some(size) if size <= MAX_HEADER_LIST_SIZE)
    }
}

// ---- the header list's decoded size ---------------------------------------------------------

/// Name and value lengths of HPACK's static table (RFC 7541 Appendix A).
const STATIC_TABLE: [(u16, u16); 61] = [
    (10, 0),
    (7, 3),
    (7, 4),
    (5, 1),
    (5, 11),
    (7, 4),
    (7, 5),
    (7, 3),
    (7, 3),
    (7, 3),
    (7, 3),
    (7, 3),
    (7, 3),
    (7, 3),
    (14, 0),
    (15, 13),
    (15, 0),
    (13, 0),
    (6, 0),
    (27, 0),
    (3, 0),
    (5, 0),
    (13, 0),
    (13, 0),
    (19, 0),
    (16, 0),
    (16, 0),
    (14, 0),
    (16, 0),
    (13, 0),
    (12, 0),
    (6, 0),
    (4, 0),
    (4, 0),
    (6, 0),
    (7, 0),
    (4, 0),
    (4, 0),
    (8, 0),
    (17, 0),
    (13, 0),
    (8, 0),
    (19, 0),
    (13, 0),
    (4, 0),
    (8, 0),
    (12, 0),
    (18, 0),
    (19, 0),
    (5, 0),
    (7, 0),
    (7, 0),
    (11, 0),
    (6, 0),
    (10, 0),
    (25, 0),
    (17, 0),
    (10, 0),
    (4, 0),
    (3, 0),
    (16, 0),
];

/// How many of HPACK's 257 Huffman codes (RFC 7541 Appendix B, a canonical code) have each
/// length in bits, 0 to 30.
const HUFFMAN_LENGTHS: [u16; 31] = [
    0, 0, 0, 0, 0, 10, 26, 32, 6, 0, 5, 3, 2, 6, 2, 3, 0, 0, 0, 3, 8, 13, 26, 29, 12, 4, 15, 19,
    29, 0, 4,
];

/// The symbols a Huffman-coded string decodes to (its trailing padding not counted): a
/// canonical code is read by its lengths alone.
pub fn huffman_len(bytes: &[u8]) -> usize {
    let (mut code, mut first, mut len, mut symbols) = (0u32, 0u32, 0usize, 0usize);
    for byte in bytes {
        for bit in (0..8).rev() {
            code = (code << 1) | ((*byte >> bit) & 1) as u32;
            len += 1;
            first <<= 1;
            let count = HUFFMAN_LENGTHS.get(len).copied().unwrap_or(0) as u32;
            if code < first + count {
                symbols += 1;
                (code, first, len) = (0, 0, 0);
            } else {
                first += count;
            }
            if len > 30 {
                return symbols; // not a code: h2 refuses the block
            }
        }
    }
    symbols
}

/// What HPACK's decoder holds, as sizes only: the dynamic table's entries (name and value
/// lengths, newest first) and its size, so that a block's decoded header list size (RFC 9113
/// 6.5.2: each field's name and value and 32) is known before h2 decodes it.
#[derive(Default)]
pub struct ListSizes {
    entries: std::collections::VecDeque<(usize, usize)>,
    size: usize,
    max: Option<usize>,
}

impl ListSizes {
    fn max(&self) -> usize {
        self.max.unwrap_or(HEADER_TABLE_SIZE)
    }

    fn evict(&mut self) {
        while self.size > self.max() {
            match self.entries.pop_back() {
                Some((n, v)) => self.size -= n + v + 32,
                None => break,
            }
        }
    }

    /// (name length, value length) of the entry at `index` (1-based, static then dynamic).
    fn entry(&self, index: usize) -> Option<(usize, usize)> {
        match index {
            0 => None,
            1..=61 => STATIC_TABLE
                .get(index - 1)
                .map(|(n, v)| (*n as usize, *v as usize)),
            _ => self.entries.get(index - 62).copied(),
        }
    }

    /// The decoded header list size of one header block, the table updated as h2's decoder
    /// updates its own; None when the block is not valid HPACK.
    pub fn block(&mut self, buf: &[u8]) -> Option<usize> {
        let mut at = 0;
        let mut total = 0usize;
        while at < buf.len() {
            let first = buf[at];
            let (name, value) = if first & 0x80 != 0 {
                self.entry(integer(buf, &mut at, 7)?)?
            } else if first & 0xe0 == 0x20 {
                let max = integer(buf, &mut at, 5)?;
                if max > HEADER_TABLE_SIZE {
                    return None;
                }
                self.max = Some(max);
                self.evict();
                continue;
            } else {
                let (prefix, indexing) = if first & 0x40 != 0 {
                    (6, true)
                } else {
                    (4, false)
                };
                let index = integer(buf, &mut at, prefix)?;
                let name = if index == 0 {
                    string(buf, &mut at)?
                } else {
                    self.entry(index)?.0
                };
                let value = string(buf, &mut at)?;
                if indexing {
                    self.entries.push_front((name, value));
                    self.size += name + value + 32;
                    self.evict();
                }
                (name, value)
            };
            total += name + value + 32;
        }
        Some(total)
    }
}

/// An HPACK integer with a `prefix`-bit prefix at `buf[*at]` (RFC 7541 5.1).
fn integer(buf: &[u8], at: &mut usize, prefix: u32) -> Option<usize> {
    let mask = (1usize << prefix) - 1;
    let mut value = (*buf.get(*at)? as usize) & mask;
    *at += 1;
    if value < mask {
        return Some(value);
    }
    let mut shift = 0;
    loop {
        let byte = *buf.get(*at)?;
        *at += 1;
        value = value.checked_add(((byte & 0x7f) as usize).checked_shl(shift)?)?;
        if byte & 0x80 == 0 {
            return Some(value);
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
}

/// An HPACK string's decoded length (RFC 7541 5.2).
fn string(buf: &[u8], at: &mut usize) -> Option<usize> {
    let huffman = *buf.get(*at)? & 0x80 != 0;
    let len = integer(buf, at, 7)?;
    let bytes = buf.get(*at..*at + len)?;
    *at += len;
    Some(if huffman { huffman_len(bytes) } else { len })
}

/// The client's side of the connection as h2 reads it: every byte passes [`Frames`] first.
struct Watched {
    io: TlsStream<TcpStream>,
    frames: Frames,
    watch: Arc<Watch>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.watch.tripped.load(Ordering::Relaxed) {
            return Poll::Pending; // the connection is being ended (serve)
        }
        let start = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        let answered = this.watch.answered.load(Ordering::Relaxed);
        let read = &buf.filled()[start..];
        if let Some(cut) = this.frames.scan(read, answered, Instant::now()) {
            buf.set_filled(start + cut);
            this.watch.trip();
            if cut == 0 {
                return Poll::Pending; // nothing of it goes on (not an end of stream)
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

// ---- virtual connections --------------------------------------------------------------------

/// The HTTP/1.1 path's end of a virtual connection (public.rs `connection` serves it).
struct Virtual {
    io: DuplexStream,
    /// The stream was reset or failed: the end of what the front wrote is a reset, not a
    /// half-close (an exchange in progress ends at once).
    aborted: Arc<Abort>,
    facts: TlsFacts,
    local: SocketAddr,
    /// Set once it was handed to Python: Python serves it as one keep-alive connection, so
    /// it is never kept for the host's next stream (each stream a connection of its own
    /// there too: its `on_tcp_connect` rules run on it).
    handed: Arc<AtomicBool>,
}

impl AsyncRead for Virtual {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let start = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) if buf.filled().len() == start => {
                if this.aborted.is_set() {
                    Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()))
                } else {
                    Poll::Ready(Ok(()))
                }
            }
            other => other,
        }
    }
}

impl AsyncWrite for Virtual {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl Conn for Virtual {
    fn abort(&self) -> Option<Arc<Abort>> {
        Some(self.aborted.clone())
    }

    type Reader<'a> = tokio::io::ReadHalf<&'a mut Virtual>;
    type Writer<'a> = tokio::io::WriteHalf<&'a mut Virtual>;

    fn halves(&mut self) -> (Self::Reader<'_>, Self::Writer<'_>) {
        tokio::io::split(self)
    }

    fn tls_facts(&self) -> Option<TlsFacts> {
        Some(self.facts.clone())
    }

    fn tls_spec(&self) -> u64 {
        self.facts.spec
    }

    fn hand_over(
        self,
        peer: SocketAddr,
        data: Vec<u8>,
        first: bool,
        public: &Public,
        ticket: Ticket,
    ) {
        let (facts, local) = (self.facts.clone(), self.local);
        self.handed.store(true, Ordering::Relaxed);
        https::bridge_to_python(self, facts, peer, local, data, first, public, ticket);
    }
}

/// The front's end of a virtual connection.
struct Front {
    io: DuplexStream,
    aborted: Arc<Abort>,
    idle_since: Instant,
    handed: Arc<AtomicBool>,
}

impl Front {
    /// Ends the virtual connection as a client's reset ends a connection.
    fn abort(self) {
        self.aborted.set();
    }
}

/// One client connection's shared state.
struct Client {
    public: Arc<Public>,
    peer: SocketAddr,
    local: SocketAddr,
    facts: TlsFacts,
    watch: Arc<Watch>,
    /// Idle virtual connections by host.
    kept: Mutex<HashMap<String, Vec<Front>>>,
    /// Streams being served (tasks alive), and a wake-up when one ends.
    tasks: AtomicUsize,
    /// Virtual connections whose HTTP/1.1 side still runs (kept, serving, or still winding
    /// down after its stream was reset: public.rs may be blocked on the agent's window and
    /// not read the abort); the connection's ticket is held until they end.
    virtuals: Arc<AtomicUsize>,
    ended: Notify,
    closing: AtomicBool,
    /// Work to be driven by the connection's own task ([`Tasks`]): a stream, a virtual
    /// connection; queued here by whoever made it, taken in by the connection at once.
    queued: Mutex<Vec<Task>>,
}

/// A stream's or a virtual connection's work, driven by its connection's task.
type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A virtual connection counted in `Client::virtuals` from its start until it ends (or
/// panics).
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Counted(count.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A stream counted in `Client::tasks` from its start until it ends (or panics), the
/// connection told then.
struct Served(Arc<Client>);

impl Served {
    fn new(client: &Arc<Client>) -> Self {
        client.tasks.fetch_add(1, Ordering::Relaxed);
        Served(client.clone())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.0.tasks.fetch_sub(1, Ordering::Relaxed);
        self.0.ended.notify_one();
    }
}

/// Empties the queue when `serve` ends or is dropped: a queued stream holds its `Client`.
struct Unqueue(Arc<Client>);

impl Drop for Unqueue {
    fn drop(&mut self) {
        self.0
            .queued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// A connection's streams and virtual connections, driven by the connection's own task
/// rather than spawned as tasks of their own: the wake-ups between a stream, its virtual
/// connection and the h2 codec stay within one task (and one thread), as they are within
/// the task of an HTTP/1.1 connection; only the agent's session wakes it from outside.
struct Tasks(FuturesUnordered<Task>);

impl Tasks {
    /// Drives what is queued and what runs until none of it can move; never Ready (each
    /// piece of work ends by itself, and is dropped then).
    fn poll_drive(&mut self, client: &Client, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            self.0.extend(
                client
                    .queued
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .drain(..),
            );
            let moved = matches!(self.0.poll_next_unpin(cx), Poll::Ready(Some(())));
            let queued = !client
                .queued
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty();
            if !moved && !queued {
                return Poll::Pending;
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Client {
    /// Queues work for the connection's task. Called only from within that task (a stream
    /// accepted by `serve`'s loop, a virtual connection opened by a stream it drives), which
    /// takes the queue in before it next waits: nothing else wakes it for this. A panic in
    /// the work ends that work alone, as a spawned task's would.
    fn run(&self, task: impl Future<Output = ()> + Send + 'static) {
        let task = AssertUnwindSafe(task).catch_unwind().map(|_| ());
        self.queued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::pin(task));
    }

    fn open(&self) -> Front {
        let (ours, theirs) = tokio::io::duplex(READ_CHUNK);
        let aborted = Arc::new(Abort::default());
        // what the virtual connection carries is HTTP/1.1: so its ALPN says (Python's
        // listener reads a bridged connection by it; no rule reads the ALPN itself)
        let facts = TlsFacts {
            alpn: Some(b"http/1.1".to_vec()),
            ..self.facts.clone()
        };
        let handed = Arc::new(AtomicBool::new(false));
        let virt = Virtual {
            io: theirs,
            aborted: aborted.clone(),
            facts,
            local: self.local,
            handed: handed.clone(),
        };
        let public = self.public.clone();
        let (peer, local) = (self.peer, self.local);
        let counted = Counted::new(&self.virtuals);
        self.run(async move {
            public::connection(virt, peer, local, public, Ticket::free(), Vec::new()).await;
            drop(counted);
        });
        Front {
            io: ours,
            aborted,
            idle_since: Instant::now(),
            handed,
        }
    }

    /// A kept virtual connection for `host` (one idle for less than half the idle timeout:
    /// the HTTP/1.1 path ends it at the timeout), or None.
    fn take(&self, host: &str) -> Option<Front> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let fronts = kept.get_mut(host)?;
        let fresh = self.public.spec.idle_timeout / 2;
        let mut found = None;
        while let Some(front) = fronts.pop() {
            if front.idle_since.elapsed() < fresh {
                found = Some(front);
                break;
            }
        }
        if fronts.is_empty() {
            kept.remove(host); // a host (the client's :authority) is not kept without a front
        }
        found
    }

    fn keep(&self, host: String, mut front: Front) {
        if self.closing.load(Ordering::Relaxed) {
            return;
        }
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.values().map(Vec::len).sum::<usize>() >= KEEP_VIRTUAL {
            return;
        }
        front.idle_since = Instant::now();
        kept.entry(host).or_default().push(front);
    }
}

// ---- the connection -------------------------------------------------------------------------

/// An HTTP/2 connection the HTTPS listener terminated. The connection holds `ticket`: waiting
/// (evictable) while no stream is open, busy otherwise; idle, it ends after the head timeout
/// (before its first stream) or the idle timeout, with GOAWAY NO_ERROR.
pub(crate) async fn serve(
    tls: TlsStream<TcpStream>,
    peer: SocketAddr,
    local: SocketAddr,
    public: Arc<Public>,
    mut ticket: Ticket,
    required: u64,
) {
    let facts = https::facts(tls.get_ref().1, required);
    let watch = Arc::new(Watch::default());
    let io = Watched {
        io: tls,
        frames: Frames::default(),
        watch: watch.clone(),
    };
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME_SIZE)
        .max_header_list_size(MAX_HEADER_LIST_SIZE as u32)
        .header_table_size(HEADER_TABLE_SIZE as u32)
        .max_send_buffer_size(LOW_WATER)
        // the budgets above count resets; h2's own count of them stays behind
        .max_pending_accept_reset_streams(MAX_RESETS as usize);
    let spec = public.spec.clone();
    ticket.waiting();
    let handshake = builder.handshake::<_, Bytes>(io);
    let mut conn = tokio::select! {
        done = tokio::time::timeout(spec.head_timeout, handshake) => match done {
            Ok(Ok(conn)) => conn,
            _ => return,
        },
        _ = ticket.eviction() => return,
    };
    let client = Arc::new(Client {
        public,
        peer,
        local,
        facts,
        watch: watch.clone(),
        kept: Mutex::new(HashMap::new()),
        tasks: AtomicUsize::new(0),
        virtuals: Arc::new(AtomicUsize::new(0)),
        ended: Notify::new(),
        closing: AtomicBool::new(false),
        queued: Mutex::new(Vec::new()),
    });
    let _unqueue = Unqueue(client.clone());
    let mut tasks = Tasks(FuturesUnordered::new());
    let mut first = true;
    let reason = loop {
        let idle = client.tasks.load(Ordering::Relaxed) == 0;
        let deadline = if idle {
            ticket.waiting();
            Instant::now()
                + if first {
                    spec.head_timeout
                } else {
                    spec.idle_timeout
                }
        } else {
            ticket.busy();
            Instant::now() + Duration::from_secs(86400)
        };
        tokio::select! {
            accepted = conn.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    first = false;
                    ticket.busy();
                    if client.tasks.load(Ordering::Relaxed) >= MAX_TASKS
                        || client.virtuals.load(Ordering::Relaxed) >= MAX_TASKS + KEEP_VIRTUAL
                    {
                        let mut respond = respond;
                        respond.send_reset(Reason::REFUSED_STREAM);
                        continue;
                    }
                    let each = Served::new(&client);
                    client.run(async move {
                        stream(&each.0, request, respond).await;
                        drop(each);
                    });
                }
                // h2's connection error (its GOAWAY sent), or the client's end
                Some(Err(_)) | None => break None,
            },
            _ = watch.notify.notified() => break Some(Reason::ENHANCE_YOUR_CALM),
            _ = tokio::time::sleep_until(deadline.into()), if idle => break Some(Reason::NO_ERROR),
            _ = ticket.eviction(), if idle => break Some(Reason::NO_ERROR),
            _ = client.public.closed() => break Some(Reason::NO_ERROR),
            _ = client.ended.notified() => {}
            _ = poll_fn(|cx| tasks.poll_drive(&client, cx)) => {}
        }
    };
    client.closing.store(true, Ordering::Relaxed);
    client
        .kept
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clear();
    match reason {
        Some(Reason::NO_ERROR) => conn.graceful_shutdown(),
        Some(reason) => conn.abrupt_shutdown(reason),
        None => {}
    }
    if reason.is_some() {
        let closed = poll_fn(|cx| {
            let _ = tasks.poll_drive(&client, cx);
            conn.poll_closed(cx)
        });
        let _ = tokio::time::timeout(CLOSING, closed).await;
    }
    drop(conn);
    // the connection's place (its ticket) is held until its streams and virtual connections
    // ended: one left winding down after a reset still holds a proxy stream and its buffers
    ticket.busy();
    // (poll_drive returns with the queue taken in: what is left runs in `tasks`)
    poll_fn(|cx| {
        let _ = tasks.poll_drive(&client, cx);
        if tasks.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

// ---- one stream -----------------------------------------------------------------------------

/// A request HTTP/2 allows and the HTTP/1.1 path cannot carry: 400, on its stream only.
fn refused(why: &str) -> (u16, &'static str, String) {
    (
        400,
        "ERR_NGROK_3002",
        format!("The request is not valid HTTP: {why}"),
    )
}

/// The request as the HTTP/1.1 path reads it: Host from `:authority`, cookies joined (RFC
/// 9113 8.2.3), a body of unknown length sent chunked.
fn request_head(req: &Request<RecvStream>, chunked: bool) -> Result<(Vec<u8>, String), String> {
    let authority = match req.uri().authority() {
        Some(a) => a.as_str().as_bytes().to_vec(),
        None => match req.headers().get(http::header::HOST) {
            Some(h) => h.as_bytes().to_vec(),
            None => return Err("no :authority and no Host".to_string()),
        },
    };
    let target = match req.uri().path_and_query() {
        Some(p) => p.as_str().to_string(),
        None => "/".to_string(),
    };
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(req.method().as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(&authority);
    out.extend_from_slice(b"\r\n");
    let mut cookies: Vec<&[u8]> = Vec::new();
    for (name, value) in req.headers() {
        match name.as_str() {
            "host" | "te" | "connection" | "transfer-encoding" | "upgrade" | "keep-alive" => {}
            "cookie" => cookies.push(value.as_bytes()),
            _ => {
                out.extend_from_slice(name.as_str().as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(value.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        }
    }
    if !cookies.is_empty() {
        out.extend_from_slice(b"cookie: ");
        out.extend_from_slice(&cookies.join(&b"; "[..]));
        out.extend_from_slice(b"\r\n");
    }
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok((out, h1::host_of(&authority)))
}

/// Serves one stream on a virtual connection.
async fn stream(client: &Client, request: Request<RecvStream>, mut respond: SendResponse<Bytes>) {
    let grpc = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    if request.method() == Method::CONNECT {
        let (status, code, msg) = refused("CONNECT is not served");
        return answer(&mut respond, status, code, &msg, grpc);
    }
    let bodiless = request.body().is_end_stream();
    let chunked = !bodiless && !request.headers().contains_key(http::header::CONTENT_LENGTH);
    let (head, host) = match request_head(&request, chunked) {
        Ok(made) => made,
        Err(why) => {
            let (status, code, msg) = refused(&why);
            return answer(&mut respond, status, code, &msg, grpc);
        }
    };
    let head_request = request.method() == Method::HEAD;
    let mut body = request.into_body();
    // the head goes first: on a kept virtual connection the HTTP/1.1 path ended (its idle
    // timeout) the write fails at once, and a new one takes it
    let mut kept = client.take(&host);
    if let Some(front) = kept.as_mut() {
        if front.io.write_all(&head).await.is_err() {
            kept = None;
        }
    }
    let reused = kept.is_some();
    let mut front = match kept {
        Some(front) => front,
        None => {
            let mut fresh = client.open();
            if fresh.io.write_all(&head).await.is_err() {
                fresh.abort();
                return respond.send_reset(Reason::INTERNAL_ERROR);
            }
            fresh
        }
    };
    let (pumped, relayed) = {
        let (mut rd, mut wr) = tokio::io::split(&mut front.io);
        let pump = async {
            if bodiless {
                return Ok(());
            }
            pump_request(&mut body, &mut wr, chunked).await
        };
        let relay = relay_response(&mut rd, &mut respond, head_request, grpc, client);
        tokio::pin!(pump, relay);
        let (mut pumped, mut pump_done, mut relayed) = (false, false, None);
        while relayed.is_none() {
            tokio::select! {
                p = &mut pump, if !pump_done => {
                    pump_done = true;
                    match p {
                        Ok(()) => pumped = true,
                        // the client reset the stream, or broke its body
                        Err(Pumped::Client) => break,
                        // the HTTP/1.1 side stopped reading the body (it answered early and
                        // closed): its answer is still to be relayed
                        Err(Pumped::Virtual) => {}
                    }
                }
                r = &mut relay => relayed = Some(r),
            }
        }
        (pumped, relayed)
    };
    match relayed {
        Some(Ok(reusable)) => {
            client.watch.answered.fetch_add(1, Ordering::Relaxed);
            if reusable && pumped && !front.handed.load(Ordering::Relaxed) {
                client.keep(host, front);
            } // else its end is the HTTP/1.1 path's end of the connection (or Python's)
        }
        Some(Err(Relayed::Unanswered)) if reused => {
            // never read: the client may send it again (RFC 9113 8.7)
            respond.send_reset(Reason::REFUSED_STREAM);
        }
        _ => front.abort(),
    }
}

/// What the stream keeps of its answer's head once the head's bytes are gone: the HTTP/2
/// response made of it, or the edge's error code for a gRPC request (answered as a status).
struct Answer {
    len: usize,
    status: u16,
    framing: Framing,
    close: bool,
    response: Result<Response<()>, String>,
}

/// Why a request body stopped before its end.
enum Pumped {
    /// The client reset the stream or broke its body.
    Client,
    /// The virtual connection no longer takes it (the HTTP/1.1 side ended the exchange).
    Virtual,
}

/// The request's body, client to virtual connection, each piece credited back to the client
/// once written (so the agent's pace holds the client back); chunked when its length is not
/// known, its trailers after the last chunk.
async fn pump_request<W: AsyncWrite + Unpin>(
    body: &mut RecvStream,
    wr: &mut W,
    chunked: bool,
) -> Result<(), Pumped> {
    let v = |_| Pumped::Virtual;
    while let Some(data) = body.data().await {
        let data = data.map_err(|_| Pumped::Client)?;
        let n = data.len();
        if n == 0 {
            continue;
        }
        if chunked {
            wr.write_all(format!("{n:x}\r\n").as_bytes())
                .await
                .map_err(v)?;
            wr.write_all(&data).await.map_err(v)?;
            wr.write_all(b"\r\n").await.map_err(v)?;
        } else {
            wr.write_all(&data).await.map_err(v)?;
        }
        let _ = body.flow_control().release_capacity(n);
    }
    if chunked {
        let trailers = body.trailers().await.map_err(|_| Pumped::Client)?;
        let mut end = b"0\r\n".to_vec();
        for (name, value) in trailers.iter().flatten() {
            end.extend_from_slice(name.as_str().as_bytes());
            end.extend_from_slice(b": ");
            end.extend_from_slice(value.as_bytes());
            end.extend_from_slice(b"\r\n");
        }
        end.extend_from_slice(b"\r\n");
        wr.write_all(&end).await.map_err(v)?;
    }
    Ok(())
}

/// The HTTP/1.1 path's answer, turned into the stream's response: Ok(true) when it ended
/// cleanly and the virtual connection may serve another stream.
async fn relay_response<R: AsyncRead + Unpin>(
    rd: &mut R,
    respond: &mut SendResponse<Bytes>,
    head_request: bool,
    grpc: bool,
    client: &Client,
) -> Result<bool, Relayed> {
    // a small answer's head and body fit in the first read; a larger one grows it
    let mut buf = BytesMut::with_capacity(FIRST_READ);
    let mut answered = false;
    // the head read in place, once: what the stream needs of it taken before its bytes go
    let head = loop {
        match h1::view_response(&buf) {
            Parsed::Done(head) if head.status < 200 => {
                // an interim answer (100 Continue, 103 Early Hints): relayed as HTTP/2's
                if head.status != 101 {
                    let _ = respond.send_informational(h2_head(head.status, &head.fields)?);
                }
                let len = head.len;
                let _ = buf.split_to(len);
                answered = true;
                continue;
            }
            Parsed::Done(head) => {
                let error_code = head
                    .fields
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(b"ngrok-error-code"))
                    .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
                break Answer {
                    len: head.len,
                    status: head.status,
                    framing: head.framing,
                    close: head.close,
                    response: match error_code {
                        Some(code) if grpc => Err(code),
                        _ => Ok(h2_head(head.status, &head.fields)?),
                    },
                };
            }
            Parsed::Invalid(_) => return Err(Relayed::Failed),
            Parsed::Partial => {}
        }
        if buf.len() == buf.capacity() {
            buf.reserve(HEAD_CHUNK);
        }
        let read = tokio::select! {
            read = rd.read_buf(&mut buf) => read,
            _ = poll_fn(|cx| respond.poll_reset(cx)) => return Err(Relayed::Failed),
        };
        match read {
            Ok(0) if buf.is_empty() && !answered => return Err(Relayed::Unanswered),
            Ok(0) | Err(_) => return Err(Relayed::Failed),
            Ok(_) => {}
        }
    };
    let _ = buf.split_to(head.len);
    let response = match head.response {
        Ok(response) => response,
        Err(code) => {
            // the edge's own answer to a gRPC request: a gRPC status (edge/h2front.py)
            let message = grpc_message(head.framing, &buf, &code);
            answer_grpc(respond, head.status, &code, &message);
            return Ok(false);
        }
    };
    let bodiless = head_request
        || head.status == 204
        || head.status == 304
        || head.framing == Framing::Length(0)
        || head.framing == Framing::None;
    let reusable = !head.close;
    let mut send = respond
        .send_response(response, bodiless)
        .map_err(|_| Relayed::Failed)?;
    if bodiless {
        return Ok(reusable && head.framing != Framing::UntilClose);
    }
    let stall = client.public.spec.h2_stall_timeout;
    let mut body = Body::new(head.framing);
    loop {
        let (piece, done) = body.take(&mut buf).map_err(|_| Relayed::Failed)?;
        if !piece.is_empty() {
            send_piece(&mut send, piece, stall)
                .await
                .map_err(|_| Relayed::Failed)?;
        }
        if done {
            let trailers = body.trailers();
            match trailers {
                Some(t) if !t.is_empty() => send.send_trailers(t).map_err(|_| Relayed::Failed)?,
                _ => send
                    .send_data(Bytes::new(), true)
                    .map_err(|_| Relayed::Failed)?,
            }
            return Ok(reusable && head.framing != Framing::UntilClose);
        }
        buf.reserve(READ_CHUNK);
        let read = tokio::select! {
            read = rd.read_buf(&mut buf) => read,
            _ = poll_fn(|cx| send.poll_reset(cx)) => return Err(Relayed::Failed),
        };
        match read {
            Ok(0) if head.framing == Framing::UntilClose => {
                send.send_data(Bytes::new(), true)
                    .map_err(|_| Relayed::Failed)?;
                return Ok(false);
            }
            Ok(0) | Err(_) => {
                send.send_reset(Reason::INTERNAL_ERROR);
                return Err(Relayed::Failed);
            }
            Ok(_) => {}
        }
    }
}

/// A field HTTP/2 does not carry (RFC 9113 8.2.2; h2 refuses to send it).
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade" | "te"
    )
}

/// Why a stream's answer was not relayed whole.
enum Relayed {
    /// Not read, or not sent (the client's reset, a bad head, h2 refused it).
    Failed,
    /// The virtual connection ended before any byte of an answer: the HTTP/1.1 path never
    /// read the request (a kept one it closed at its idle timeout just then).
    Unanswered,
}

/// A response head of the HTTP/1.1 path as HTTP/2's (the fields HTTP/2 does not carry
/// dropped).
fn h2_head(status: u16, head_fields: &[(&[u8], &[u8])]) -> Result<Response<()>, Relayed> {
    let mut response = Response::builder()
        .status(StatusCode::from_u16(status).map_err(|_| Relayed::Failed)?)
        .body(())
        .map_err(|_| Relayed::Failed)?;
    let fields = response.headers_mut();
    for (name, value) in head_fields {
        let Ok(name) = HeaderName::from_bytes(name) else {
            continue;
        };
        if hop_by_hop(&name) {
            continue;
        }
        if let Ok(value) = HeaderValue::from_bytes(value) {
            fields.append(name, value);
        }
    }
    Ok(response)
}

/// `piece` sent as the client's windows let it through; a stream whose response cannot move
/// for `stall` is reset.
async fn send_piece(
    send: &mut SendStream<Bytes>,
    mut piece: Bytes,
    stall: Duration,
) -> Result<(), ()> {
    while !piece.is_empty() {
        send.reserve_capacity(piece.len());
        let got = tokio::time::timeout(stall, poll_fn(|cx| send.poll_capacity(cx))).await;
        match got {
            Err(_) => {
                send.send_reset(Reason::CANCEL);
                return Err(());
            }
            Ok(None) | Ok(Some(Err(_))) => return Err(()),
            Ok(Some(Ok(0))) => {}
            Ok(Some(Ok(n))) => {
                let part = piece.split_to(n.min(piece.len()));
                send.send_data(part, false).map_err(|_| ())?;
            }
        }
    }
    Ok(())
}

/// A body as HTTP/1.1 frames it (the HTTP/1.1 path's response; h2up.rs: a request), its
/// pieces taken as they come, a chunked one's trailers kept.
pub(crate) struct Body {
    framing: Framing,
    left: u64,
    /// Chunked: inside a chunk's data (bytes left in `left`), else at a size or trailer line.
    in_data: bool,
    after_data: bool,
    trailers: HeaderMap,
    in_trailers: bool,
}

impl Body {
    pub(crate) fn new(framing: Framing) -> Self {
        Body {
            framing,
            left: match framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            in_data: false,
            after_data: false,
            trailers: HeaderMap::new(),
            in_trailers: false,
        }
    }

    pub(crate) fn trailers(&mut self) -> Option<HeaderMap> {
        Some(std::mem::take(&mut self.trailers))
    }

    /// The body bytes `buf` holds (taken from it), and whether the body ended.
    pub(crate) fn take(&mut self, buf: &mut BytesMut) -> Result<(Bytes, bool), &'static str> {
        match self.framing {
            Framing::Length(_) => {
                let n = (self.left.min(buf.len() as u64)) as usize;
                self.left -= n as u64;
                Ok((buf.split_to(n).freeze(), self.left == 0))
            }
            Framing::UntilClose => Ok((buf.split().freeze(), false)),
            Framing::None => Ok((Bytes::new(), true)),
            Framing::Chunked => self.dechunk(buf),
        }
    }

    fn dechunk(&mut self, buf: &mut BytesMut) -> Result<(Bytes, bool), &'static str> {
        let mut out = BytesMut::new();
        loop {
            if self.in_data {
                let n = (self.left.min(buf.len() as u64)) as usize;
                out.extend_from_slice(&buf.split_to(n));
                self.left -= n as u64;
                if self.left > 0 {
                    return Ok((out.freeze(), false));
                }
                self.in_data = false;
                self.after_data = true;
            }
            let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
                if buf.len() > h1::MAX_FRAMING_BYTES {
                    return Err("chunk framing too long");
                }
                return Ok((out.freeze(), false));
            };
            let line = buf.split_to(end + 2);
            let line = &line[..end];
            if self.after_data {
                if !line.is_empty() {
                    return Err("no CRLF after a chunk");
                }
                self.after_data = false;
                continue;
            }
            if self.in_trailers {
                if line.is_empty() {
                    return Ok((out.freeze(), true));
                }
                if let Some(colon) = line.iter().position(|b| *b == b':') {
                    let (name, value) = (&line[..colon], &line[colon + 1..]);
                    if let (Ok(name), Ok(value)) = (
                        HeaderName::from_bytes(name),
                        HeaderValue::from_bytes(value.trim_ascii()),
                    ) {
                        if !hop_by_hop(&name) {
                            self.trailers.append(name, value);
                        }
                    }
                }
                continue;
            }
            let digits = line.split(|b| *b == b';').next().unwrap_or(b"");
            let size = std::str::from_utf8(digits.trim_ascii())
                .ok()
                .and_then(|s| u64::from_str_radix(s, 16).ok())
                .ok_or("bad chunk size")?;
            if size == 0 {
                self.in_trailers = true;
            } else {
                self.in_data = true;
                self.left = size;
            }
        }
    }
}

/// The message of an edge answer's JSON body (its `msg`), for a gRPC status.
fn grpc_message(framing: Framing, buf: &[u8], code: &str) -> String {
    let body = match framing {
        Framing::Length(n) => &buf[..(n as usize).min(buf.len())],
        _ => &buf[..0],
    };
    let text = String::from_utf8_lossy(body);
    let msg = text
        .split("\"msg\": \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("");
    format!("{code}: {msg}")
}

/// HTTP status of an edge answer -> gRPC status (gRPC's HTTP-to-gRPC mapping; an offline
/// endpoint is UNAVAILABLE, too many connections RESOURCE_EXHAUSTED), as edge/h2front.py.
fn grpc_status(status: u16, code: &str) -> u32 {
    match code {
        "ERR_NGROK_3200" => return 14,
        "ERR_NGROK_702" => return 8,
        _ => {}
    }
    match status {
        400 => 13,
        401 => 16,
        403 => 7,
        404 => 12,
        421 | 429 | 502 | 503 | 504 => 14,
        _ => 2,
    }
}

fn percent_encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A trailers-only gRPC answer.
fn answer_grpc(respond: &mut SendResponse<Bytes>, status: u16, code: &str, message: &str) {
    let mut response = Response::new(());
    let fields = response.headers_mut();
    fields.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    let pairs = [
        ("grpc-status", grpc_status(status, code).to_string()),
        ("grpc-message", percent_encoded(message)),
        ("ngrok-error-code", code.to_string()),
    ];
    for (name, value) in pairs {
        if let Ok(value) = HeaderValue::from_str(&value) {
            fields.insert(name, value);
        }
    }
    let _ = respond.send_response(response, true);
}

/// The edge's own answer on the stream (the contract's JSON body), or its gRPC status.
fn answer(respond: &mut SendResponse<Bytes>, status: u16, code: &str, msg: &str, grpc: bool) {
    if grpc {
        return answer_grpc(respond, status, code, &format!("{code}: {msg}"));
    }
    let (body, op) = public::error_body(status, code, msg);
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    let fields = response.headers_mut();
    fields.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    fields.insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    for (name, value) in [("ngrok-error-code", code), ("operation-id", op.as_str())] {
        if let Ok(value) = HeaderValue::from_str(value) {
            fields.insert(name, value);
        }
    }
    if let Ok(mut send) = respond.send_response(response, false) {
        let _ = send.send_data(Bytes::from(body), true);
    }
}
