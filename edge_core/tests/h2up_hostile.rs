//! h2up.rs against a hostile or stuck upstream: a response's field section is bounded as the
//! HTTP/1.1 path bounds a head, and a leg given up while h2 waits for the upstream's window
//! still resets its stream.

use std::time::Duration;

use bytes::Bytes;
use edge_core::h2up::serve_until;
use http::Response;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::oneshot;

type Accepted = (
    http::Request<h2::RecvStream>,
    h2::server::SendResponse<Bytes>,
);

/// A leg (the HTTP/1.1 end) with what holds it, and the streams the h2 server accepts
/// (`window`: its streams' initial window).
async fn setup(
    window: u32,
) -> (
    DuplexStream,
    oneshot::Sender<()>,
    tokio::sync::mpsc::Receiver<Accepted>,
) {
    let (leg, h1_end) = tokio::io::duplex(64 * 1024);
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (held, gone) = oneshot::channel::<()>();
    tokio::spawn(serve_until(h1_end, client_io, "http", async move {
        let _ = gone.await;
    }));
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(async move {
        let Ok(mut server) = h2::server::Builder::new()
            .initial_window_size(window)
            .handshake::<_, Bytes>(server_io)
            .await
        else {
            return;
        };
        while let Some(Ok(accepted)) = server.accept().await {
            let _ = tx.send(accepted).await;
        }
    });
    (leg, held, rx)
}

#[tokio::test]
async fn a_response_head_larger_than_a_head_may_be_is_not_relayed() {
    let (mut leg, _held, mut server) = setup(65_535).await;
    leg.write_all(b"GET /a HTTP/1.1\r\nhost: g.test\r\n\r\n")
        .await
        .unwrap();
    let (_request, mut respond) = server.recv().await.unwrap();
    let mut answer = Response::builder().status(200);
    let value = "x".repeat(4000);
    for i in 0..256 {
        answer = answer.header(format!("x-h{i}"), value.as_str()); // ~1 MiB of fields
    }
    let _ = respond.send_response(answer.body(()).unwrap(), true);
    let mut got = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(3), leg.read(&mut chunk)).await {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&chunk[..n]);
    }
    assert!(got.len() <= 64 * 1024, "a {} byte head relayed", got.len());
}

#[tokio::test]
async fn a_leg_given_up_while_the_upstreams_window_is_shut_resets_the_stream() {
    let (mut leg, held, mut server) = setup(0).await; // the upstream grants no window
    leg.write_all(b"POST /up HTTP/1.1\r\nhost: g.test\r\ncontent-length: 100000\r\n\r\n")
        .await
        .unwrap();
    leg.write_all(&[b'a'; 1000]).await.unwrap();
    let (_request, mut respond) = server.recv().await.unwrap();
    drop((leg, held)); // the client's reset: the HTTP/1.1 path drops the leg
    let reset = tokio::time::timeout(
        Duration::from_secs(3),
        std::future::poll_fn(|cx| respond.poll_reset(cx)),
    )
    .await
    .expect("the stream was not reset")
    .unwrap();
    assert_eq!(reset, h2::Reason::CANCEL);
}
