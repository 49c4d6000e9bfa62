//! A client connection and an agent's stream carried both ways by the core once Python has
//! decided where the connection goes: a TCP endpoint's connection, a TLS passthrough, an
//! HTTP/1.1 connection after its 101 Switching Protocols. Python opened the stream (and wrote
//! its proxy header); from then on neither side's bytes pass through the interpreter, and
//! Python learns the end and the byte counts (for the connection's record) in one batch.
//!
//! The rules, as edge/http_io.py's splice had them in Python:
//! - Each direction ends with a half-close: the client's EOF sends FIN on the stream, the
//!   agent's FIN shuts the socket's writing side; the other direction goes on.
//! - It ends when both directions are done, or at once when either fails (the client's
//!   socket errs, the stream is reset, the session ends): the socket is closed and the
//!   stream finished (FIN, then it lingers for the agent's; never an RST alone).
//! - Memory: at most `CHUNK` bytes each way in the core's own buffers; the stream's window
//!   (mux.rs) bounds what the agent may send ahead.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::session::{Session, Wakes};

/// Bytes read at once from either side.
pub const CHUNK: usize = 64 * 1024;

/// A carried connection that ended: its id and the bytes read from the client's socket and
/// written to it (the first bytes handed in by Python included in the latter, not in the
/// former: those Python read itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spliced {
    pub id: u64,
    pub from_client: u64,
    pub to_client: u64,
}

/// Why a direction stopped early (either ends the whole splice).
#[derive(Debug)]
enum Cut {
    Client,
    Stream,
}

/// Carry `io` and the stream `sid` of `session` (owned by the core: `wakes`) both ways until
/// both directions are done or one fails; `to_stream` goes to the agent first and
/// `to_client` to the client first. Returns (bytes read from `io`, bytes written to it). The
/// stream is finished and `io` closed when it returns.
pub async fn run<IO>(
    io: IO,
    session: Arc<Session>,
    sid: u32,
    wakes: Arc<Wakes>,
    to_stream: Vec<u8>,
    to_client: Vec<u8>,
) -> (u64, u64)
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let (mut r, mut w) = tokio::io::split(io);
    let mut from_client = 0u64;
    let mut written = 0u64;
    {
        let up = async {
            if !to_stream.is_empty() {
                session
                    .write_owned(sid, &wakes, &to_stream)
                    .await
                    .map_err(|_| Cut::Stream)?;
            }
            drop(to_stream);
            let mut buf = vec![0u8; CHUNK];
            loop {
                let n = r.read(&mut buf).await.map_err(|_| Cut::Client)?;
                if n == 0 {
                    break;
                }
                from_client += n as u64;
                session
                    .write_owned(sid, &wakes, &buf[..n])
                    .await
                    .map_err(|_| Cut::Stream)?;
            }
            session
                .with(|st| st.close_write(sid))
                .map_err(|_| Cut::Stream)?;
            session.flush();
            Ok::<(), Cut>(())
        };
        let down = async {
            if !to_client.is_empty() {
                w.write_all(&to_client).await.map_err(|_| Cut::Client)?;
                written += to_client.len() as u64;
            }
            drop(to_client);
            let mut buf: Vec<u8> = Vec::with_capacity(CHUNK);
            loop {
                buf.clear();
                let n = session
                    .read_owned(sid, &wakes, &mut buf, CHUNK)
                    .await
                    .map_err(|_| Cut::Stream)?;
                if n == 0 {
                    break;
                }
                w.write_all(&buf).await.map_err(|_| Cut::Client)?;
                written += n as u64;
            }
            w.shutdown().await.map_err(|_| Cut::Client)?;
            Ok::<(), Cut>(())
        };
        let _ = tokio::try_join!(up, down);
    }
    session.disown(sid);
    (from_client, written)
}

/// How long a relay waits for the client's end once the holder's end came (its EOF): a
/// client that keeps a relayed connection open after the holder closed it (an HTTP holder's
/// idle timeout) holds its place no longer than this.
pub const RELAY_LINGER: std::time::Duration = std::time::Duration::from_secs(30);

/// Carry two connected sockets both ways: the cluster's relay, a public connection `a` and
/// the relay connection `b` to the instance that holds its endpoint (edge/cluster.py, once
/// the holder said it serves it). `to_b` goes to `b` first and `to_a` to `a` first (what
/// Python had read of each). The rules of [`run`]: each direction ends with a half-close of
/// the socket it writes, the whole at the first failure of either side (both sockets closed);
/// at most `CHUNK` bytes each way in the core's buffers, TCP's own back-pressure beyond. Once
/// `b`'s direction ended, `a`'s gets at most `linger` more (then both are closed).
/// Returns (bytes read from `a`, bytes written to it, `to_a` included).
pub async fn relay<A, B>(
    a: A,
    b: B,
    to_b: Vec<u8>,
    to_a: Vec<u8>,
    linger: std::time::Duration,
) -> (u64, u64)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    let mut from_a = 0u64;
    let mut written = 0u64;
    {
        let up = async {
            if !to_b.is_empty() {
                bw.write_all(&to_b).await.map_err(|_| Cut::Stream)?;
            }
            drop(to_b);
            let mut buf = vec![0u8; CHUNK];
            loop {
                let n = ar.read(&mut buf).await.map_err(|_| Cut::Client)?;
                if n == 0 {
                    break;
                }
                from_a += n as u64;
                bw.write_all(&buf[..n]).await.map_err(|_| Cut::Stream)?;
            }
            bw.shutdown().await.map_err(|_| Cut::Stream)?;
            Ok::<(), Cut>(())
        };
        let down = async {
            if !to_a.is_empty() {
                aw.write_all(&to_a).await.map_err(|_| Cut::Client)?;
                written += to_a.len() as u64;
            }
            drop(to_a);
            let mut buf = vec![0u8; CHUNK];
            loop {
                let n = br.read(&mut buf).await.map_err(|_| Cut::Stream)?;
                if n == 0 {
                    break;
                }
                aw.write_all(&buf[..n]).await.map_err(|_| Cut::Client)?;
                written += n as u64;
            }
            aw.shutdown().await.map_err(|_| Cut::Client)?;
            Ok::<(), Cut>(())
        };
        tokio::pin!(up);
        tokio::pin!(down);
        let (mut up_done, mut down_done) = (false, false);
        loop {
            tokio::select! {
                ended = &mut up, if !up_done => {
                    if ended.is_err() || down_done {
                        break;
                    }
                    up_done = true;
                }
                ended = &mut down, if !down_done => {
                    if ended.is_err() || up_done {
                        break;
                    }
                    down_done = true;
                }
                _ = tokio::time::sleep(linger), if down_done => break,
            }
        }
    }
    (from_a, written)
}
