//! HTTP/2 on the public HTTPS listener (src/h2front.rs): the frame budgets and header-block
//! bounds read off the client's bytes (sans-IO, each at its boundary), and streams served
//! through a session the test plays the agent on, with the `h2` crate as the client.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use edge_core::carrier::Carrier;
use edge_core::h2front::{
    huffman_len, Frames, ListSizes, MAX_CONTROL, MAX_HEADER_BLOCK, MAX_RESETS,
};
use edge_core::mux::{encode, DATA, FIN};
use edge_core::session::Session;
use http::Request;
use tokio::net::UnixStream;
use tokio_rustls::rustls::ClientConfig;

mod common;
use common::h2listen::{connect, frame, listener, request_block, PREFACE};
use common::has;

/// Where `scan` cut `bytes` fed whole after the preface (None: nothing passed a bound).
fn cut_of(frames: &mut Frames, bytes: &[u8], answered: u64) -> Option<usize> {
    let mut all = PREFACE.to_vec();
    all.extend_from_slice(bytes);
    frames
        .scan(&all, answered, Instant::now())
        .map(|n| n - PREFACE.len())
}

fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

#[test]
fn huffman_strings_decode_to_their_lengths_rfc_7541_c4() {
    assert_eq!(huffman_len(&hex("f1e3 c2e5 f23a 6ba0 ab90 f4ff")), 15); // www.example.com
    assert_eq!(huffman_len(&hex("a8eb 1064 9cbf")), 8); // no-cache
    assert_eq!(huffman_len(&hex("25a8 49e9 5ba9 7d7f")), 10); // custom-key
    assert_eq!(huffman_len(&hex("25a8 49e9 5bb8 e8b4 bf")), 12); // custom-value
    assert_eq!(huffman_len(&hex("6402")), 3); // "302" (C.6.1)
}

#[test]
fn header_list_sizes_follow_the_dynamic_table_rfc_7541_c4() {
    // RFC 7541 C.4: three requests on one connection, Huffman-coded, the table carried over
    let mut sizes = ListSizes::default();
    let first = hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff");
    assert_eq!(sizes.block(&first), Some(42 + 43 + 38 + 57));
    let second = hex("8286 84be 5886 a8eb 1064 9cbf");
    assert_eq!(sizes.block(&second), Some(42 + 43 + 38 + 57 + 53));
    let third = hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf");
    assert_eq!(sizes.block(&third), Some(42 + 44 + 48 + 57 + 54));
    // an index past the table, a size update past the allowed size, a cut string: not HPACK
    assert_eq!(ListSizes::default().block(&[0x80 | 70]), None);
    assert_eq!(ListSizes::default().block(&hex("3fe1 1f")), Some(0)); // 4,096: allowed
    assert_eq!(ListSizes::default().block(&hex("3fe2 1f")), None); // 4,097
    assert_eq!(ListSizes::default().block(&hex("0085 6162")), None);
    // eviction: a 4,000-byte entry, then another: the first is gone, its index is the second's
    let mut sizes = ListSizes::default();
    let mut insert = vec![
        0x40,
        1,
        b'a',
        0x7f,
        0x80 | ((3900 - 127) % 128) as u8,
        ((3900 - 127) / 128) as u8,
    ];
    insert.extend_from_slice(&[b'v'; 3900]);
    assert_eq!(sizes.block(&insert), Some(1 + 3900 + 32));
    insert[2] = b'b';
    assert_eq!(
        sizes.block(&[insert.clone(), vec![0xbe]].concat()),
        Some(2 * (1 + 3900 + 32))
    );
    assert_eq!(sizes.block(&[0xbf]), None); // index 63: evicted
}

#[test]
fn resets_past_the_budget_cut_the_connection_at_the_first_one_over() {
    let rst = frame(0x3, 0, 1, &[0, 0, 0, 8]);
    let bytes = rst.repeat(MAX_RESETS as usize + 5);
    let mut frames = Frames::default();
    assert_eq!(
        cut_of(&mut frames, &bytes, 0),
        Some(MAX_RESETS as usize * rst.len())
    );
    // half the streams answered are the client's due
    let mut frames = Frames::default();
    assert_eq!(cut_of(&mut frames, &bytes, 10), None);
    assert_eq!(frames.resets, MAX_RESETS + 5);
}

