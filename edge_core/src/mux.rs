//! An agent session's muxado, server side, sans-IO: bytes in, frames and events out.
//!
//! This is not ngrok's `muxado` crate (0.5.4), though it speaks its wire format
//! (`muxado/src/frame.rs`, `codec.rs`): the crate cannot honour the rules the edge learned
//! against the real agents (docs/DATA_PLANE.md, "The compiled core"). Its SYN handling
//! accepts any id (a SYN for a live id replaces the stream), a SYN past its stream limit
//! ends the whole session instead of refusing one stream, it has no bound before
//! authentication (every stream gets the full window from the first byte: 512 × 256 KiB),
//! one limit counts both sides' streams, and a stream leaves its table when the application
//! drops it (no linger for the peer's FIN, no slot grace). Every rule below was in
//! edge/session.py and is pinned by a test in tests/mux.rs that names it.
//!
//! The rules:
//! - Windows: every stream starts with `window` bytes each way. Credit (WNDINC) goes back
//!   once `credit_batch` bytes were consumed by the reader, not per read.
//! - The agent opens odd ids, the edge even ones. A Go agent (the CLI) may send SYNs out of
//!   order: the ids a SYN passed over, the `out_of_order_ids` closest below it, may each
//!   still open once; any other SYN for an id at or below the highest seen, a SYN for a live
//!   or even id, DATA beyond the window, data after FIN or a malformed header end the
//!   session with GOAWAY carrying the muxado code.
//! - Streams of the peer's beyond `max_streams` are refused with RST (STREAMS_EXHAUSTED),
//!   the session goes on; the edge's own beyond `max_local_streams` are not opened, and a
//!   slot the peer knew of counts `slot_grace` longer after it left the table.
//! - Before `authenticate`: at most `pre_auth_streams` streams and `pre_auth_bytes` of DATA
//!   payload in total (a frame larger than that is refused at its header), else GOAWAY
//!   ENHANCE_YOUR_CALM.
//! - A stream the edge is done with (`finish`) sends FIN and stays in the table until the
//!   peer's FIN; data the peer still sends is refused with RST (STREAM_CLOSED); no FIN
//!   within `linger` and it is reset. `reset` sends FIN before RST. A stream the peer never
//!   heard of ends without a frame.
//! - Unsent bytes past `unsent_pause_at`: the session stops reading the peer until they
//!   drain (the caller's job: [`State::reading_paused`]).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

pub const RST: u8 = 0;
pub const DATA: u8 = 1;
pub const WNDINC: u8 = 2;
pub const GOAWAY: u8 = 3;
pub const FIN: u8 = 0x1;
pub const SYN: u8 = 0x2;
pub const HEADER: usize = 8;
pub const LENGTH_MAX: usize = 0xFF_FFFF;
pub const STREAM_ID_MAX: u32 = 0x7FFF_FFFF;
pub const DEFAULT_WINDOW: usize = 256 * 1024;
pub const GOAWAY_MAX: usize = 8 + 64 * 1024;

// error codes (muxado/src/errors.rs)
pub const E_NONE: u32 = 0;
pub const E_PROTOCOL: u32 = 1;
pub const E_INTERNAL: u32 = 2;
pub const E_FLOW_CONTROL: u32 = 3;
pub const E_STREAM_CLOSED: u32 = 4;
pub const E_STREAM_CANCELLED: u32 = 6;
pub const E_FRAME_SIZE: u32 = 8;
pub const E_ENHANCE_YOUR_CALM: u32 = 10;
pub const E_STREAMS_EXHAUSTED: u32 = 12;

/// What the edge hands to Python: (kind, stream id).
pub const EV_OPENED: u8 = 1; // the peer opened a stream
pub const EV_READABLE: u8 = 2; // a stream whose reader waited has data, EOF or a reset
pub const EV_WRITABLE: u8 = 3; // a stream whose writer waited has credit or room, or a reset
pub const EV_SLOT: u8 = 4; // a slot of ours came back (an opener waited)
pub const EV_CLOSED: u8 = 5; // the session ended (its reason: State::close_reason)
pub const EV_DONE: u8 = 6; // ...and its connection is closed: its last frames written, or given up

