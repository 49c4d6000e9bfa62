//! HTTP/2 towards the agent, for an endpoint bound with `app_protocol: "http2"` (the Bind's
//! `ForwardsProto`). The official SDKs copy a proxy stream's bytes to their upstream (for an
//! `https://` upstream after offering it ALPN `h2`), so the edge speaks HTTP/2 itself on the
//! stream, with prior knowledge (h2c, RFC 9113 3.3), as edge/h2leg.py did: gRPC servers, which
//! speak nothing else, are reached.
//!
//! The core's HTTP/1.1 path (public.rs `exchange`) is unchanged: it writes each request to the
//! leg and reads the answer from it as HTTP/1.1. For such an endpoint the leg is an in-process
//! duplex whose other end [`serve`] reads: each request becomes one stream of an h2 client
//! connection (the `h2` crate) on the proxy stream itself ([`MuxIo`]: what h2 writes between
//! two flushes goes as one write of the stream), and its answer an HTTP/1.1 response,
//! chunked so its trailers follow (a gRPC status), or trailers-only as a bodiless one.
//! Exchanges follow one another on the connection as on an HTTP/1.1 leg; a request with a
//! chunked body (every gRPC call's) gets a fresh leg, as on the HTTP/1.1 path
//! (`fresh_stream_body`: the SDK's new upstream connection ACKs at once; a kept one waited
//! ~40 ms for the upstream's delayed ACK on every call, measured). An exchange the HTTP/1.1
//! path gives up (the client's reset, a deadline) drops its stream: h2 resets it
//! (RST_STREAM CANCEL), so the server sees the call end.
//!
//! Bounds: the duplex holds `DUPLEX` bytes each way, [`MuxIo`] at most `HELD_WRITES` of h2's
//! writes and one read of the stream; the h2 connection's windows are the crate's defaults
//! towards the agent (64 KiB a stream), the answer's DATA credited back only as the HTTP/1.1
//! path takes it, so a slow client holds the upstream back; a request head at most
//! `http::MAX_HEAD_BYTES`.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use h2::{RecvStream, SendStream};
use http::{HeaderName, HeaderValue, Method, Request, Response, Uri};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};

use crate::h2front::Body;
use crate::http::{self as h1, Framing, Parsed};
use crate::mux::StreamError;
use crate::session::{Session, Wakes};

/// Bytes the in-process duplex holds each way (and the most one read of the stream takes).
pub const DUPLEX: usize = 64 * 1024;

/// The leg of a proxy stream `sid` of `session` (owned by the core: `wakes`) to an endpoint
/// that speaks HTTP/2, `header` (the proxy header) written first: the HTTP/1.1 end the
/// exchange reads and writes, and what the leg holds while it wants the exchange (dropped
/// with it: the exchange in flight is dropped at once, its stream reset, even while h2 waits
/// for the agent's window and reads nothing of the leg). `scheme` is the requests' `:scheme`
/// (the agent's upstream's). The stream is finished once that end and the h2 connection are
/// done.
pub(crate) fn start(
    session: Arc<Session>,
    sid: u32,
    wakes: Arc<Wakes>,
    header: Vec<u8>,
    scheme: &'static str,
) -> (DuplexStream, tokio::sync::oneshot::Sender<()>) {
    let (ours, h1_end) = tokio::io::duplex(DUPLEX);
    let (held, gone) = tokio::sync::oneshot::channel();
    tokio::spawn(serve_until(
        h1_end,
        MuxIo::new(session, sid, wakes, header),
        scheme,
        async move {
            let _ = gone.await; // the sender dropped: the leg was given up
        },
    ));
    (ours, held)
}

/// Most bytes h2 may have written before they are sent (then its writes wait).
const HELD_WRITES: usize = 256 * 1024;

type Writing = Pin<Box<dyn Future<Output = Result<(), StreamError>> + Send>>;
type Reading = Pin<Box<dyn Future<Output = (Result<usize, StreamError>, Vec<u8>)> + Send>>;

/// The proxy stream as h2's transport. What h2 writes is held until it flushes (it flushes
/// once it has written what it had queued), then goes as one write of the stream: a request's
/// HEADERS and DATA (and its END_STREAM) in one muxado frame, so in one read of the agent's,
/// which copies it to its upstream in one write (the SDKs write without TCP_NODELAY: a
/// request split over two writes waited for the upstream's delayed ACK, ~40 ms). The stream
/// is finished (FIN, then its linger for the agent's) when this is dropped.
struct MuxIo {
    session: Arc<Session>,
    sid: u32,
    wakes: Arc<Wakes>,
    held: Vec<u8>,
    writing: Option<Writing>,
    read: Vec<u8>,
    at: usize,
    reading: Option<Reading>,
}