#[test]
fn control_frames_past_the_budget_cut_the_connection_acks_and_window_updates_do_not_count() {
    for kind in [
        frame(0x6, 0, 0, &[0; 8]),  // PING
        frame(0x4, 0, 0, &[]),      // SETTINGS
        frame(0x2, 0, 1, &[0; 5]),  // PRIORITY
        frame(0x0, 0, 1, &[]),      // empty DATA
        frame(0xfa, 0, 0, b"what"), // unknown
    ] {
        let bytes = kind.repeat(MAX_CONTROL as usize + 1);
        let mut frames = Frames::default();
        assert_eq!(
            cut_of(&mut frames, &bytes, 0),
            Some(MAX_CONTROL as usize * kind.len()),
            "{kind:?}"
        );
    }
    for free in [
        frame(0x6, 0x1, 0, &[0; 8]),     // PING ACK
        frame(0x4, 0x1, 0, &[]),         // SETTINGS ACK
        frame(0x8, 0, 0, &[0, 0, 1, 0]), // WINDOW_UPDATE
        frame(0x0, 0x1, 1, &[]),         // empty DATA ending a stream
    ] {
        let bytes = free.repeat(MAX_CONTROL as usize * 2);
        let mut frames = Frames::default();
        assert_eq!(cut_of(&mut frames, &bytes, 0), None, "{free:?}");
        assert_eq!(frames.control, 0);
    }
}

#[test]
fn a_header_block_past_its_bound_is_cut_at_the_continuation_that_passes_it() {
    let headers = frame(0x1, 0, 1, &request_block()); // no END_HEADERS
    let piece = frame(0x9, 0, 1, &vec![0u8; 16384]);
    let mut bytes = headers.clone();
    let fits = (MAX_HEADER_BLOCK - request_block().len()) / 16384;
    for _ in 0..fits + 2 {
        bytes.extend_from_slice(&piece);
    }
    let mut frames = Frames::default();
    assert_eq!(
        cut_of(&mut frames, &bytes, 0),
        Some(headers.len() + fits * piece.len())
    );
    // a block just within the bound passes (here: padding, which counts as sent)
    let mut frames = Frames::default();
    let mut padded = vec![255u8];
    padded.extend_from_slice(&request_block());
    padded.extend_from_slice(&[0u8; 255]);
    assert_eq!(
        cut_of(&mut frames, &frame(0x1, 0x4 | 0x8, 1, &padded), 0),
        None
    );
}

#[test]
fn an_hpack_bomb_is_cut_at_the_block_that_decodes_past_the_list_bound() {
    // a 4,000-byte field into the dynamic table, then referenced by one byte each time
    let mut insert = vec![0x40, 6];
    insert.extend_from_slice(b"x-bomb");
    insert.extend_from_slice(&[
        0x7f,
        0x80 | ((4000 - 127) % 128) as u8,
        ((4000 - 127) / 128) as u8,
    ]);
    insert.extend_from_slice(&[b'v'; 4000]);
    let within = 64 * 1024 / (4000 + 6 + 32) - 1; // references the list bound allows
    let mut ok = request_block();
    ok.extend_from_slice(&insert);
    ok.extend(std::iter::repeat_n(0xbe, within - 1));
    let mut frames = Frames::default();
    assert_eq!(cut_of(&mut frames, &frame(0x1, 0x5, 1, &ok), 0), None);
    let mut bomb = request_block();
    bomb.extend_from_slice(&insert);
    bomb.extend(std::iter::repeat_n(0xbe, within + 1));
    let mut frames = Frames::default();
    let bytes = [frame(0x6, 0, 0, &[0; 8]), frame(0x1, 0x5, 3, &bomb)].concat();
    assert_eq!(cut_of(&mut frames, &bytes, 0), Some(17)); // the PING went on
}

#[test]
fn frames_split_anywhere_are_read_as_whole_ones() {
    let rst = frame(0x3, 0, 1, &[0, 0, 0, 8]);
    let mut all = PREFACE.to_vec();
    all.extend(rst.repeat(MAX_RESETS as usize + 1));
    let mut frames = Frames::default();
    let mut cut = None;
    for (i, byte) in all.iter().enumerate() {
        if let Some(n) = frames.scan(std::slice::from_ref(byte), 0, Instant::now()) {
            cut = Some((i, n));
            break;
        }
    }
    // the first byte of the reset past the budget is read, and cut at the start of its read
    // (the last byte of its header: the frame began in an earlier read)
    let over = PREFACE.len() + MAX_RESETS as usize * rst.len();
    assert_eq!(cut, Some((over + 8, 0)));
}

// ---- served through a played agent ----------------------------------------------------------

fn setup() -> (Carrier, u16, Arc<Session>, UnixStream, Arc<ClientConfig>) {
    let (carrier, _, port, session, agent, config) = setup_with_id();
    (carrier, port, session, agent, config)
}

