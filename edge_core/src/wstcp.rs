//! The WebSocket-to-TCP converter of an HTTP endpoint (the Bind option
//! `WebsocketTCPConverter`, the SDKs' `websocket_tcp_conversion()`), once the client's upgrade
//! was answered 101 (edge/wstcp.py answers it): the messages' payload carried to the agent as a
//! raw byte stream, whose upstream is a plain TCP service, and the agent's bytes back as
//! binary frames (RFC 6455).
//!
//! The rules (docs/DATA_PLANE.md, "The WebSocket-TCP converter is the core's"):
//! - data frames (text, binary, continuation) from the client become their payload on the
//!   stream, those of one read in one write; a ping is answered with a pong (its first 125
//!   bytes), written before the next read of the client, so a client that sends pings and
//!   reads none is held back by its own socket, never buffered;
//! - a close frame is answered with a close (its code echoed), is a FIN to the agent and ends
//!   the conversion at once; the client's EOF is a FIN too, the agent's bytes going on for at
//!   most [`LINGER`];
//! - the agent's bytes go back as binary frames; its FIN ends the WebSocket with close 1000,
//!   the client's close or EOF awaited for at most [`LINGER`]; nothing follows our close;
//! - a frame announced larger than [`MAX_FRAME`] is answered with close 1009, an unmasked one
//!   with close 1002, and the connection ends at once;
//! - it ends at once when either side fails (the client's socket errs, the stream is reset):
//!   the socket is closed and the stream finished.
//!
//! Memory: one client frame at most (its header and [`MAX_FRAME`] bytes of payload) and one
//! read ([`CHUNK`]) past it, and [`CHUNK`] bytes of the agent's, per connection.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

use crate::session::{Session, Wakes};

/// What a WebSocket-TCP route answers a request that is not a WebSocket upgrade (400
/// ERR_NGROK_3002, as edge/wstcp.py's NOT_UPGRADE).
pub const NOT_UPGRADE: &str =
    "This endpoint converts WebSocket connections to TCP: send a WebSocket upgrade request.";
/// Bytes of one client frame's payload at most.
pub const MAX_FRAME: u64 = 1 << 20;
/// Bytes read at once from either side.
pub const CHUNK: usize = 64 * 1024;

pub const CONT: u8 = 0x0;
pub const TEXT: u8 = 0x1;
pub const BINARY: u8 = 0x2;
pub const CLOSE: u8 = 0x8;
pub const PING: u8 = 0x9;
pub const PONG: u8 = 0xA;

/// A server frame (final, unmasked) appended to `out`.
pub fn frame(out: &mut Vec<u8>, opcode: u8, payload: &[u8]) {
    let size = payload.len();
    out.push(0x80 | opcode);
    if size < 126 {
        out.push(size as u8);
    } else if size < 1 << 16 {
        out.push(126);
        out.extend_from_slice(&(size as u16).to_be_bytes());
    } else {
        out.push(127);
        out.extend_from_slice(&(size as u64).to_be_bytes());
    }
    out.extend_from_slice(payload);
}

/// A client frame that breaks the rules: the close code it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameError(pub u16);

/// The next whole client frame at the front of `buf`: (opcode, the range of its payload in
/// `buf`, unmasked in place, and the frame's length); None while it is not whole. The bound
/// is checked on the header, before any of the payload is waited for.
pub fn next_frame(buf: &mut [u8]) -> Result<Option<(u8, Range<usize>)>, FrameError> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let (opcode, masked) = (buf[0] & 0x0F, buf[1] & 0x80 != 0);
    let (size, at) = match buf[1] & 0x7F {
        126 if buf.len() < 4 => return Ok(None),
        126 => (u16::from_be_bytes([buf[2], buf[3]]) as u64, 4),
        127 if buf.len() < 10 => return Ok(None),
        127 => (u64::from_be_bytes(buf[2..10].try_into().unwrap()), 10),
        n => (n as u64, 2),
    };
    if size > MAX_FRAME {
        return Err(FrameError(1009));
    }
    if !masked {
        return Err(FrameError(1002));
    }
    let end = at + 4 + size as usize;
    if buf.len() < end {
        return Ok(None);
    }
    let mask = [buf[at], buf[at + 1], buf[at + 2], buf[at + 3]];
    buf[at + 4..end]
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b ^= mask[i % 4]);
    Ok(Some((opcode, at + 4..end)))
}

/// Why the conversion stopped early (either ends the whole of it).
enum Cut {
    Client,
    Stream,
    Frame(u16),
}

/// How the client's direction ended.
#[derive(Default)]
enum UpEnd {
    /// Its close frame, answered: the WebSocket is done, the conversion ends at once.
    Closed,
    /// Its EOF: the agent's direction goes on (the client may still read), within LINGER.
    #[default]
    Eof,
}

/// What the two directions share of the client's writing side: the frames go whole, and
/// nothing after our close frame.
struct Writer<W> {
    w: W,
    written: u64,
    /// A frame is being written: cut there (the direction writing it ended), no frame may
    /// follow it.
    midway: bool,
    /// Our close frame went: what the agent sends after it is dropped.
    closed: bool,
}

impl<W: AsyncWrite + Unpin> Writer<W> {
    async fn send(&mut self, opcode: u8, payload: &[u8]) -> Result<(), Cut> {
        if self.closed || self.midway {
            return Ok(());
        }
        let mut out = Vec::with_capacity(payload.len() + 10);
        frame(&mut out, opcode, payload);
        self.closed = opcode == CLOSE;
        self.midway = true;
        self.w.write_all(&out).await.map_err(|_| Cut::Client)?;
        self.midway = false;
        self.written += out.len() as u64;
        Ok(())
    }
}