/// The bounds of one session (edge/session.py passes its module constants).
#[derive(Clone, Debug)]
pub struct Limits {
    pub window: usize,
    pub max_streams: usize,
    pub max_local_streams: usize,
    pub linger: Duration,
    pub slot_grace: Duration,
    pub pre_auth_streams: usize,
    pub pre_auth_bytes: usize,
    pub out_of_order_ids: usize,
    pub credit_batch: usize,
    pub write_chunk: usize,
    pub flush_at: usize,
    pub unsent_pause_at: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            window: DEFAULT_WINDOW,
            max_streams: 512,
            max_local_streams: 480,
            linger: Duration::from_secs(30),
            slot_grace: Duration::from_millis(200),
            pre_auth_streams: 2,
            pre_auth_bytes: 32 * 1024,
            out_of_order_ids: 64,
            credit_batch: DEFAULT_WINDOW / 4,
            write_chunk: 64 * 1024,
            flush_at: 64 * 1024,
            unsent_pause_at: 1024 * 1024,
        }
    }
}

/// How the session ends from the peer's bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// The peer broke the protocol: GOAWAY with this code.
    Protocol(u32, String),
    /// The peer sent GOAWAY.
    GoneAway(String),
}

fn protocol(message: String) -> End {
    End::Protocol(E_PROTOCOL, message)
}

/// Why a stream operation could not be done (Python: StreamReset).
#[derive(Debug, PartialEq, Eq)]
pub enum StreamError {
    Reset(String),
    /// `max_local_streams` of ours are open (Python: StreamsExhausted).
    Exhausted(String),
}

pub fn encode(out: &mut Vec<u8>, typ: u8, flags: u8, sid: u32, payload: &[u8]) {
    let word = ((payload.len() as u32) << 8) | (((typ & 0xF) as u32) << 4) | (flags & 0xF) as u32;
    out.extend_from_slice(&word.to_be_bytes());
    out.extend_from_slice(&(sid & STREAM_ID_MAX).to_be_bytes());
    out.extend_from_slice(payload);
}

struct Stream {
    local: bool,
    recv: Vec<u8>,
    recv_at: usize, // bytes of `recv` already read
    recv_window: usize,
    send_window: i64,
    needs_syn: bool,
    local_fin: bool,
    remote_fin: bool,
    reset: Option<String>,
    consumed: usize,
    finished: bool,
    in_table: bool,
    released: bool, // Python is done with it: dropped once it left the table
    want_read: bool,
    want_write: bool,
}

impl Stream {
    fn new(local: bool, window: usize) -> Self {
        Stream {
            local,
            recv: Vec::new(),
            recv_at: 0,
            recv_window: window,
            send_window: window as i64,
            needs_syn: local,
            local_fin: false,
            remote_fin: false,
            reset: None,
            consumed: 0,
            finished: false,
            in_table: true,
            released: false,
            want_read: false,
            want_write: false,
        }
    }

    fn buffered(&self) -> usize {
        self.recv.len() - self.recv_at
    }

    fn done(&self) -> bool {
        self.reset.is_some() || (self.local_fin && self.remote_fin)
    }
}

pub struct State {
    pub limits: Limits,
    streams: HashMap<u32, Stream>,
    next_local_id: u32,
    last_remote_id: u32,
    passed_over: BTreeSet<u32>, // peer ids below last_remote_id not yet opened
    pub local_open: usize,
    pub remote_open: usize,
    cooling: VecDeque<Instant>, // when the slots in grace come back
    authenticated: bool,
    pre_auth_bytes: usize,
    pub closed: bool,
    pub close_reason: String,
    /// Frames not yet handed to the writer.
    pub out: Vec<u8>,
    /// Bytes the writer took and has not written yet.
    pub in_flight: usize,
    lingers: VecDeque<(Instant, u32)>,
    want_slot: bool,
    write_blocked: Vec<u32>, // streams whose writer waits for the unsent bytes to drain
    pub events: Vec<(u8, u32)>,
    pub paused: bool,
}

impl State {
    pub fn new(limits: Limits) -> Self {
        State {
            limits,
            streams: HashMap::new(),
            next_local_id: 2,
            last_remote_id: 0,
            passed_over: BTreeSet::new(),
            local_open: 0,
            remote_open: 0,
            cooling: VecDeque::new(),
            authenticated: false,
            pre_auth_bytes: 0,
            closed: false,
            close_reason: String::new(),
            out: Vec::new(),
            in_flight: 0,
            lingers: VecDeque::new(),
            want_slot: false,
            write_blocked: Vec::new(),
            events: Vec::new(),
            paused: false,
        }
    }

