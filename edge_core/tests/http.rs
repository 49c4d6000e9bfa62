//! The fast path's HTTP/1.1 rules (src/http.rs), each named: what the core carries, what it
//! writes upstream and to the client, and where a body ends.

use edge_core::http::{
    self, carriable, client_head, parse_request, parse_response, upstream_head, Chunks, Framing,
    Parsed, RequestHead, ResponseHead,
};

fn request(raw: &[u8]) -> RequestHead {
    match parse_request(raw) {
        Parsed::Done(head) => head,
        other => panic!("not a request head: {other:?}"),
    }
}

fn response(raw: &[u8]) -> ResponseHead {
    match parse_response(raw) {
        Parsed::Done(head) => head,
        other => panic!("not a response head: {other:?}"),
    }
}

#[test]
fn a_simple_get_is_carried_and_its_host_is_the_name_without_port() {
    let head = request(b"GET /a?b=1 HTTP/1.1\r\nHost: Example.COM:8080\r\nAccept: */*\r\n\r\nrest");
    assert_eq!(head.host, "example.com");
    assert_eq!(
        head.len,
        b"GET /a?b=1 HTTP/1.1\r\nHost: Example.COM:8080\r\nAccept: */*\r\n\r\n".len()
    );
    assert_eq!(head.framing, Framing::None);
    assert!(!head.close);
    assert!(carriable(&head));
    assert_eq!(http::host_of(b"[::1]:80"), "[::1]");
}

#[test]
fn a_partial_head_waits_and_a_head_past_the_bound_is_not_the_cores() {
    assert_eq!(parse_request(b"GET / HTTP/1.1\r\nHost: a"), Parsed::Partial);
    let mut big = b"GET / HTTP/1.1\r\nHost: a\r\nX: ".to_vec();
    big.resize(http::MAX_HEAD_BYTES + 10, b'x');
    assert!(matches!(parse_request(&big), Parsed::Invalid(_)));
}