/// Once one direction ended, how long the other may go on (a client that keeps its side
/// open after the agent's end, or an agent that never ends after the client's EOF).
pub const LINGER: Duration = Duration::from_secs(30);
/// How long the last close frame may take to write (a client that reads nothing).
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Client frames handled before the task yields its thread (many empty frames in one read).
const FRAMES_PER_TURN: usize = 256;

/// Convert between `io` (the client's WebSocket, its 101 already sent) and the stream `sid`
/// of `session` (owned by the core: `wakes`) until both directions are done or one fails;
/// `frames` are the client's bytes read after its upgrade request. Returns (bytes read from
/// `io`, bytes written to it). The stream is finished and `io` closed when it returns.
pub async fn run<IO>(
    io: IO,
    session: Arc<Session>,
    sid: u32,
    wakes: Arc<Wakes>,
    frames: Vec<u8>,
) -> (u64, u64)
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let (mut r, w) = tokio::io::split(io);
    // the writer is shared: pongs and the close answer come from the client's direction
    let w = Mutex::new(Writer {
        w,
        written: 0,
        midway: false,
        closed: false,
    });
    let mut from_client = 0u64;
    let result = {
        let up = async {
            // the frames are parsed at `at`, the buffer compacted once per read; it holds
            // one frame at most and one read (CHUNK) past it
            let mut buf = frames;
            let mut chunk = vec![0u8; CHUNK];
            let mut data: Vec<u8> = Vec::new(); // the payloads of one read, written at once
            loop {
                let (mut at, mut handled) = (0, 0);
                while let Some((opcode, payload)) =
                    next_frame(&mut buf[at..]).map_err(|e| Cut::Frame(e.0))?
                {
                    let payload = at + payload.start..at + payload.end;
                    at = payload.end;
                    match opcode {
                        CONT | TEXT | BINARY => data.extend_from_slice(&buf[payload]),
                        PING | CLOSE => {
                            write_data(&session, sid, &wakes, &mut data).await?;
                            let reply = &buf[payload.start
                                ..payload
                                    .end
                                    .min(payload.start + if opcode == PING { 125 } else { 2 })];
                            let reply_op = if opcode == PING { PONG } else { CLOSE };
                            w.lock().await.send(reply_op, reply).await?;
                            if opcode == CLOSE {
                                half_close(&session, sid)?;
                                return Ok(UpEnd::Closed);
                            }
                        }
                        _ => {}
                    }
                    handled += 1;
                    if handled % FRAMES_PER_TURN == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                write_data(&session, sid, &wakes, &mut data).await?;
                buf.drain(..at);
                if buf.capacity() > 2 * CHUNK && buf.len() <= CHUNK {
                    buf.shrink_to(CHUNK); // a large frame's room, given back
                }
                let n = r.read(&mut chunk).await.map_err(|_| Cut::Client)?;
                if n == 0 {
                    half_close(&session, sid)?;
                    return Ok(UpEnd::Eof);
                }
                from_client += n as u64;
                buf.extend_from_slice(&chunk[..n]);
            }
        };
        let down = async {
            let mut buf: Vec<u8> = Vec::with_capacity(CHUNK);
            loop {
                buf.clear();
                let n = session
                    .read_owned(sid, &wakes, &mut buf, CHUNK)
                    .await
                    .map_err(|_| Cut::Stream)?;
                let mut w = w.lock().await;
                if n == 0 {
                    return w.send(CLOSE, &1000u16.to_be_bytes()).await;
                }
                w.send(BINARY, &buf).await?;
            }
        };
        tokio::pin!(up);
        tokio::pin!(down);
        tokio::select! {
            ended = &mut up => match ended {
                Ok(UpEnd::Closed) => Ok(()),
                Ok(UpEnd::Eof) => lingered(&mut down).await,
                Err(cut) => Err(cut),
            },
            ended = &mut down => match ended {
                // the agent's end, told with close 1000: the client's close or EOF awaited
                Ok(()) => lingered(&mut up).await.map(|_| ()),
                Err(cut) => Err(cut),
            },
        }
    };
    let mut w = w.into_inner();
    if let Err(Cut::Frame(code)) = result {
        let code = code.to_be_bytes();
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, w.send(CLOSE, &code)).await;
    }
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, w.w.shutdown()).await;
    session.disown(sid);
    (from_client, w.written)
}

/// The other direction's end, awaited at most LINGER (then the whole ends as if it had).
async fn lingered<T: Default>(
    other: &mut (impl std::future::Future<Output = Result<T, Cut>> + Unpin),
) -> Result<T, Cut> {
    tokio::time::timeout(LINGER, other)
        .await
        .unwrap_or(Ok(T::default()))
}

/// The data frames' payloads of one read written to the stream at once.
async fn write_data(
    session: &Session,
    sid: u32,
    wakes: &Wakes,
    data: &mut Vec<u8>,
) -> Result<(), Cut> {
    if !data.is_empty() {
        session
            .write_owned(sid, wakes, data)
            .await
            .map_err(|_| Cut::Stream)?;
        data.clear();
    }
    Ok(())
}

fn half_close(session: &Session, sid: u32) -> Result<(), Cut> {
    session
        .with(|st| st.close_write(sid))
        .map_err(|_| Cut::Stream)?;
    session.flush();
    Ok(())
}