    // ---- the peer's bytes ------------------------------------------------------------------
    fn max_payload(&self) -> usize {
        if self.authenticated {
            self.limits.window
        } else {
            self.limits.pre_auth_bytes
        }
    }

    /// Handle every whole frame at the start of `buf` and remove them from it; what is left
    /// is a frame's beginning. A header is checked as soon as it is whole, so a frame larger
    /// than the bound is refused before its payload is held.
    pub fn feed(&mut self, buf: &mut Vec<u8>) -> Result<(), End> {
        let mut at = 0;
        let result = loop {
            if buf.len() - at < HEADER || self.closed {
                break Ok(());
            }
            let word = u32::from_be_bytes(buf[at..at + 4].try_into().unwrap());
            let sid = u32::from_be_bytes(buf[at + 4..at + 8].try_into().unwrap()) & STREAM_ID_MAX;
            let (length, typ, flags) = (
                (word >> 8) as usize,
                ((word >> 4) & 0xF) as u8,
                (word & 0xF) as u8,
            );
            if let Err(end) = check_header(length, typ, flags, sid, self.max_payload()) {
                break Err(end);
            }
            if buf.len() - at - HEADER < length {
                break Ok(());
            }
            let start = at + HEADER;
            at = start + length;
            if let Err(end) = self.handle(typ, flags, sid, &buf[start..at]) {
                break Err(end);
            }
        };
        buf.drain(..at);
        result
    }

    fn handle(&mut self, typ: u8, flags: u8, sid: u32, payload: &[u8]) -> Result<(), End> {
        match typ {
            DATA => self.on_data_frame(flags, sid, payload),
            WNDINC => {
                let inc = (u32::from_be_bytes(payload.try_into().unwrap()) & 0x7FFF_FFFF) as i64;
                if let Some(s) = self.streams.get_mut(&sid) {
                    if s.in_table {
                        s.send_window += inc;
                        if s.want_write {
                            s.want_write = false;
                            self.events.push((EV_WRITABLE, sid));
                        }
                    }
                }
                Ok(())
            }
            RST => {
                let code = u32::from_be_bytes(payload.try_into().unwrap());
                if self.streams.get(&sid).is_some_and(|s| s.in_table) {
                    self.mark_reset(sid, format!("reset by peer (code {code})"));
                }
                Ok(())
            }
            _ => {
                let code = u32::from_be_bytes(payload[4..8].try_into().unwrap());
                let message = String::from_utf8_lossy(&payload[8..]);
                Err(End::GoneAway(format!(
                    "peer went away (code {code}): {message}"
                )))
            }
        }
    }

    fn on_data_frame(&mut self, flags: u8, sid: u32, payload: &[u8]) -> Result<(), End> {
        let (syn, fin) = (flags & SYN != 0, flags & FIN != 0);
        if !self.authenticated {
            self.pre_auth_bytes += payload.len();
            if self.pre_auth_bytes > self.limits.pre_auth_bytes {
                return Err(End::Protocol(
                    E_ENHANCE_YOUR_CALM,
                    format!(
                        "more than {} bytes before authentication",
                        self.limits.pre_auth_bytes
                    ),
                ));
            }
            if syn && self.remote_open >= self.limits.pre_auth_streams {
                return Err(End::Protocol(
                    E_ENHANCE_YOUR_CALM,
                    format!(
                        "more than {} streams before authentication",
                        self.limits.pre_auth_streams
                    ),
                ));
            }
        }
        let live = self.streams.get(&sid).is_some_and(|s| s.in_table);
        if syn {
            if live || sid.is_multiple_of(2) {
                return Err(protocol(format!(
                    "SYN for stream {sid} that cannot be opened"
                )));
            }
            let last = self.last_remote_id;
            if sid > last {
                if sid > last + 2 {
                    self.pass_over(last, sid);
                }
                self.last_remote_id = sid;
            } else if !self.passed_over.remove(&sid) {
                return Err(protocol(format!(
                    "SYN for stream {sid} that cannot be opened"
                )));
            }
            if self.remote_open >= self.limits.max_streams {
                self.push_rst(sid, E_STREAMS_EXHAUSTED);
                return Ok(());
            }
            self.streams
                .insert(sid, Stream::new(false, self.limits.window));
            self.remote_open += 1;
            self.on_data(sid, payload, fin)?;
            self.events.push((EV_OPENED, sid));
            return Ok(());
        }
        if !live {
            if (sid.is_multiple_of(2) && sid >= self.next_local_id)
                || (!sid.is_multiple_of(2) && sid > self.last_remote_id)
            {
                return Err(protocol(format!(
                    "DATA for stream {sid} that was never opened"
                )));
            }
            return Ok(()); // late data for a stream we already closed: dropped
        }
        self.on_data(sid, payload, fin)?;
        self.maybe_forget(sid);
        Ok(())
    }

