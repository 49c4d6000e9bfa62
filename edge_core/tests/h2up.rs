//! HTTP/2 towards the agent (src/h2up.rs): the HTTP/1.1 requests the core's path writes on a
//! leg become streams of an h2 client connection, against the `h2` crate's server on the
//! other end of an in-process pipe: the head and body as HTTP/2 (`te: trailers` for gRPC),
//! the request's trailers, the answer back as chunked HTTP/1.1 with its trailers, a
//! trailers-only answer as a bodiless one, exchanges one after another, and a leg given up
//! mid-answer resets its stream.

use std::time::Duration;

use bytes::Bytes;
use edge_core::h2up::serve;
use http::{HeaderMap, HeaderValue, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

type Accepted = (
    http::Request<h2::RecvStream>,
    h2::server::SendResponse<Bytes>,
);

/// A leg (the HTTP/1.1 end), and the streams the h2 server on the other end of the pipe h2up
/// speaks on accepts (its connection driven by a task of its own).
async fn setup() -> (DuplexStream, tokio::sync::mpsc::Receiver<Accepted>) {
    let (leg, h1_end) = tokio::io::duplex(64 * 1024);
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(serve(h1_end, client_io, "http"));
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(async move {
        let mut server = h2::server::handshake(server_io).await.unwrap();
        while let Some(Ok(accepted)) = server.accept().await {
            let _ = tx.send(accepted).await;
        }
    });
    (leg, rx)
}

async fn read_until(leg: &mut DuplexStream, end: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !got.ends_with(end) {
        let n = tokio::time::timeout(Duration::from_secs(5), leg.read(&mut chunk))
            .await
            .expect("no answer")
            .unwrap();
        assert!(n > 0, "ended: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    }
    got
}

#[tokio::test]
async fn a_grpc_exchange_goes_as_http2_and_comes_back_chunked_with_its_trailers() {
    let (mut leg, mut server) = setup().await;
    leg.write_all(
        b"POST /test.Echo/Unary HTTP/1.1\r\nhost: g.test\r\ncontent-type: application/grpc\r\n\
          connection: keep-alive\r\nx-forwarded-for: 1.2.3.4\r\ntransfer-encoding: chunked\r\n\r\n\
          3\r\nabc\r\n0\r\nx-end: 1\r\n\r\n",
    )
    .await
    .unwrap();
    let (request, mut respond) = server.recv().await.unwrap();
    let (parts, mut body) = request.into_parts();
    assert_eq!(parts.uri.to_string(), "http://g.test/test.Echo/Unary");
    assert_eq!(parts.headers["te"], "trailers");
    assert_eq!(parts.headers["x-forwarded-for"], "1.2.3.4");
    assert!(!parts.headers.contains_key("connection"));
    assert!(!parts.headers.contains_key("transfer-encoding"));
    assert_eq!(
        body.data().await.unwrap().unwrap(),
        Bytes::from_static(b"abc")
    );
    let trailers = body.trailers().await.unwrap().unwrap();
    assert_eq!(trailers["x-end"], "1");
    let mut send = respond
        .send_response(Response::builder().status(200).body(()).unwrap(), false)
        .unwrap();
    send.send_data(Bytes::from_static(b"hi"), false).unwrap();
    let mut end = HeaderMap::new();
    end.insert("grpc-status", HeaderValue::from_static("0"));
    send.send_trailers(end).unwrap();
    let got = read_until(&mut leg, b"hi\r\n0\r\ngrpc-status: 0\r\n\r\n").await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(
        text.contains("transfer-encoding: chunked\r\n\r\n2\r\nhi\r\n"),
        "{text}"
    );
}

#[tokio::test]
async fn a_trailers_only_answer_is_bodiless_and_the_next_exchange_follows_on_the_connection() {
    let (mut leg, mut server) = setup().await;
    leg.write_all(b"GET /a HTTP/1.1\r\nhost: g.test\r\n\r\n")
        .await
        .unwrap();
    let (request, mut respond) = server.recv().await.unwrap();
    assert_eq!(request.uri().path(), "/a");
    let answer = Response::builder()
        .status(200)
        .header("grpc-status", "5")
        .body(())
        .unwrap();
    respond.send_response(answer, true).unwrap();
    let got = read_until(&mut leg, b"\r\n\r\n").await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("grpc-status: 5\r\n"), "{text}");
    assert!(text.contains("content-length: 0\r\n"), "{text}");
    leg.write_all(b"GET /b HTTP/1.1\r\nhost: g.test\r\n\r\n")
        .await
        .unwrap();
    let (request, mut respond) = server.recv().await.unwrap();
    assert_eq!(request.uri().path(), "/b");
    assert_eq!(request.uri().scheme_str(), Some("http"));
    let mut send = respond
        .send_response(Response::builder().status(404).body(()).unwrap(), false)
        .unwrap();
    send.send_data(Bytes::from_static(b"no"), true).unwrap();
    let got = read_until(&mut leg, b"0\r\n\r\n").await;
    assert!(got.starts_with(b"HTTP/1.1 404 Not Found\r\n"));
}

#[tokio::test]
async fn a_leg_given_up_before_the_answer_resets_the_stream() {
    let (mut leg, mut server) = setup().await;
    leg.write_all(b"GET /slow HTTP/1.1\r\nhost: g.test\r\n\r\n")
        .await
        .unwrap();
    let (_request, mut respond) = server.recv().await.unwrap();
    drop(leg); // the client's reset, or its deadline: the HTTP/1.1 path drops the leg
    let reset = tokio::time::timeout(
        Duration::from_secs(5),
        std::future::poll_fn(|cx| respond.poll_reset(cx)),
    )
    .await
    .expect("the stream was not reset")
    .unwrap();
    assert_eq!(reset, h2::Reason::CANCEL);
}

/// A target goes to an HTTP/2 endpoint only when its `:path` carries it unchanged; any other
/// (a quote, angle brackets, bytes that are not UTF-8, a fragment) is the Python path's,
/// which sends it raw.
#[test]
fn only_a_target_the_path_carries_unchanged_is_the_cores() {
    use edge_core::h2up::carriable_target;
    for ok in [
        &b"/"[..],
        b"/test.Echo/Unary",
        b"/a?b=c&d=%20e",
        b"/a;p=1/b",
    ] {
        assert!(carriable_target(ok), "{:?}", String::from_utf8_lossy(ok));
    }
    for refused in [
        &b"/a?q=\"x\""[..],
        b"/a<b>",
        b"/caf\xe9",
        b"/a#frag",
        b"*",
        b"http://h/a",
        b"",
    ] {
        assert!(
            !carriable_target(refused),
            "{:?}",
            String::from_utf8_lossy(refused)
        );
    }
}