impl MuxIo {
    fn new(session: Arc<Session>, sid: u32, wakes: Arc<Wakes>, first: Vec<u8>) -> MuxIo {
        MuxIo {
            session,
            sid,
            wakes,
            held: first,
            writing: None,
            read: Vec::new(),
            at: 0,
            reading: None,
        }
    }

    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if let Some(writing) = self.writing.as_mut() {
                let done = std::task::ready!(writing.as_mut().poll(cx));
                self.writing = None;
                done.map_err(|e| io::Error::new(io::ErrorKind::BrokenPipe, format!("{e:?}")))?;
            }
            if self.held.is_empty() {
                return Poll::Ready(Ok(()));
            }
            let data = std::mem::take(&mut self.held);
            let (session, wakes, sid) = (self.session.clone(), self.wakes.clone(), self.sid);
            self.writing = Some(Box::pin(async move {
                session.write_owned(sid, &wakes, &data).await
            }));
        }
    }
}

impl AsyncWrite for MuxIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.held.len() >= HELD_WRITES {
            std::task::ready!(this.poll_send(cx))?;
        }
        this.held.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_send(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_send(cx))?;
        let _ = this.session.with(|st| st.close_write(this.sid));
        this.session.flush();
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for MuxIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.reading.is_some() || this.at == this.read.len() {
            if this.reading.is_none() {
                let (session, wakes, sid) = (this.session.clone(), this.wakes.clone(), this.sid);
                let mut into = std::mem::take(&mut this.read);
                into.clear();
                this.at = 0;
                this.reading = Some(Box::pin(async move {
                    let got = session.read_owned(sid, &wakes, &mut into, DUPLEX).await;
                    (got, into)
                }));
            }
            let reading = this.reading.as_mut().expect("a read in progress");
            let (got, into) = std::task::ready!(reading.as_mut().poll(cx));
            this.reading = None;
            this.read = into;
            this.at = 0;
            if got.map_err(|e| io::Error::new(io::ErrorKind::ConnectionReset, format!("{e:?}")))?
                == 0
            {
                return Poll::Ready(Ok(())); // the agent's end of stream
            }
        }
        let n = (this.read.len() - this.at).min(buf.remaining());
        buf.put_slice(&this.read[this.at..this.at + n]);
        this.at += n;
        Poll::Ready(Ok(()))
    }
}

impl Drop for MuxIo {
    fn drop(&mut self) {
        self.session.disown(self.sid);
    }
}

/// The HTTP/1.1 requests read from `h1` sent on an h2 client connection over `io`, their
/// answers written back, one after another, until `h1` ends or the connection fails.
pub async fn serve<A, B>(h1: A, io: B, scheme: &'static str)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    serve_until(h1, io, scheme, std::future::pending()).await
}

/// [`serve`], until `gone` (the leg given up): the exchange in flight is then dropped (its
/// stream reset) wherever it waits.
pub async fn serve_until<A, B, G>(mut h1: A, io: B, scheme: &'static str, gone: G)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    G: Future<Output = ()>,
{
    let Ok((mut client, connection)) = h2::client::Builder::new()
        .max_concurrent_reset_streams(16)
        // a response's (or its trailers') field section at most what the HTTP/1.1 path reads
        // of a head (the crate's default is 16 MiB, which HPACK's table lets a few KiB of
        // frames fill); h2front's server and Python's h2leg (hpack: 64 KiB) bound it too
        .max_header_list_size(h1::MAX_HEAD_BYTES as u32)
        .handshake::<_, Bytes>(io)
        .await
    else {
        return;
    };
    // The connection is driven by this task, beside the exchanges: a request's HEADERS and
    // its first DATA (queued with no wait between them) go out in one write, so in one read
    // of the agent's, which writes them to its upstream in one write (the SDKs write without
    // TCP_NODELAY: HEADERS alone, then DATA, waited ~40 ms for the upstream's delayed ACK).
    tokio::pin!(connection);
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let served = async {
        loop {
            let head = loop {
                match h1::parse_request(&buf) {
                    Parsed::Done(head) => break head,
                    Parsed::Invalid(_) => return,
                    Parsed::Partial if buf.len() >= h1::MAX_HEAD_BYTES => return,
                    Parsed::Partial => {}
                }
                buf.reserve(8 * 1024);
                match h1.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return, // the exchange is done with the leg
                    Ok(_) => {}
                }
            };
            let _ = buf.split_to(head.len);
            if exchange(&mut h1, &mut buf, &head, &mut client, scheme)
                .await
                .is_err()
            {
                return; // the streams dropped here are reset; the leg's end sees the EOF
            }
        }
    };
    tokio::select! {
        _ = served => {}
        _ = &mut connection => return, // the agent's end is gone
        _ = gone => {} // the leg given up: the exchange's streams dropped (reset) here
    }
    // what the ended exchanges left (a reset, the GOAWAY once every handle is gone) sent
    drop(client);
    let _ = tokio::time::timeout(CLOSING, connection).await;
}