    fn on_data(&mut self, sid: u32, payload: &[u8], fin: bool) -> Result<(), End> {
        let s = self.streams.get_mut(&sid).expect("a live stream");
        if payload.len() > s.recv_window {
            return Err(End::Protocol(
                E_FLOW_CONTROL,
                format!(
                    "stream {sid} sent {} bytes with {} of window left",
                    payload.len(),
                    s.recv_window
                ),
            ));
        }
        if s.remote_fin && !payload.is_empty() {
            return Err(End::Protocol(
                E_STREAM_CLOSED,
                format!("stream {sid} sent data after FIN"),
            ));
        }
        s.recv_window -= payload.len();
        if !payload.is_empty() && s.finished {
            // nobody reads it any more: refused
            self.reset(sid, E_STREAM_CLOSED);
            return Ok(());
        }
        let s = self.streams.get_mut(&sid).expect("a live stream");
        if !payload.is_empty() {
            if s.recv_at > 0 && s.recv_at == s.recv.len() {
                s.recv.clear();
                s.recv_at = 0;
            }
            s.recv.extend_from_slice(payload);
        }
        if fin {
            s.remote_fin = true;
        }
        if s.want_read {
            s.want_read = false;
            self.events.push((EV_READABLE, sid));
        }
        Ok(())
    }

    /// Remember the odd ids between `last` and `sid`, the `out_of_order_ids` closest below
    /// `sid`, as ids whose SYN may still come; older ones are forgotten first.
    fn pass_over(&mut self, last: u32, sid: u32) {
        let lowest = if last == 0 { 1 } else { last + 2 };
        let span = 2 * self.limits.out_of_order_ids as u32;
        let from = lowest.max(sid.saturating_sub(span));
        let mut id = from;
        while id < sid {
            self.passed_over.insert(id);
            id += 2;
        }
        while self.passed_over.len() > self.limits.out_of_order_ids {
            self.passed_over.pop_first();
        }
    }

    pub fn passed_over(&self) -> usize {
        self.passed_over.len()
    }

    pub fn last_remote_id(&self) -> u32 {
        self.last_remote_id
    }

    // ---- frames out ------------------------------------------------------------------------
    fn push_rst(&mut self, sid: u32, code: u32) {
        encode(&mut self.out, RST, 0, sid, &code.to_be_bytes());
    }

    /// The unsent bytes: queued and taken by the writer.
    pub fn unsent(&self) -> usize {
        self.out.len() + self.in_flight
    }

    /// Stop reading the peer? (`unsent_pause_at` reached.) Sets `paused`.
    pub fn reading_paused(&mut self) -> bool {
        if !self.paused && self.unsent() > self.limits.unsent_pause_at {
            self.paused = true;
        }
        self.paused
    }

    /// The writer wrote what it took: resume reading (true when it was paused), wake the
    /// writers that waited for room.
    pub fn written(&mut self) -> bool {
        self.in_flight = 0;
        let resumed = self.paused && self.unsent() <= self.limits.unsent_pause_at;
        if resumed {
            self.paused = false;
        }
        if self.out.len() < self.limits.flush_at {
            for sid in std::mem::take(&mut self.write_blocked) {
                if let Some(s) = self.streams.get_mut(&sid) {
                    if s.want_write {
                        s.want_write = false;
                        self.events.push((EV_WRITABLE, sid));
                    }
                }
            }
        }
        resumed
    }

