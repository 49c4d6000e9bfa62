//! The WebSocket-to-TCP converter of an HTTP endpoint (the Bind option
//! `WebsocketTCPConverter`, the SDKs' `websocket_tcp_conversion()`), once the client's upgrade
//! was answered 101 (edge/wstcp.py answers it): the messages' payload carried to the agent as a
//! raw byte stream, whose upstream is a plain TCP service, and the agent's bytes back as
//! binary frames (RFC 6455).
//!
//! The rules, as edge/wstcp.py states them (docs/DATA_PLANE.md):
//! - data frames (text, binary, continuation) from the client become their payload on the
//!   stream; a ping is answered with a pong (its first 125 bytes), written before the next
//!   read of the client, so a client that sends pings and reads none is held back by its own
//!   socket, never buffered; a close frame is answered with a close (its code echoed) and ends
//!   the client's direction (FIN to the agent); the client's EOF does too;
//! - the agent's bytes go back as binary frames; its FIN ends the WebSocket with close 1000;
//! - a frame announced larger than [`MAX_FRAME`] is answered with close 1009, an unmasked one
//!   with close 1002, and the connection ends at once;
//! - it ends when both directions are done, or at once when either side fails (the client's
//!   socket errs, the stream is reset): the socket is closed and the stream finished.
//!
//! Memory: one client frame at most (its header and [`MAX_FRAME`] bytes of payload) and
//! [`CHUNK`] bytes of the agent's, per connection.

use std::sync::Arc;

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

/// The next whole client frame at the front of `buf`, taken from it: (opcode, unmasked
/// payload); None while it is not whole. The bound is checked on the header, before any of
/// the payload is waited for.
pub fn next_frame(buf: &mut Vec<u8>) -> Result<Option<(u8, Vec<u8>)>, FrameError> {
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
    let mut payload = buf[at + 4..end].to_vec();
    payload
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b ^= mask[i % 4]);
    buf.drain(..end);
    Ok(Some((opcode, payload)))
}

/// Why the conversion stopped early (either ends the whole of it).
enum Cut {
    Client,
    Stream,
    Frame(u16),
}

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
    let w = Mutex::new((w, 0u64));
    let send = |opcode: u8, payload: &[u8]| {
        let mut out = Vec::with_capacity(payload.len() + 10);
        frame(&mut out, opcode, payload);
        let w = &w;
        async move {
            let mut w = w.lock().await;
            w.0.write_all(&out).await.map_err(|_| Cut::Client)?;
            w.1 += out.len() as u64;
            Ok::<(), Cut>(())
        }
    };
    let mut from_client = 0u64;
    let result = {
        let up = async {
            let mut buf = frames;
            loop {
                while let Some((opcode, payload)) =
                    next_frame(&mut buf).map_err(|e| Cut::Frame(e.0))?
                {
                    match opcode {
                        CONT | TEXT | BINARY if !payload.is_empty() => session
                            .write_owned(sid, &wakes, &payload)
                            .await
                            .map_err(|_| Cut::Stream)?,
                        PING => send(PONG, &payload[..payload.len().min(125)]).await?,
                        CLOSE => {
                            send(CLOSE, &payload[..payload.len().min(2)]).await?;
                            return half_close(&session, sid);
                        }
                        _ => {}
                    }
                }
                buf.reserve(CHUNK);
                let n = r.read_buf(&mut buf).await.map_err(|_| Cut::Client)?;
                if n == 0 {
                    return half_close(&session, sid);
                }
                from_client += n as u64;
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
                if n == 0 {
                    return send(CLOSE, &1000u16.to_be_bytes()).await;
                }
                send(BINARY, &buf).await?;
            }
        };
        tokio::try_join!(up, down).map(|_| ())
    };
    let mut w = w.into_inner();
    if let Err(Cut::Frame(code)) = result {
        let mut out = Vec::new();
        frame(&mut out, CLOSE, &code.to_be_bytes());
        if w.0.write_all(&out).await.is_ok() {
            w.1 += out.len() as u64;
        }
    }
    let _ = w.0.shutdown().await;
    session.disown(sid);
    (from_client, w.1)
}

fn half_close(session: &Session, sid: u32) -> Result<(), Cut> {
    session
        .with(|st| st.close_write(sid))
        .map_err(|_| Cut::Stream)?;
    session.flush();
    Ok(())
}