#[test]
fn requests_outside_the_fast_paths_rules_go_to_python() {
    let not_carried: &[&[u8]] = &[
        b"GET / HTTP/1.0\r\nHost: a\r\n\r\n",            // HTTP/1.0
        b"GET / HTTP/1.1\r\n\r\n",                       // no Host
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", // two
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", // a coding
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
        b"PROPFIND / HTTP/1.1\r\nHost: a\r\n\r\n", // method
        b"GET /.well-known/acme-challenge/t HTTP/1.1\r\nHost: a\r\n\r\n", // ACME
    ];
    for raw in not_carried {
        assert!(
            !carriable(&request(raw)),
            "{}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[test]
fn a_bad_head_is_never_answered_by_the_core() {
    for raw in [
        &b"GET / HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n"[..],
        b"GET / HTTP/1.1\nHost: a\n\n", // bare LF (llhttp refuses it: Python answers)
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n",
    ] {
        let parsed = parse_request(raw);
        let refused = match &parsed {
            Parsed::Invalid(_) => true,
            Parsed::Done(head) => !carriable(head),
            Parsed::Partial => false,
        };
        assert!(refused, "{}", String::from_utf8_lossy(raw));
    }
}

#[test]
fn connection_close_and_content_length_are_read() {
    let head = request(b"PUT /x HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\nContent-Length: 12\r\n\r\n");
    assert!(head.close);
    assert_eq!(head.framing, Framing::Length(12));
    assert!(carriable(&head));
}

#[test]
fn the_upstream_request_gets_forwarded_headers_and_lower_case_names() {
    let head = request(
        b"GET /p HTTP/1.1\r\nHost: a.example\r\nX-Forwarded-For: 203.0.113.9\r\nX-Forwarded-Proto: https\r\nX-Custom:  v \r\n\r\n",
    );
    let mut out = Vec::new();
    upstream_head(&head, "127.0.0.1", "http", &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "GET /p HTTP/1.1\r\nhost: a.example\r\nx-custom: v\r\n\
         x-forwarded-for: 203.0.113.9, 127.0.0.1\r\nx-forwarded-proto: http\r\n\
         x-forwarded-host: a.example\r\n\r\n"
    );
}

#[test]
fn the_response_keeps_the_upstreams_spelling_and_gets_a_reason_phrase() {
    let resp = response(b"HTTP/1.1 404 \r\nContent-Length: 0\r\nX-Thing: 1\r\n\r\n");
    let mut out = Vec::new();
    let (framing, keep) = client_head(&resp, false, false, &mut out);
    assert_eq!(framing, Framing::Length(0));
    assert!(keep);
    assert_eq!(
        out,
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nX-Thing: 1\r\n\r\n".to_vec()
    );
}

#[test]
fn a_response_delimited_by_close_is_sent_chunked() {
    let resp = response(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n");
    assert!(resp.close); // the agent's stream ends with it
    let mut out = Vec::new();
    let (framing, keep) = client_head(&resp, false, false, &mut out);
    assert_eq!(framing, Framing::Chunked);
    assert!(keep);
    assert!(out.ends_with(b"Transfer-Encoding: chunked\r\n\r\n"));
    let mut body = Vec::new();
    http::chunk(b"hello", &mut body);
    assert_eq!(body, b"5\r\nhello\r\n");
}

#[test]
fn a_request_that_closes_gets_connection_close() {
    let resp = response(b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n");
    let mut out = Vec::new();
    let (_, keep) = client_head(&resp, false, true, &mut out);
    assert!(!keep);
    let text = String::from_utf8(out).unwrap();
    assert!(!text.contains("keep-alive"));
    assert!(text.ends_with("Connection: close\r\n\r\n"));
}

#[test]
fn head_204_and_304_responses_have_no_body() {
    for (raw, head_req) in [
        (&b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"[..], true),
        (b"HTTP/1.1 204 No Content\r\n\r\n", false),
        (
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
            false,
        ),
    ] {
        let mut out = Vec::new();
        assert_eq!(
            client_head(&response(raw), head_req, false, &mut out).0,
            Framing::None
        );
    }
}

#[test]
fn a_response_with_bad_framing_is_a_bad_upstream_response() {
    for raw in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.1 099 Odd\r\n\r\n",
        b"NOT HTTP\r\n\r\n",
    ] {
        assert!(
            matches!(parse_response(raw), Parsed::Invalid(_)),
            "{}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[test]
fn a_chunked_body_ends_after_its_last_chunk_and_trailers_in_any_pieces() {
    let body = b"5;ext=1\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\nNEXT";
    let end = body.len() - 4;
    for split in 1..body.len() {
        let mut chunks = Chunks::default();
        let (a, done_a) = chunks.feed(&body[..split]).unwrap();
        assert_eq!(a, split.min(end));
        if done_a {
            assert!(split >= end);
            continue;
        }
        let (b, done_b) = chunks.feed(&body[split..]).unwrap();
        assert!(done_b);
        assert_eq!(split + b, end);
    }
}

#[test]
fn chunk_framing_past_the_bound_or_malformed_is_refused() {
    let mut chunks = Chunks::default();
    assert!(chunks.feed(b"zz\r\n").is_err());
    let mut chunks = Chunks::default();
    assert!(chunks.feed(b"3\r\nabcX").is_err()); // data longer than its size
    let mut chunks = Chunks::default();
    let endless = vec![b'0'; http::MAX_FRAMING_BYTES + 2];
    assert!(chunks.feed(&endless).is_err());
}

#[test]
fn a_chunked_request_is_the_cores() {
    let req = request(b"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(req.framing, Framing::Chunked);
    assert!(carriable(&req));
}

#[test]
fn chunk_framing_any_reader_could_read_otherwise_is_refused() {
    // each would let a lenient reader (a bare LF taken for a line's end) see another message
    for bad in [
        &b"5;ext\nGET /x HTTP/1.1\r\nhello\r\n0\r\n\r\n"[..], // LF in an extension
        b"5;e\x00\r\nhello\r\n0\r\n\r\n",                     // a control in one
        b"0\r\nX: a\n\nGET /x HTTP/1.1\r\n\r\n",              // LF in a trailer line
        b"0\r\nX: a\r\n folded\r\n\r\n",                      // a folded trailer line
        b"0\r\nno-colon\r\n\r\n",                             // not a field
        b"0\r\n: empty name\r\n\r\n",
    ] {
        let mut chunks = Chunks::default();
        assert!(
            chunks.feed(bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    // tabs in an extension's value and a trailer's are fine
    let mut chunks = Chunks::default();
    let good = b"5;e=\"a\tb\"\r\nhello\r\n0\r\nX-T:\tv\r\n\r\n";
    assert_eq!(chunks.feed(good), Ok((good.len(), true)));
    assert_eq!(chunks.data, 5);
}

#[test]
fn the_proxy_header_is_the_one_python_writes() {
    let header = http::proxy_header("tn_1", "127.0.0.1:5000", "http", "3");
    let json = br#"{"Id": "tn_1", "ClientAddr": "127.0.0.1:5000", "Proto": "http", "EdgeType": "3", "PassthroughTLS": false}"#;
    assert_eq!(&header[..4], &3u32.to_be_bytes());
    assert_eq!(&header[4..12], &(json.len() as i64).to_le_bytes());
    assert_eq!(&header[12..], &json[..]);
    assert_eq!(http::json_str("a\"é"), "\"a\\\"\\u00e9\"");
}

/// A WebSocket upgrade of RFC 6455's example, with `extra` fields and `method`.
fn upgrade(method: &str, extra: &str) -> RequestHead {
    request(
        format!(
            "{method} /ws HTTP/1.1\r\nHost: a.example\r\nUpgrade: websocket\r\n\
             Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\n{extra}\r\n"
        )
        .as_bytes(),
    )
}

#[test]
fn a_websocket_upgrade_gets_rfc_6455s_accept_and_nothing_else_does() {
    let head = upgrade("GET", "");
    assert!(head.upgrade && !carriable(&head));
    assert!(http::carriable_by_converter(&head));
    assert_eq!(
        http::websocket_accept(&head).as_deref(),
        Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=") // RFC 6455, section 1.3
    );
    assert_eq!(http::websocket_accept(&upgrade("POST", "")), None);
    for (from, to) in [
        ("Upgrade: websocket", "Upgrade: h2c"),
        ("keep-alive, Upgrade", "keep-alive"),
        ("Version: 13", "Version: 8"),
        ("Key: dGhlIHNhbXBsZSBub25jZQ==", "Key: "),
    ] {
        let raw = String::from_utf8(
            b"GET /ws HTTP/1.1\r\nHost: a.example\r\nUpgrade: websocket\r\n\
              Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
              Sec-WebSocket-Version: 13\r\n\r\n"
                .to_vec(),
        )
        .unwrap()
        .replace(from, to);
        assert_eq!(
            http::websocket_accept(&request(raw.as_bytes())),
            None,
            "{to}"
        );
    }
    // a plain request is the converter's to refuse (400), as carriable says
    let plain = request(b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n");
    assert!(!plain.upgrade && http::carriable_by_converter(&plain));
}

#[test]
fn an_upgrade_with_a_body_or_odd_framing_is_not_the_converters() {
    assert!(http::carriable_by_converter(&upgrade(
        "GET",
        "Content-Length: 0\r\n"
    )));
    assert!(!http::carriable_by_converter(&upgrade(
        "GET",
        "Content-Length: 1\r\n"
    )));
    assert!(!http::carriable_by_converter(&upgrade(
        "GET",
        "Transfer-Encoding: chunked\r\n"
    )));
    let upgrade_only = request(b"GET / HTTP/1.1\r\nHost: a.example\r\nUpgrade: websocket\r\n\r\n");
    assert!(!upgrade_only.upgrade, "no Connection: upgrade");
    assert!(!http::carriable_by_converter(&upgrade_only));
}

#[test]
fn a_101_switches_only_when_it_says_upgrade_and_connection_upgrade() {
    let both = response(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\r\n");
    assert!(http::switches(&both));
    let no_connection = response(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n");
    assert!(!http::switches(&no_connection));
    let no_upgrade = response(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n\r\n");
    assert!(!http::switches(&no_upgrade));
}

#[test]
fn an_answer_to_an_upgrade_is_made_to_say_it_closes() {
    let open = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n";
    let closed = http::closing(open);
    assert!(
        closed.ends_with(b"\r\nConnection: close\r\n\r\n"),
        "{:?}",
        String::from_utf8_lossy(&closed)
    );
    assert!(!String::from_utf8_lossy(&closed).contains("keep-alive"));
    let said = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nconnection: close\r\n\r\n";
    assert_eq!(
        http::closing(said),
        said.to_vec(),
        "already said: unchanged"
    );
}