    // ---- the stream table ------------------------------------------------------------------
    fn forget(&mut self, sid: u32) {
        let Some(s) = self.streams.get_mut(&sid) else {
            return;
        };
        if s.in_table {
            s.in_table = false;
            if s.local {
                self.local_open -= 1;
                if !s.needs_syn {
                    self.cooling
                        .push_back(Instant::now() + self.limits.slot_grace);
                }
                if self.want_slot {
                    self.want_slot = false;
                    self.events.push((EV_SLOT, 0));
                }
            } else {
                self.remote_open -= 1;
            }
        }
        if s.released {
            self.streams.remove(&sid);
        }
    }

    fn maybe_forget(&mut self, sid: u32) {
        if self.streams.get(&sid).is_some_and(Stream::done) {
            self.forget(sid);
        }
    }

    fn mark_reset(&mut self, sid: u32, why: String) {
        let Some(s) = self.streams.get_mut(&sid) else {
            return;
        };
        s.reset = Some(why);
        if s.want_read {
            s.want_read = false;
            self.events.push((EV_READABLE, sid));
        }
        if s.want_write {
            s.want_write = false;
            self.events.push((EV_WRITABLE, sid));
        }
        self.forget(sid);
    }

    fn fin_nowait(&mut self, sid: u32) {
        let s = self.streams.get_mut(&sid).expect("a stream");
        if !s.local_fin {
            s.local_fin = true;
            s.needs_syn = false;
            encode(&mut self.out, DATA, FIN, sid, b"");
        }
    }

    /// Slots of ours that left the table less than `slot_grace` ago.
    pub fn cooling(&mut self) -> usize {
        let now = Instant::now();
        while self.cooling.front().is_some_and(|&end| end <= now) {
            self.cooling.pop_front();
        }
        self.cooling.len()
    }

    /// Streams in the table, both sides'.
    pub fn open_streams(&self) -> usize {
        self.local_open + self.remote_open
    }

    /// Finished streams waiting for the peer's FIN.
    pub fn lingering(&self) -> usize {
        self.streams
            .values()
            .filter(|s| s.in_table && s.finished)
            .count()
    }

    /// Stream entries held (in the table, or out of it and not yet released by Python).
    pub fn held(&self) -> usize {
        self.streams.len()
    }

    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    pub fn authenticate(&mut self) {
        self.authenticated = true;
    }

    // ---- what the edge does ----------------------------------------------------------------
    /// A new stream of ours (its SYN goes with its first frame).
    pub fn open(&mut self) -> Result<u32, StreamError> {
        if self.closed {
            return Err(StreamError::Reset("session closed".into()));
        }
        if self.local_open + self.cooling.len() >= self.limits.max_local_streams {
            let cooling = self.cooling();
            if self.local_open + cooling >= self.limits.max_local_streams {
                let mut message = format!("{} streams open towards the agent", self.local_open);
                if cooling > 0 {
                    message += &format!(" and {cooling} that ended just now");
                }
                return Err(StreamError::Exhausted(message));
            }
        }
        let sid = self.next_local_id;
        self.next_local_id += 2;
        self.streams
            .insert(sid, Stream::new(true, self.limits.window));
        self.local_open += 1;
        Ok(sid)
    }

    /// The time until the first slot in grace comes back, if any (without arming EV_SLOT:
    /// the core's own opener sleeps until then).
    pub fn next_slot(&mut self) -> Option<Duration> {
        self.cooling();
        self.cooling
            .front()
            .map(|end| end.saturating_duration_since(Instant::now()))
    }

    /// An opener waits for a slot: EV_SLOT when one comes back; the time until the first slot
    /// in grace comes back, if any.
    pub fn want_slot(&mut self) -> Option<Duration> {
        self.want_slot = true;
        self.cooling();
        self.cooling
            .front()
            .map(|end| end.saturating_duration_since(Instant::now()))
    }