/// How long an ended leg's connection may take to send what is left (a reset, GOAWAY).
const CLOSING: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether a request target goes to an HTTP/2 endpoint unchanged as its `:path` (an
/// origin-form the `http` crate takes as it is: no fragment, no byte it refuses or rewrites);
/// any other is the Python path's, which sends it raw (public.rs checks before a leg).
pub fn carriable_target(target: &[u8]) -> bool {
    target.first() == Some(&b'/')
        && std::str::from_utf8(target)
            .ok()
            .and_then(|t| t.parse::<http::uri::PathAndQuery>().ok())
            .is_some_and(|p| p.as_str().as_bytes() == target)
}

/// The request `head` of HTTP/1.1 as HTTP/2's: `:authority` from Host, the fields HTTP/2 does
/// not carry dropped (and those Connection names), `te` only as `trailers`, and `te:
/// trailers` for a gRPC request (its server requires it; the HTTP/1.1 leg dropped it).
fn request_of(head: &h1::RequestHead, scheme: &str) -> Option<Request<()>> {
    let host = head
        .fields
        .iter()
        .find(|(n, _)| n == b"host")
        .map(|(_, v)| v.as_slice())?;
    let target = String::from_utf8_lossy(&head.target);
    let uri: Uri = if target.starts_with('/') {
        format!("{scheme}://{}{target}", String::from_utf8_lossy(host))
            .parse()
            .ok()?
    } else {
        return None; // absolute-form or '*': not what the HTTP/1.1 path sends
    };
    let mut request = Request::builder()
        .method(Method::from_bytes(&head.method).ok()?)
        .uri(uri)
        .body(())
        .ok()?;
    let named: Vec<Vec<u8>> = head
        .fields
        .iter()
        .filter(|(n, _)| n == b"connection")
        .flat_map(|(_, v)| v.split(|b| *b == b','))
        .map(|t| t.trim_ascii().to_ascii_lowercase())
        .collect();
    let mut grpc = false;
    let mut te = false;
    let fields = request.headers_mut();
    for (name, value) in &head.fields {
        let skip = matches!(
            name.as_slice(),
            b"host"
                | b"connection"
                | b"keep-alive"
                | b"proxy-connection"
                | b"transfer-encoding"
                | b"upgrade"
                | b"content-length"
        ) || named.contains(name);
        if skip || (name == b"te" && !value.eq_ignore_ascii_case(b"trailers")) {
            continue;
        }
        te |= name == b"te";
        grpc |= name == b"content-type" && value.starts_with(b"application/grpc");
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            fields.append(n, v);
        }
    }
    if let Framing::Length(n) = head.framing {
        fields.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    if grpc && !te {
        fields.insert(http::header::TE, HeaderValue::from_static("trailers"));
    }
    Some(request)
}

/// One exchange: the request sent (its body as it comes), the answer written back as
/// HTTP/1.1. Err when the leg or the connection can serve no more.
async fn exchange<A>(
    h1: &mut A,
    buf: &mut BytesMut,
    head: &h1::RequestHead,
    client: &mut SendRequest<Bytes>,
    scheme: &str,
) -> Result<(), ()>
where
    A: AsyncRead + AsyncWrite + Unpin,
{
    let Some(request) = request_of(head, scheme) else {
        let _ = h1.write_all(&bad_gateway()).await;
        return Err(());
    };
    let bodiless = matches!(head.framing, Framing::None | Framing::Length(0));
    let ready = client.clone().ready().await.map_err(|_| ())?;
    *client = ready;
    let (response, mut send) = client.send_request(request, bodiless).map_err(|_| ())?;
    let head_request = head.method == b"HEAD";
    let (mut rd, mut wr) = tokio::io::split(h1);
    let mut body = Body::new(head.framing);
    let relay = async {
        let response = response.await.map_err(|_| ())?;
        relay(&mut wr, response, head_request).await
    };
    tokio::pin!(relay);
    if !bodiless {
        let pump = pump(&mut rd, buf, &mut body, &mut send);
        tokio::pin!(pump);
        tokio::select! {
            p = &mut pump => p?,
            r = &mut relay => {
                r?;
                // an answer before the whole body (an early one): this stream is done, and
                // the leg with it (the HTTP/1.1 path stops sending the rest)
                return Err(());
            }
        }
    }
    // the answer, the leg's end watched meanwhile: an exchange the HTTP/1.1 path gave up (the
    // client's reset, its deadline) drops the stream, which h2 resets (the server sees the
    // call cancelled). The HTTP/1.1 path writes nothing more before the answer is whole.
    let mut probe = [0u8; 1];
    tokio::select! {
        r = &mut relay => r,
        _ = rd.read(&mut probe) => Err(()),
    }
}

/// The request's body, from what `buf` holds then from the leg, sent as the stream's window
/// lets it through, its trailers (a chunked one's) last.
async fn pump<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    body: &mut Body,
    send: &mut SendStream<Bytes>,
) -> Result<(), ()> {
    {
        loop {
            let (piece, done) = body.take(buf).map_err(|_| ())?;
            if !piece.is_empty() {
                send_all(send, piece).await?;
            }
            if done {
                return match body.trailers() {
                    Some(t) if !t.is_empty() => send.send_trailers(t).map_err(|_| ()),
                    _ => send.send_data(Bytes::new(), true).map_err(|_| ()),
                };
            }
            buf.reserve(16 * 1024);
            if rd.read_buf(buf).await.map_err(|_| ())? == 0 {
                return Err(()); // the leg ended mid-body: the stream is reset (dropped)
            }
        }
    }
}