fn setup_with_id() -> (
    Carrier,
    u64,
    u16,
    Arc<Session>,
    UnixStream,
    Arc<ClientConfig>,
) {
    let l = listener(&[b"h2", b"http/1.1"]);
    (l.carrier, l.id, l.port, l.session, l.agent, l.config)
}

/// What the agent is sent until `end` ends it: (stream id, bytes).
async fn agent_reads(agent: &mut UnixStream, end: &[u8]) -> (u32, Vec<u8>) {
    let (mut buf, mut got, mut sid) = (Vec::new(), Vec::new(), 0);
    while !got.ends_with(end) {
        for (typ, _, id, payload) in common::next_frames(agent, &mut buf).await {
            if typ == DATA {
                sid = id;
                got.extend_from_slice(&payload);
            }
        }
    }
    (sid, got)
}

async fn answer(agent: &mut UnixStream, sid: u32, flags: u8, bytes: &[u8]) {
    use tokio::io::AsyncWriteExt;
    let mut out = Vec::new();
    encode(&mut out, DATA, flags, sid, bytes);
    agent.write_all(&out).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_served_as_http11_requests_on_a_kept_proxy_stream_with_trailers() {
    let (carrier, port, _session, mut agent, config) = setup();
    let tls = connect(port, config).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut client, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(conn);

    // a GET: the agent reads HTTP/1.1 with the proxy header, Host from :authority
    let get = Request::get("https://a.test/x?y=1")
        .header("cookie", "a=1")
        .header("cookie", "b=2")
        .body(())
        .unwrap();
    let (response, _) = client.send_request(get, true).unwrap();
    let (sid, got) = agent_reads(&mut agent, b"\r\n\r\n").await;
    assert!(has(&got, b"\"Proto\": \"https\""), "{got:?}");
    assert!(
        has(&got, b"GET /x?y=1 HTTP/1.1\r\nhost: a.test\r\n"),
        "{got:?}"
    );
    assert!(has(&got, b"cookie: a=1; b=2\r\n"), "{got:?}");
    answer(
        &mut agent,
        sid,
        0,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n2\r\nok\r\n0\r\ngrpc-status: 0\r\n\r\n",
    )
    .await;
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(!response.headers().contains_key("transfer-encoding"));
    assert!(!response.headers().contains_key("connection"));
    let mut body = response.into_body();
    let mut got = Vec::new();
    while let Some(data) = body.data().await {
        got.extend_from_slice(&data.unwrap());
    }
    assert_eq!(got, b"ok");
    let trailers = body.trailers().await.unwrap().unwrap();
    assert_eq!(trailers["grpc-status"], "0");

    // a small POST with its length, on the same proxy stream (the virtual connection kept)
    let post = Request::post("https://a.test/up")
        .header("content-length", "5")
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(post, false).unwrap();
    send.send_data(Bytes::from_static(b"hello"), true).unwrap();
    let (again, got) = agent_reads(&mut agent, b"hello").await;
    assert_eq!(again, sid, "a new proxy stream for the second request");
    assert!(has(&got, b"content-length: 5\r\n"), "{got:?}");
    answer(
        &mut agent,
        sid,
        0,
        b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
    )
    .await;
    assert_eq!(response.await.unwrap().status(), 201);

    // a POST without a length: chunked towards the agent (on a fresh proxy stream, as the
    // HTTP/1.1 path sends a body of unknown length), its trailers after the last chunk
    let post = Request::post("https://a.test/up").body(()).unwrap();
    let (response, mut send) = client.send_request(post, false).unwrap();
    send.send_data(Bytes::from_static(b"hello"), false).unwrap();
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-sum", "7".parse().unwrap());
    send.send_trailers(trailers).unwrap();
    let (fresh, got) = agent_reads(&mut agent, b"x-sum: 7\r\n\r\n").await;
    assert_ne!(fresh, sid);
    assert!(has(&got, b"transfer-encoding: chunked\r\n"), "{got:?}");
    assert!(
        has(&got, b"\r\n\r\n5\r\nhello\r\n0\r\nx-sum: 7\r\n\r\n"),
        "{got:?}"
    );
    answer(&mut agent, fresh, FIN, b"HTTP/1.1 204 No Content\r\n\r\n").await;
    assert_eq!(response.await.unwrap().status(), 204);

    // the records: one per stream, over TLS
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut served = Vec::new();
    while served.len() < 3 && Instant::now() < deadline {
        served.extend(carrier.inbox().take().served);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(served.len(), 3);
    assert!(served.iter().all(|s| s.tls && s.route == 7));
    assert_eq!((served[1].status, served[2].status), (201, 204));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_for_another_host_goes_to_python_alone_and_connect_is_refused() {
    let (carrier, port, _session, _agent, config) = setup();
    let tls = connect(port, config).await;
    let (mut client, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(conn);
    let other = Request::get("https://b.test/z").body(()).unwrap();
    let (response, _) = client.send_request(other, true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let handed = loop {
        if let Some(conn) = carrier.inbox().take().conns.pop() {
            break conn;
        }
        assert!(Instant::now() < deadline, "nothing handed to Python");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(handed
        .data
        .starts_with(b"GET /z HTTP/1.1\r\nhost: b.test\r\n"));
    let facts = handed.tls.unwrap();
    assert_eq!(
        (facts.sni.as_str(), facts.alpn),
        ("a.test", Some(b"http/1.1".to_vec()))
    );
    // Python answers over the bridge; the client reads it on its stream
    {
        use tokio::io::AsyncWriteExt;
        let python = std::os::unix::net::UnixStream::from(handed.fd);
        python.set_nonblocking(true).unwrap();
        let mut python = UnixStream::from_std(python).unwrap();
        python
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope")
            .await
            .unwrap();
        let response = response.await.unwrap();
        assert_eq!(response.status(), 404);
    }
    // CONNECT: the contract's 400 on its stream, the connection serves on
    let connect = Request::connect("a.test:443").body(()).unwrap();
    let (response, _) = client.send_request(connect, false).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(response.headers()["ngrok-error-code"], "ERR_NGROK_3002");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_listeners_connections_are_told_goaway_and_end() {
    let (carrier, id, port, _session, _agent, config) = setup_with_id();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tls = connect(port, config).await;
    tls.write_all(&[PREFACE, &frame(0x4, 0, 0, &[])].concat())
        .await
        .unwrap();
    let mut got = vec![0u8; 64];
    let n = tls.read(&mut got).await.unwrap();
    assert!(
        n >= 9 && got[3] == 0x4,
        "no SETTINGS first: {:?}",
        &got[..n]
    );
    assert!(carrier.close(id));
    // a GOAWAY NO_ERROR, then the connection's end
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut rest))
        .await
        .expect("the connection did not end")
        .ok();
    // (h2's graceful GOAWAY: the last stream id, then its code; a PING follows, which this
    // client never answers, so the connection ends at the core's 2 s of closing)
    let goaway = rest
        .windows(4)
        .position(|w| w == [0, 0, 8, 0x7])
        .expect("no GOAWAY");
    let code = &rest[goaway + 9 + 4..goaway + 9 + 8];
    assert_eq!(code, [0, 0, 0, 0], "{rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interim_answer_is_relayed_before_the_final_one() {
    let (_carrier, port, _session, mut agent, config) = setup();
    let tls = connect(port, config).await;
    let (mut client, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(conn);
    let get = Request::get("https://a.test/hints").body(()).unwrap();
    let (mut response, _) = client.send_request(get, true).unwrap();
    let (sid, _) = agent_reads(&mut agent, b"\r\n\r\n").await;
    answer(
        &mut agent,
        sid,
        0,
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    )
    .await;
    let hint = std::future::poll_fn(|cx| response.poll_informational(cx))
        .await
        .expect("no interim answer")
        .unwrap();
    assert_eq!(hint.status(), 103);
    assert_eq!(hint.headers()["link"], "</style.css>; rel=preload");
    assert_eq!(response.await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_whose_head_outgrows_the_first_read_is_relayed_whole() {
    let (_carrier, port, _session, mut agent, config) = setup();
    let tls = connect(port, config).await;
    let (mut client, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(conn);
    let get = Request::get("https://a.test/long").body(()).unwrap();
    let (response, _) = client.send_request(get, true).unwrap();
    let (sid, _) = agent_reads(&mut agent, b"\r\n\r\n").await;
    // a head of ~12 KiB (past the first read, and past the first growth of the buffer),
    // sent in pieces that end mid-field
    let mut head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n".to_vec();
    for i in 0..120 {
        head.extend_from_slice(format!("x-field-{i:03}: {}\r\n", "v".repeat(90)).as_bytes());
    }
    head.extend_from_slice(b"\r\nhello");
    for piece in head.chunks(700) {
        answer(&mut agent, sid, 0, piece).await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers().len(), 121, "every field relayed");
    assert_eq!(response.headers()["x-field-119"], "v".repeat(90));
    let mut body = response.into_body();
    let mut got = Vec::new();
    while let Some(data) = body.data().await {
        got.extend_from_slice(&data.unwrap());
    }
    assert_eq!(got, b"hello");
}