    /// Up to `n` bytes handed to `take`; `Ok(None)` when the reader must wait (EV_READABLE
    /// follows); an empty slice at the end of the peer's side.
    pub fn read<R>(
        &mut self,
        sid: u32,
        n: usize,
        take: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, StreamError> {
        let credit_batch = self.limits.credit_batch;
        let s = self
            .streams
            .get_mut(&sid)
            .ok_or_else(|| StreamError::Reset("stream closed".into()))?;
        if s.buffered() == 0 {
            if let Some(why) = &s.reset {
                return Err(StreamError::Reset(why.clone()));
            }
            if s.remote_fin {
                return Ok(Some(take(b"")));
            }
            s.want_read = true;
            return Ok(None);
        }
        let size = n.min(s.buffered());
        let got = take(&s.recv[s.recv_at..s.recv_at + size]);
        s.recv_at += size;
        if s.recv_at == s.recv.len() {
            s.recv = Vec::new(); // a drained buffer is given back, whatever its size
            s.recv_at = 0;
        }
        if !s.remote_fin && s.reset.is_none() {
            s.consumed += size;
            if s.consumed >= credit_batch {
                let credit = s.consumed;
                s.recv_window += credit;
                s.consumed = 0;
                encode(
                    &mut self.out,
                    WNDINC,
                    0,
                    sid,
                    &(credit.min(0x7FFF_FFFF) as u32).to_be_bytes(),
                );
            }
        }
        Ok(Some(got))
    }

    /// Queue `data` on a stream, as much as its send window and the unsent bound take; the
    /// bytes taken (0: the writer must wait, EV_WRITABLE follows).
    pub fn write(&mut self, sid: u32, data: &[u8]) -> Result<usize, StreamError> {
        if self.closed {
            return Err(StreamError::Reset("session closed".into()));
        }
        let (chunk, flush_at) = (self.limits.write_chunk, self.limits.flush_at);
        let unsent = self.unsent();
        let s = self
            .streams
            .get_mut(&sid)
            .ok_or_else(|| StreamError::Reset("stream closed".into()))?;
        if let Some(why) = &s.reset {
            return Err(StreamError::Reset(why.clone()));
        }
        if s.local_fin {
            return Err(StreamError::Reset("write after close".into()));
        }
        if s.send_window <= 0 {
            s.want_write = true;
            return Ok(0);
        }
        if unsent >= 4 * flush_at {
            s.want_write = true;
            self.write_blocked.push(sid);
            return Ok(0);
        }
        let mut taken = 0;
        while taken < data.len() && s.send_window > 0 && self.out.len() < 4 * flush_at {
            let size = (data.len() - taken).min(s.send_window as usize).min(chunk);
            let flags = if s.needs_syn { SYN } else { 0 };
            s.needs_syn = false;
            encode(&mut self.out, DATA, flags, sid, &data[taken..taken + size]);
            s.send_window -= size as i64;
            taken += size;
        }
        Ok(taken)
    }

    /// Half-close: FIN on our side (idempotent; nothing after a reset).
    pub fn close_write(&mut self, sid: u32) -> Result<(), StreamError> {
        if self.closed {
            return Err(StreamError::Reset("session closed".into()));
        }
        let s = self
            .streams
            .get_mut(&sid)
            .ok_or_else(|| StreamError::Reset("stream closed".into()))?;
        if s.local_fin || s.reset.is_some() {
            return Ok(());
        }
        s.local_fin = true;
        let flags = FIN | if s.needs_syn { SYN } else { 0 };
        s.needs_syn = false;
        encode(&mut self.out, DATA, flags, sid, b"");
        self.maybe_forget(sid);
        Ok(())
    }

    /// The owner is done with the stream (see the module's rules); its entry is released.
    pub fn finish(&mut self, sid: u32) {
        let linger = self.limits.linger;
        let Some(s) = self.streams.get_mut(&sid) else {
            return;
        };
        s.released = true;
        if s.reset.is_some() || s.finished || self.closed {
            if !s.in_table || self.closed {
                self.streams.remove(&sid);
            }
            return;
        }
        if s.needs_syn {
            // the peer never heard of it
            self.mark_reset(sid, "never opened".into());
            return;
        }
        s.finished = true;
        s.recv = Vec::new();
        s.recv_at = 0;
        let remote_fin = s.remote_fin;
        self.fin_nowait(sid);
        if remote_fin {
            self.forget(sid);
        } else {
            self.lingers.push_back((Instant::now() + linger, sid));
        }
    }

    /// Abort both directions: FIN (if not sent yet), then RST. A stream of ours the peer
    /// never heard of is just forgotten.
    pub fn reset(&mut self, sid: u32, code: u32) {
        let closed = self.closed;
        let Some(s) = self.streams.get_mut(&sid) else {
            return;
        };
        if s.reset.is_some() {
            return;
        }
        if !s.needs_syn && !closed {
            if !s.local_fin {
                s.local_fin = true;
                encode(&mut self.out, DATA, FIN, sid, b"");
            }
            self.push_rst(sid, code);
        }
        self.mark_reset(sid, "reset locally".into());
    }

    /// Python holds the stream no more: its entry goes once it left the table.
    pub fn release(&mut self, sid: u32) {
        if let Some(s) = self.streams.get_mut(&sid) {
            s.released = true;
            if !s.in_table || self.closed {
                self.streams.remove(&sid);
            }
        }
    }

    /// (bytes received and unread, the peer's side open, done, finished); None for a
    /// stream no longer held.
    pub fn stream_facts(&self, sid: u32) -> Option<(usize, bool, bool, bool)> {
        self.streams.get(&sid).map(|s| {
            (
                s.buffered(),
                s.reset.is_none() && !s.remote_fin,
                s.done(),
                s.finished,
            )
        })
    }

    /// The linger that ends first, if any.
    pub fn next_linger(&self) -> Option<Instant> {
        self.lingers.front().map(|(at, _)| *at)
    }

    /// Reset the finished streams whose peer sent no FIN within `linger`.
    pub fn lingers_due(&mut self, now: Instant) {
        while let Some(&(at, sid)) = self.lingers.front() {
            if at > now {
                break;
            }
            self.lingers.pop_front();
            if self
                .streams
                .get(&sid)
                .is_some_and(|s| s.in_table && !s.done())
            {
                self.reset(sid, E_STREAM_CANCELLED);
            }
        }
    }

    // ---- ending ----------------------------------------------------------------------------
    /// GOAWAY to the peer (the caller then closes the connection once it is written).
    pub fn go_away(&mut self, code: u32, message: &str) {
        if self.closed {
            return;
        }
        if self.close_reason.is_empty() {
            self.close_reason = message.to_owned();
        }
        let bytes = message.as_bytes();
        let mut payload = Vec::with_capacity(8 + bytes.len().min(1024));
        payload.extend_from_slice(&(self.last_remote_id & STREAM_ID_MAX).to_be_bytes());
        payload.extend_from_slice(&code.to_be_bytes());
        payload.extend_from_slice(&bytes[..bytes.len().min(1024)]);
        encode(&mut self.out, GOAWAY, 0, 0, &payload);
        self.close(message);
    }

    /// The session ends: every stream is reset (what was received stays readable), EV_CLOSED.
    pub fn close(&mut self, reason: &str) {
        if self.closed {
            return;
        }
        if self.close_reason.is_empty() {
            self.close_reason = reason.to_owned();
        }
        let sids: Vec<u32> = self.streams.keys().copied().collect();
        for sid in sids {
            let s = self.streams.get_mut(&sid).unwrap();
            if s.reset.is_none() {
                s.reset = Some("session closed".into());
            }
            s.in_table = false;
            if s.released {
                self.streams.remove(&sid);
            }
        }
        self.local_open = 0;
        self.remote_open = 0;
        self.lingers.clear();
        self.write_blocked.clear();
        self.closed = true;
        self.events.push((EV_CLOSED, 0));
    }
}

fn check_header(
    length: usize,
    typ: u8,
    flags: u8,
    sid: u32,
    max_payload: usize,
) -> Result<(), End> {
    if typ == DATA {
        if sid == 0 {
            return Err(protocol("DATA frame on stream 0".into()));
        }
        if length > max_payload {
            return Err(End::Protocol(
                E_FLOW_CONTROL,
                format!("DATA frame of {length} bytes exceeds the window"),
            ));
        }
        return Ok(());
    }
    if flags & SYN != 0 {
        return Err(protocol(format!("SYN flag on a frame of type {typ}")));
    }
    match typ {
        RST | WNDINC => {
            if length != 4 {
                return Err(End::Protocol(
                    E_FRAME_SIZE,
                    format!("frame of type {typ} must carry 4 bytes, not {length}"),
                ));
            }
            if sid == 0 {
                return Err(protocol(format!("frame of type {typ} on stream 0")));
            }
            Ok(())
        }
        GOAWAY => {
            if !(8..=GOAWAY_MAX).contains(&length) {
                return Err(End::Protocol(
                    E_FRAME_SIZE,
                    format!("GOAWAY frame of {length} bytes"),
                ));
            }
            Ok(())
        }
        _ => Err(protocol(format!("unknown frame type {typ}"))),
    }
}