/// `piece` sent as the stream's window lets it through.
async fn send_all(send: &mut SendStream<Bytes>, mut piece: Bytes) -> Result<(), ()> {
    while !piece.is_empty() {
        send.reserve_capacity(piece.len());
        match poll_fn(|cx| send.poll_capacity(cx)).await {
            None | Some(Err(_)) => return Err(()),
            Some(Ok(0)) => {}
            Some(Ok(n)) => {
                let part = piece.split_to(n.min(piece.len()));
                send.send_data(part, false).map_err(|_| ())?;
            }
        }
    }
    Ok(())
}

/// The agent's answer as HTTP/1.1: a bodiless one (a HEAD's, 204, 304, or HEADERS that end
/// the stream: gRPC's trailers-only answer) with its fields as they are, any other chunked,
/// its trailers after the last chunk. DATA is credited back once written.
async fn relay<W: AsyncWrite + Unpin>(
    wr: &mut W,
    response: Response<RecvStream>,
    head_request: bool,
) -> Result<(), ()> {
    let (parts, mut body) = response.into_parts();
    let status = parts.status.as_u16();
    let ended = body.is_end_stream();
    let bodiless = head_request || status == 204 || status == 304;
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(format!("HTTP/1.1 {status} {}\r\n", h1::phrase(status)).as_bytes());
    for (name, value) in &parts.headers {
        if !bodiless && name == http::header::CONTENT_LENGTH {
            continue; // chunked below, or 0
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if bodiless {
        out.extend_from_slice(b"\r\n");
        return wr.write_all(&out).await.map_err(|_| ());
    }
    if ended {
        out.extend_from_slice(b"content-length: 0\r\n\r\n");
        return wr.write_all(&out).await.map_err(|_| ());
    }
    out.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
    wr.write_all(&out).await.map_err(|_| ())?;
    while let Some(data) = body.data().await {
        let data = data.map_err(|_| ())?;
        let n = data.len();
        if n == 0 {
            continue;
        }
        out.clear();
        h1::chunk(&data, &mut out);
        wr.write_all(&out).await.map_err(|_| ())?;
        let _ = body.flow_control().release_capacity(n);
    }
    let trailers = body.trailers().await.map_err(|_| ())?;
    out.clear();
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.iter().flatten() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    wr.write_all(&out).await.map_err(|_| ())
}

/// A request the h2 leg cannot send (a head it cannot express): what the HTTP/1.1 path reads
/// as an invalid answer (ERR_NGROK_3004).
fn bad_gateway() -> Vec<u8> {
    b"HTTP/1.1 000 Invalid\r\n\r\n".to_vec()
}
