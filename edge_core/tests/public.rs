//! The public plain-HTTP listener (src/public.rs) as the edge uses it: a client over TCP, an
//! agent session over a Unix socket pair played by the test (muxado frames in the clear).

use std::sync::Arc;

use std::time::{Duration, Instant};

use edge_core::carrier::{Carrier, Where};
use edge_core::mux::{encode, DATA, FIN};
use edge_core::public::{PublicListen, Route};
use edge_core::session::Session;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

mod common;
use common::has;

fn spec(max_per_address: usize) -> PublicListen {
    PublicListen {
        scheme: "http".into(),
        handshake_timeout: Duration::from_secs(5),
        head_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
        body_timeout: Duration::from_secs(5),
        fresh_stream_body: 4096,
        max_total: 100,
        max_per_address,
        h2_stall_timeout: Duration::from_secs(2),
    }
}

/// A carrier with a public listener, and an agent session whose other end the test holds.
fn setup(max_per_address: usize) -> (Carrier, u16, Arc<Session>, UnixStream) {
    let carrier = Carrier::new(1).unwrap();
    let (_, local) = carrier
        .listen_public(Where::Bind("127.0.0.1".into(), 0), spec(max_per_address))
        .unwrap();
    let (session, agent) = common::agent_session(&carrier);
    (carrier, local.port(), session, agent)
}

/// What the agent got on one stream until `done` says it is whole: (stream id, bytes).
async fn agent_reads(agent: &mut UnixStream, done: impl Fn(&[u8]) -> bool) -> (u32, Vec<u8>) {
    let (mut buf, mut got, mut sid) = (Vec::new(), Vec::new(), 0);
    while !done(&got) {
        for (typ, _, id, payload) in common::next_frames(agent, &mut buf).await {
            if typ == DATA {
                sid = id;
                got.extend_from_slice(&payload);
            }
        }
    }
    (sid, got)
}

async fn read_response(client: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 16384];
    while !got.ends_with(end) {
        let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut chunk))
            .await
            .expect("no response")
            .unwrap();
        assert!(
            n > 0,
            "closed before the response's end: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&chunk[..n]);
    }
    got
}

/// The connections handed to Python, once there is one (within 5 s).
async fn handed(carrier: &Carrier) -> Vec<edge_core::public::Handed> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut conns = Vec::new();
    while conns.is_empty() && Instant::now() < deadline {
        conns.extend(carrier.inbox().take().conns);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    conns
}

/// A relay connection to the relay listener at `local` that sent `sent` (its line and a
/// request head) and got HERE.
async fn relayed_here(local: std::net::SocketAddr, sent: &[u8]) -> TcpStream {
    let mut relay = TcpStream::connect(local).await.unwrap();
    relay.write_all(sent).await.unwrap();
    let mut here = [0u8; 6];
    relay.read_exact(&mut here).await.unwrap();
    assert_eq!(&here, b"HERE\r\n");
    relay
}

fn route(session: &Arc<Session>) -> Route {
    Route {
        key: 7,
        session: Some(session.clone()),
        tunnel_id: "tn_test".into(),
        cert: 0,
        spec: 0,
        h2_upstream: None,
        capture: 0,
        ws_tcp: false,
        proxy: None,
        until: Instant::now() + Duration::from_secs(60),
        decided: false,
        responses: false,
        held: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_routes_request_is_served_on_a_stream_with_the_proxy_header_and_recorded() {
    let (carrier, port, session, mut agent) = setup(16);
    carrier.routes.set("a.test".into(), route(&session));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let client_addr = client.local_addr().unwrap().to_string();
    client
        .write_all(b"POST /x HTTP/1.1\r\nHost: A.test:80\r\nContent-Length: 4\r\n\r\nbody")
        .await
        .unwrap();
    let (sid, got) = agent_reads(&mut agent, |g| g.ends_with(b"body")).await;
    assert_eq!(sid % 2, 0, "a stream of the edge's");
    let json = format!(
        "{{\"Id\": \"tn_test\", \"ClientAddr\": \"{client_addr}\", \"Proto\": \"http\", \"EdgeType\": \"3\", \"PassthroughTLS\": false}}"
    );
    assert_eq!(&got[12..12 + json.len()], json.as_bytes());
    let request = &got[12 + json.len()..];
    assert!(request.starts_with(b"POST /x HTTP/1.1\r\nhost: A.test:80\r\ncontent-length: 4\r\n"));
    assert!(has(request, b"x-forwarded-for: 127.0.0.1\r\nx-forwarded-proto: http\r\nx-forwarded-host: A.test:80\r\n\r\nbody"));
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
    );
    agent.write_all(&answer).await.unwrap();
    let response = read_response(&mut client, b"ok").await;
    assert_eq!(
        response,
        b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"
    );

    // the same connection, the same stream: the next request goes on it (keep-alive), its
    // route renewed (pushed again) meanwhile
    carrier.routes.set("a.test".into(), route(&session));
    client
        .write_all(b"GET /y HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    let (again, got) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
    assert_eq!(again, sid);
    assert!(got.starts_with(b"GET /y HTTP/1.1\r\n"));
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
    );
    agent.write_all(&answer).await.unwrap();
    read_response(&mut client, b"0\r\n\r\n").await;

    let deadline = Instant::now() + Duration::from_secs(5);
    let mut served = Vec::new();
    while served.len() < 2 && Instant::now() < deadline {
        served.extend(carrier.inbox().take().served);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(served.len(), 2);
    assert_eq!(
        (
            served[0].route,
            served[0].status,
            served[0].bytes_in,
            served[0].bytes_out
        ),
        (7, 201, 4, 2)
    );
    assert_eq!((served[1].status, served[1].bytes_out), (200, 2)); // body bytes, not framing
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_ends_the_stream_before_answering_gets_the_contracts_502() {
    let (carrier, port, session, mut agent) = setup(16);
    carrier.routes.set("a.test".into(), route(&session));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    let (sid, _) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
    let mut fin = Vec::new();
    encode(&mut fin, DATA, FIN, sid, b"");
    agent.write_all(&fin).await.unwrap();
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    assert!(got.starts_with(b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\n"));
    assert!(has(&got, b"\"error_code\": \"ERR_NGROK_8012\""));
    assert!(has(&got, b"connection: close\r\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_a_route_goes_to_python_with_the_bytes_read() {
    let (carrier, port, _session, _agent) = setup(16);
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let head = b"GET /z HTTP/1.1\r\nHost: nobody.test\r\n\r\n";
    client.write_all(head).await.unwrap();
    let mut conns = handed(&carrier).await;
    assert_eq!(conns.len(), 1);
    assert_eq!(conns[0].data, head.to_vec());
    assert!(conns[0].first);
    // the socket is Python's now: what it writes reaches the client
    let std = std::net::TcpStream::from(conns.pop().unwrap().fd);
    std::io::Write::write_all(&mut &std, b"HTTP/1.1 404 Not Found\r\n\r\n").unwrap();
    drop(std);
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"HTTP/1.1 404 Not Found\r\n\r\n");
}

/// A cluster's relayed connection handed in (`Carrier::adopt`): served as one accepted from
/// the original client (the proxy header and X-Forwarded-For name it, the bytes read before
/// first), and a request the core does not serve handed back under the adopting listener's
/// id with that client's address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_connection_is_served_as_the_original_clients_and_handed_back_as_it() {
    let (carrier, _, session, mut agent) = setup(16);
    let adopter = carrier.adopter(spec(16));
    carrier.routes.set("a.test".into(), route(&session));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut relay = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (accepted, _) = listener.accept().await.unwrap();
    let client: std::net::SocketAddr = "10.1.2.3:4567".parse().unwrap();
    let fd = std::os::fd::OwnedFd::from(accepted.into_std().unwrap());
    let taken = carrier
        .adopt(adopter, fd, client, b"GET /r HTTP/1.1\r\nHo".to_vec())
        .unwrap();
    assert!(taken);
    relay.write_all(b"st: a.test\r\n\r\n").await.unwrap();
    let (sid, got) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
    assert!(has(&got, b"\"ClientAddr\": \"10.1.2.3:4567\""));
    assert!(has(&got, b"GET /r HTTP/1.1\r\nhost: a.test\r\n"));
    assert!(has(&got, b"x-forwarded-for: 10.1.2.3\r\n"));
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    );
    agent.write_all(&answer).await.unwrap();
    read_response(&mut relay, b"ok").await;

    let head = b"GET /z HTTP/1.1\r\nHost: nobody.test\r\n\r\n";
    relay.write_all(head).await.unwrap();
    let mut conns = handed(&carrier).await;
    assert_eq!(conns.len(), 1);
    assert_eq!(
        (
            conns[0].listener,
            conns[0].peer,
            &conns[0].data[..],
            conns[0].first
        ),
        (adopter, client, &head[..], false)
    );
    assert!(!carrier
        .adopt(999, conns.pop().unwrap().fd, client, Vec::new())
        .unwrap());
}

/// A relay route (relay.rs): a new connection whose first request names the host is carried
/// to the holder once it answers HERE (the line with the client's address first, the bytes
/// read next, both ways after); any other answer hands the connection to Python with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_routes_connection_goes_to_the_holder_that_answers_here_else_to_python() {
    let (carrier, port, _session, _agent) = setup(16);
    let holder = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_to = |until: Instant| edge_core::relay::RelayTo {
        address: holder.local_addr().unwrap().to_string(),
        line: b"NGRELAY1 s3cret http b.test".to_vec(),
        cert: 0,
        until,
    };
    carrier.relays.set(
        "b.test".into(),
        relay_to(Instant::now() + Duration::from_secs(60)),
    );
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let client_addr = client.local_addr().unwrap();
    let head = b"GET /r HTTP/1.1\r\nHost: b.test\r\n\r\n";
    client.write_all(head).await.unwrap();
    let (mut up, _) = holder.accept().await.unwrap();
    let line = format!(
        "NGRELAY1 s3cret http b.test {} {}\r\n",
        client_addr.ip(),
        client_addr.port()
    );
    let mut got = vec![0u8; line.len()];
    up.read_exact(&mut got).await.unwrap();
    assert_eq!(got, line.as_bytes());
    up.write_all(b"HERE\r\nHTTP/1.1 200 OK\r\n").await.unwrap();
    let mut got = vec![0u8; head.len()];
    up.read_exact(&mut got).await.unwrap();
    assert_eq!(got, head.to_vec());
    up.write_all(b"Content-Length: 2\r\n\r\nok").await.unwrap();
    read_response(&mut client, b"ok").await;
    drop(up);
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap(); // the holder's end is the client's
    assert_eq!(
        carrier
            .public_counters
            .relayed
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );

    // MOVED: Python's, with the bytes read
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client.write_all(head).await.unwrap();
    let (mut up, _) = holder.accept().await.unwrap();
    let mut line = [0u8; 16];
    let _ = up.read(&mut line).await.unwrap();
    up.write_all(b"MOVED\r\n").await.unwrap();
    let conns = handed(&carrier).await;
    assert_eq!(conns.len(), 1);
    assert_eq!(conns[0].data, head.to_vec());
    assert_eq!(
        carrier
            .public_counters
            .relays_refused
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert!(carrier.relays.get("b.test").is_none()); // Python's until it pushes it anew

    // an expired relay route: Python's at once, nobody connected to
    carrier
        .relays
        .set("b.test".into(), relay_to(Instant::now()));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client.write_all(head).await.unwrap();
    let conns = handed(&carrier).await;
    assert_eq!(conns.len(), 1);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), holder.accept())
            .await
            .is_err()
    );
}

/// What a relay line asks the core (relay.rs `served_here`): six words, the preamble, the
/// secret (compared whole), kind http, an address that parses; anything else is Python's.
#[test]
fn a_relay_line_is_the_cores_only_when_whole_and_right() {
    use edge_core::relay::served_here;
    let client: std::net::SocketAddr = "203.0.113.9:4444".parse().unwrap();
    assert_eq!(
        served_here(b"NGRELAY1 s3cret http A.test 203.0.113.9 4444", b"s3cret"),
        Some((false, "a.test".to_string(), client))
    );
    assert_eq!(
        served_here(b"NGRELAY1 s3cret https s.test 203.0.113.9 4444", b"s3cret"),
        Some((true, "s.test".to_string(), client))
    );
    for line in [
        &b"NGRELAY1 s3creT http a.test 203.0.113.9 4444"[..],
        b"NGRELAY1 s3cre http a.test 203.0.113.9 4444",
        b"NGRELAY1 s3cret h2 a.test 203.0.113.9 4444",
        b"NGRELAY1 s3cret tcp 80 203.0.113.9 4444",
        b"NGRELAY2 s3cret http a.test 203.0.113.9 4444",
        b"NGRELAY1 s3cret http a.test - 0",
        b"NGRELAY1 s3cret http a.test 203.0.113.9 70000",
        b"NGRELAY1 s3cret http a.test 203.0.113.9",
        b"NGRELAY1 s3cret http a.test 203.0.113.9 4444 more",
        b"GET / HTTP/1.1",
    ] {
        assert_eq!(
            served_here(line, b"s3cret"),
            None,
            "{}",
            String::from_utf8_lossy(line)
        );
    }
}

/// The relay listener in the core: a right line for a host with a plain route gets HERE and
/// the connection is served as the line's client's; a wrong one goes to Python with every
/// byte read; no whole line in time: closed, nothing answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_listener_serves_a_right_line_and_hands_python_the_rest() {
    let (carrier, _, session, mut agent) = setup(16);
    let adopter = carrier.adopter(spec(16));
    let tls_adopter = carrier.adopter(PublicListen {
        scheme: "https".into(),
        ..spec(16)
    });
    carrier.routes.set("a.test".into(), route(&session));
    carrier.tls_routes.set("s.test".into(), route(&session));
    let (relay_id, local) = carrier
        .listen_relay(
            Where::Bind("127.0.0.1".into(), 0),
            b"s3cret".to_vec(),
            Duration::from_millis(300),
            adopter,
            tls_adopter,
        )
        .unwrap();
    // the decrypted stream of an HTTPS connection another instance terminated: served by
    // the HTTPS listener's routes, as HTTPS
    let mut relay = relayed_here(
        local,
        b"NGRELAY1 s3cret https s.test 10.1.2.3 4567\r\nGET /s HTTP/1.1\r\nHost: s.test\r\n\r\n",
    )
    .await;
    let (sid, got) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
    assert!(has(&got, b"\"Proto\": \"https\""));
    assert!(has(&got, b"x-forwarded-proto: https\r\n"));
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    );
    agent.write_all(&answer).await.unwrap();
    read_response(&mut relay, b"ok").await;
    // an http line for the HTTPS listener's host (no plain-HTTP route): Python's
    let line = b"NGRELAY1 s3cret http s.test 10.1.2.3 4567\r\n";
    let mut other = TcpStream::connect(local).await.unwrap();
    other.write_all(line).await.unwrap();
    let conns = handed(&carrier).await;
    assert_eq!((conns.len(), &conns[0].data[..]), (1, &line[..]));

    let mut relay = relayed_here(
        local,
        b"NGRELAY1 s3cret http a.test 10.1.2.3 4567\r\nGET /r HTTP/1.1\r\nHost: a.test\r\n\r\n",
    )
    .await;
    let (sid, got) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
    assert!(has(&got, b"\"ClientAddr\": \"10.1.2.3:4567\""));
    assert!(has(&got, b"x-forwarded-for: 10.1.2.3\r\n"));
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    );
    agent.write_all(&answer).await.unwrap();
    read_response(&mut relay, b"ok").await;

    let wrong = b"NGRELAY1 wrong http a.test 10.1.2.3 4567\r\nGET / HTTP/1.1\r\n";
    let mut other = TcpStream::connect(local).await.unwrap();
    other.write_all(wrong).await.unwrap();
    let conns = handed(&carrier).await;
    assert_eq!(conns.len(), 1);
    assert_eq!(
        (conns[0].listener, &conns[0].data[..]),
        (relay_id, &wrong[..])
    );

    let mut silent = TcpStream::connect(local).await.unwrap();
    silent.write_all(b"NGRELAY1 s3cret http").await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut rest))
        .await
        .expect("a line that never ends was held")
        .unwrap();
    assert!(rest.is_empty());
    assert!(carrier.inbox().take().conns.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_per_address_cap_the_oldest_waiting_connection_makes_room() {
    let (carrier, port, _session, _agent) = setup(2);
    let mut oldest = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let _second = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while carrier.public_held() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _third = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut sink = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), oldest.read(&mut sink))
        .await
        .expect("the oldest waiting connection was not closed")
        .unwrap_or(0);
    assert_eq!(n, 0);
    assert_eq!(
        carrier
            .public_counters
            .evicted
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

fn served_on(route: u64, status: u16, duration: f64) -> edge_core::public::Served {
    edge_core::public::Served {
        route,
        tls: false,
        peer: "127.0.0.1:1".parse().unwrap(),
        local: "127.0.0.1:2".parse().unwrap(),
        request_head: Vec::new(),
        status,
        response_head: Vec::new(),
        bytes_in: 3,
        bytes_out: 5,
        started: 0.0,
        duration,
        memo: None,
        held: false,
        request_body: Vec::new(),
        response_body: Vec::new(),
        request_ended: true,
        captured: false,
    }
}

/// The routes' tallies taken (what held decisions served left out).
fn tallied(tallies: &edge_core::public::Tallies) -> Vec<(u64, edge_core::public::RouteTally)> {
    tallies.take().into_iter().map(|(k, t, _)| (k, t)).collect()
}

#[test]
fn a_quiet_routes_requests_are_counted_not_handed_over_until_it_is_loud_again() {
    use edge_core::public::{RouteTally, Tallies, TALLY_MAX};
    let tallies = Tallies::default();
    assert!(!tallies.count(&served_on(1, 200, 0.1)), "not quiet: a row");
    tallies.set_quiet(1, true);
    assert!(tallies.count(&served_on(1, 200, 0.1)));
    assert!(tallies.count(&served_on(1, 502, 0.3)));
    assert!(tallies.count(&served_on(1, 200, 0.2)));
    assert!(
        !tallies.count(&served_on(2, 200, 0.1)),
        "another route: a row"
    );
    assert_eq!(tallies.quiet_count(), 1);
    let expected = RouteTally {
        statuses: vec![(200, 2), (502, 1)],
        durations: vec![0.1, 0.3, 0.2],
        bytes_in: 9,
        bytes_out: 15,
    };
    assert_eq!(tallied(&tallies), vec![(1, expected)]);
    assert_eq!(
        tallied(&tallies),
        vec![],
        "taken once; the route stays quiet"
    );
    assert_eq!(tallies.quiet_count(), 1);
    // made loud: rows again, and what it counted before is still taken once
    assert!(tallies.count(&served_on(1, 204, 0.5)));
    tallies.set_quiet(1, false);
    assert!(!tallies.count(&served_on(1, 200, 0.1)));
    assert_eq!(tallies.quiet_count(), 0);
    assert_eq!(tallies.take().len(), 1);
    assert_eq!(tallied(&tallies), vec![]);
    // at most TALLY_MAX between two takes: rows past it
    tallies.set_quiet(3, true);
    for _ in 0..TALLY_MAX {
        assert!(tallies.count(&served_on(3, 200, 0.0)));
    }
    assert!(!tallies.count(&served_on(3, 200, 0.0)));
    assert_eq!(tallies.take()[0].1.durations.len(), TALLY_MAX);
    assert!(tallies.count(&served_on(3, 200, 0.0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_request_passes_through_and_the_next_request_follows_it() {
    let (carrier, port, session, mut agent) = setup(16);
    carrier.routes.set("a.test".into(), route(&session));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(
            b"POST /c HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await; // the body's end in a later read
    client
        .write_all(b"lo\r\n0\r\nX-T: 1\r\n\r\nGET /n HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    let (sid, got) = agent_reads(&mut agent, |g| g.ends_with(b"X-T: 1\r\n\r\n")).await;
    let request = &got[got.windows(4).position(|w| w == b"POST").unwrap()..];
    assert!(
        request.starts_with(b"POST /c HTTP/1.1\r\nhost: a.test\r\ntransfer-encoding: chunked\r\n")
    );
    assert!(
        request.ends_with(b"\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"),
        "passed unchanged"
    );
    assert!(
        !has(request, b"GET /n"),
        "the next request waits for this one's answer"
    );
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    );
    agent.write_all(&answer).await.unwrap();
    read_response(&mut client, b"ok").await;
    let (_, next) = agent_reads(&mut agent, |g| has(g, b"GET /n HTTP/1.1\r\n")).await;
    assert!(has(&next, b"GET /n HTTP/1.1\r\n"));
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut served = Vec::new();
    while served.is_empty() && Instant::now() < deadline {
        served.extend(carrier.inbox().take().served);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        (served[0].status, served[0].bytes_in),
        (200, 5),
        "its data bytes, not framing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_request_with_bad_framing_is_closed() {
    let (carrier, port, session, _agent) = setup(16);
    carrier.routes.set("a.test".into(), route(&session));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(
            b"POST /c HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: a\n\nGET /smuggled HTTP/1.1\r\n\r\n",
        )
        .await
        .unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest))
        .await
        .expect("not closed");
    assert!(
        read.is_err() || rest.is_empty(),
        "closed without an answer, as Python closes"
    );
}

/// The decided route's request waiting in the inbox (decide.rs); the records taken meanwhile
/// are kept in `served`.
async fn asked_keeping(
    carrier: &Carrier,
    served: &mut Vec<edge_core::public::Served>,
) -> edge_core::decide::Asked {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut taken = carrier.inbox().take();
        served.append(&mut taken.served);
        if let Some(a) = taken.asked.pop() {
            return a;
        }
        assert!(Instant::now() < deadline, "no request asked for a decision");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn a_connection_remembers_the_routes_it_asked_about_within_a_bound() {
    use edge_core::decide::{first_ask, CONNECTED_ROUTES};
    let mut seen = Vec::new();
    assert!(first_ask(&mut seen, 1) && !first_ask(&mut seen, 1));
    for key in 2..=CONNECTED_ROUTES as u64 {
        assert!(first_ask(&mut seen, key));
    }
    assert!(!first_ask(&mut seen, 1) && seen.len() == CONNECTED_ROUTES);
    // one more route: the rest forgotten (each fresh again), never more than the bound kept
    assert!(first_ask(&mut seen, 100) && seen.len() == 1);
    assert!(first_ask(&mut seen, 1));
}

async fn asked(carrier: &Carrier) -> edge_core::decide::Asked {
    asked_keeping(carrier, &mut Vec::new()).await
}

/// The test's route, decided by Python per request (and per response head with `responses`).
fn decided_route(session: &Arc<Session>, responses: bool) -> Route {
    Route {
        decided: true,
        responses,
        ..route(session)
    }
}

fn decided(decision: edge_core::decide::Decision) -> edge_core::decide::Decided {
    edge_core::decide::Decided {
        decision,
        memo: Some(std::sync::Arc::new(42u32)),
        hold: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decided_routes_request_is_carried_as_python_decided_each_time() {
    use edge_core::decide::Decision;
    let (carrier, port, session, mut agent) = setup(16);
    carrier
        .routes
        .set("d.test".into(), decided_route(&session, false));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(b"POST /x HTTP/1.1\r\nHost: d.test\r\nContent-Length: 4\r\nX-A: 1\r\n\r\nbody")
        .await
        .unwrap();
    // the head, not the body, goes to Python; the agent hears nothing before the decision
    let row = asked(&carrier).await;
    assert_eq!((row.route, row.head.method.as_slice()), (7, &b"POST"[..]));
    assert_eq!(row.head.target, b"/x");
    assert!(row.head.fields.contains(&(b"x-a".to_vec(), b"1".to_vec())));
    assert!(!row.bodiless() && row.tls.is_none());
    assert!(row.fresh, "the connection's first request of the route");
    assert_eq!(carrier.decisions.len(), 1);
    let head = b"POST /y HTTP/1.1\r\nhost: d.test\r\ncontent-length: 4\r\nx-b: 2\r\n\r\n";
    assert!(carrier.decisions.answer(
        row.ticket,
        decided(Decision::Forward {
            head: head.to_vec(),
            body: None,
        })
    ));
    assert!(
        !carrier
            .decisions
            .answer(row.ticket, decided(Decision::Close)),
        "one decision per ticket"
    );
    let mut served = Vec::new();
    let (sid, got) = agent_reads(&mut agent, |g| g.ends_with(b"body")).await;
    assert!(
        has(&got, &[&head[..], b"body"].concat()),
        "Python's head, the client's body"
    );
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    );
    agent.write_all(&answer).await.unwrap();
    read_response(&mut client, b"ok").await;

    // the next request on the connection is answered by Python's response, without the agent
    client
        .write_all(b"GET /deny HTTP/1.1\r\nHost: d.test\r\n\r\n")
        .await
        .unwrap();
    let row = asked_keeping(&carrier, &mut served).await;
    assert!(row.bodiless());
    assert!(!row.fresh, "the connection asked about the route before");
    let response = b"HTTP/1.1 403 Forbidden\r\ncontent-length: 2\r\n\r\n".to_vec();
    // queued as Python queues its batch's decisions: nothing is sent before the flush
    carrier.decisions.queue(
        row.ticket,
        decided(Decision::Respond {
            status: 403,
            head: response.clone(),
            body: b"no".to_vec(),
            close: false,
        }),
    );
    let mut early = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(100), client.read(&mut early))
            .await
            .is_err(),
        "answered before the flush"
    );
    carrier.flush_decisions();
    let got = read_response(&mut client, b"no").await;
    assert_eq!(got, [&response[..], b"no"].concat());

    // and the next one is handed to Python with its bytes: the route changed meanwhile
    let third = b"GET /z HTTP/1.1\r\nHost: d.test\r\n\r\n";
    client.write_all(third).await.unwrap();
    let row = asked_keeping(&carrier, &mut served).await;
    carrier
        .decisions
        .answer(row.ticket, decided(Decision::Python));
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut conns = Vec::new();
    while (conns.is_empty() || served.len() < 2) && Instant::now() < deadline {
        let taken = carrier.inbox().take();
        conns.extend(taken.conns);
        served.extend(taken.served);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(conns.len(), 1);
    assert_eq!(
        (conns[0].data.as_slice(), conns[0].first),
        (&third[..], false)
    );
    // both exchanges recorded, each with the memo its decision carried
    assert_eq!(
        served.iter().map(|s| s.status).collect::<Vec<_>>(),
        vec![200, 403]
    );
    for s in &served {
        let memo = s.memo.as_ref().expect("the decision's memo");
        assert_eq!(memo.downcast_ref::<u32>(), Some(&42));
    }
    assert_eq!(
        (served[1].response_head.clone(), served[1].bytes_out),
        (response, 2)
    );
    assert_eq!(carrier.decisions.len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_to_a_request_with_a_body_or_a_close_decision_ends_the_connection() {
    use edge_core::decide::Decision;
    let (carrier, port, session, _agent) = setup(16);
    carrier
        .routes
        .set("d.test".into(), decided_route(&session, false));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(b"POST /deny HTTP/1.1\r\nHost: d.test\r\nContent-Length: 2\r\n\r\nhi")
        .await
        .unwrap();
    let row = asked(&carrier).await;
    carrier.decisions.answer(
        row.ticket,
        decided(Decision::Respond {
            status: 403,
            head: b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n".to_vec(),
            body: Vec::new(),
            close: false,
        }),
    );
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n");

    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(b"GET /close HTTP/1.1\r\nHost: d.test\r\n\r\n")
        .await
        .unwrap();
    let row = asked(&carrier).await;
    carrier
        .decisions
        .answer(row.ticket, decided(Decision::Close));
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    assert!(got.is_empty(), "closed without an answer");
}

#[tokio::test]
async fn a_wait_that_ends_leaves_no_ticket_and_a_late_decision_is_refused() {
    use edge_core::decide::{Decision, Decisions};
    let decisions = Decisions::default();
    let (first, waiting) = decisions.ticket();
    let (second, other) = decisions.ticket();
    assert_ne!(first, second);
    assert_eq!(decisions.len(), 2);
    drop(waiting); // its connection ended
    assert_eq!(decisions.len(), 1);
    assert!(!decisions.answer(first, decided(Decision::Close)));
    // a wait that times out leaves too
    assert!(other.decided(Duration::from_millis(20)).await.is_none());
    assert!(decisions.is_empty());
    assert!(!decisions.answer(second, decided(Decision::Close)));
    let (third, waiting) = decisions.ticket();
    assert!(decisions.answer(third, decided(Decision::Close)));
    assert!(matches!(
        waiting.decided(Duration::from_secs(5)).await,
        Some(edge_core::decide::Decided {
            decision: Decision::Close,
            ..
        })
    ));
}

/// The response head waiting for its response phase (decide.rs `AskedResponse`).
async fn asked_response(carrier: &Carrier) -> edge_core::decide::AskedResponse {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(a) = carrier.inbox().take().responses.pop() {
            return a;
        }
        assert!(Instant::now() < deadline, "no response head asked for");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_phase_rewrites_the_head_or_answers_instead_and_closes() {
    use edge_core::decide::Decision;
    let (carrier, port, session, mut agent) = setup(16);
    carrier
        .routes
        .set("r.test".into(), decided_route(&session, true));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(b"GET /a HTTP/1.1\r\nHost: r.test\r\n\r\n")
        .await
        .unwrap();
    let row = asked(&carrier).await;
    carrier
        .decisions
        .answer(row.ticket, decided(Decision::Append { fields: Vec::new() }));
    let (sid, _) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 200 OK\r\nServer: up\r\nContent-Length: 2\r\n\r\nok",
    );
    agent.write_all(&answer).await.unwrap();
    // the head waits for Python, with the request's memo
    let head = asked_response(&carrier).await;
    assert_eq!(head.status, 200);
    assert_eq!(
        head.fields,
        vec![
            (b"Server".to_vec(), b"up".to_vec()),
            (b"Content-Length".to_vec(), b"2".to_vec())
        ]
    );
    let memo = head.memo.expect("the request's memo");
    assert_eq!(memo.downcast_ref::<u32>(), Some(&42));
    let mut early = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(100), client.read(&mut early))
            .await
            .is_err(),
        "the head went on before its response phase"
    );
    carrier.decisions.answer(
        head.ticket,
        decided(Decision::Rewrite {
            body: None,
            fields: vec![
                (b"content-length".to_vec(), b"2".to_vec()),
                (b"x-seen".to_vec(), b"1".to_vec()),
            ],
            encode: None,
        }),
    );
    let got = read_response(&mut client, b"ok").await;
    assert_eq!(
        got,
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-seen: 1\r\n\r\nok"
    );

    // the next one: the response phase answers instead, and the connection closes
    client
        .write_all(b"GET /b HTTP/1.1\r\nHost: r.test\r\n\r\n")
        .await
        .unwrap();
    let row = asked(&carrier).await;
    carrier
        .decisions
        .answer(row.ticket, decided(Decision::Append { fields: Vec::new() }));
    let (sid, _) = agent_reads(&mut agent, |g| {
        g.ends_with(b"GET /b HTTP/1.1\r\n") || g.ends_with(b"\r\n\r\n")
    })
    .await;
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\n\r\nfail",
    );
    agent.write_all(&answer).await.unwrap();
    let head = asked_response(&carrier).await;
    assert_eq!(head.status, 500);
    let replaced =
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 5\r\nconnection: close\r\n\r\n";
    carrier.decisions.answer(
        head.ticket,
        decided(Decision::Respond {
            status: 503,
            head: replaced.to_vec(),
            body: b"sorry".to_vec(),
            close: true,
        }),
    );
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, [&replaced[..], b"sorry"].concat());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_finds_every_slot_in_grace_waits_for_one_in_the_core() {
    use edge_core::mux::Limits;
    let carrier = Carrier::new(1).unwrap();
    let (_, local) = carrier
        .listen_public(Where::Bind("127.0.0.1".into(), 0), spec(16))
        .unwrap();
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let limits = Limits {
        max_local_streams: 1,
        slot_grace: Duration::from_millis(300),
        ..Limits::default()
    };
    let session = carrier
        .attach(std::os::fd::OwnedFd::from(ours), limits)
        .unwrap();
    session.with(|st| st.authenticate());
    theirs.set_nonblocking(true).unwrap();
    let mut agent = UnixStream::from_std(theirs).unwrap();
    carrier.routes.set("a.test".into(), route(&session));
    let port = local.port();

    // the one slot: a request served, its stream ended both ways (then in grace)
    let mut first = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    first
        .write_all(b"GET /1 HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (sid, _) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        FIN,
        sid,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    );
    agent.write_all(&answer).await.unwrap();
    let mut got = Vec::new();
    first.read_to_end(&mut got).await.unwrap();
    assert!(got.ends_with(b"ok"));

    // the next connection's request waits for the slot in the core, and is served there
    let asked = Instant::now();
    let mut second = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    second
        .write_all(b"GET /2 HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (next, got) = tokio::time::timeout(
        Duration::from_secs(5),
        agent_reads(&mut agent, |g| has(g, b"GET /2 HTTP/1.1\r\n")),
    )
    .await
    .expect("the request never reached the agent: handed to Python?");
    assert_ne!(next, sid);
    assert!(has(&got, b"GET /2 HTTP/1.1\r\n"));
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_millis(150),
        "served before its slot came back: {waited:?}"
    );
    assert!(
        carrier.inbox().take().conns.is_empty(),
        "handed to Python instead"
    );
}

/// A quiet decided route that holds its decisions (held.rs): a decision Python made with
/// `hold` answers the next request with the same facts without asking; a request that differs
/// in a fact read is asked about, and so is every request while the route is loud.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_decision_answers_the_same_facts_without_asking_python() {
    use edge_core::decide::{Decided, Decision};
    use edge_core::held::{Held, Reads};
    use std::sync::atomic::Ordering;
    let (carrier, port, session, _agent) = setup(16);
    let reads = Reads::parse(&["target".to_string()]).unwrap();
    carrier.routes.set(
        "d.test".into(),
        Route {
            held: Some(Arc::new(Held::new(reads))),
            ..decided_route(&session, false)
        },
    );
    carrier.tallies.set_quiet(7, true);
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let answer = |body: &[u8], hold: bool| Decided {
        decision: Decision::Respond {
            status: 403,
            head: format!(
                "HTTP/1.1 403 Forbidden\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes(),
            body: body.to_vec(),
            close: false,
        },
        memo: Some(Arc::new(42u32)),
        hold,
    };
    let mut served = Vec::new();
    let ask = |target: &'static str| {
        let line = format!("GET {target} HTTP/1.1\r\nHost: d.test\r\nX-Other: {target}\r\n\r\n");
        line.into_bytes()
    };
    // the first of /a is asked, and held
    client.write_all(&ask("/a")).await.unwrap();
    let row = asked_keeping(&carrier, &mut served).await;
    assert!(carrier.decisions.answer(row.ticket, answer(b"one", true)));
    read_response(&mut client, b"one").await;
    // the second of /a (another X-Other: not read) is not asked: the held decision answers
    let held_before = carrier.public_counters.held.load(Ordering::Relaxed);
    client
        .write_all(b"GET /a HTTP/1.1\r\nHost: d.test\r\nX-Other: 2\r\n\r\n")
        .await
        .unwrap();
    read_response(&mut client, b"one").await;
    assert_eq!(
        carrier.public_counters.held.load(Ordering::Relaxed),
        held_before + 1
    );
    assert!(carrier.inbox().take().asked.is_empty(), "not asked");
    // /b differs in the target: asked; answered without hold, so asked again the next time
    for _ in 0..2 {
        client.write_all(&ask("/b")).await.unwrap();
        let row = asked_keeping(&carrier, &mut served).await;
        assert_eq!(row.head.target, b"/b");
        assert!(carrier.decisions.answer(row.ticket, answer(b"two", false)));
        read_response(&mut client, b"two").await;
    }
    // what the held decision served is counted with its memo in the route's tally (each
    // request counted a moment after its answer is written: taken until all four are)
    let (mut counted, mut held) = (0, Vec::new());
    let deadline = Instant::now() + Duration::from_secs(5);
    while counted < 4 && Instant::now() < deadline {
        for (key, tally, memos) in carrier.tallies.take() {
            if key == 7 {
                counted += tally.durations.len();
                held.extend(memos);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(counted, 4);
    assert_eq!(held.len(), 1);
    assert_eq!((held[0].0.downcast_ref::<u32>(), held[0].1), (Some(&42), 1));
    // loud: /a is asked again
    carrier.tallies.set_quiet(7, false);
    client.write_all(&ask("/a")).await.unwrap();
    let row = asked_keeping(&carrier, &mut served).await;
    assert_eq!(row.head.target, b"/a");
    assert!(carrier.decisions.answer(row.ticket, answer(b"three", true)));
    read_response(&mut client, b"three").await;
}

/// A route pushed again under its key (Python renews a route that serves before its ttl
/// runs out) keeps the decisions it held; one pushed under another key, on another session or
/// reading other facts starts empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_renewed_under_its_key_keeps_what_it_held() {
    use edge_core::decide::Decision;
    use edge_core::held::{Held, Reads};
    let (carrier, _port, session, _agent) = setup(16);
    let (other, _other_agent) = common::agent_session(&carrier);
    let target = || Reads::parse(&["target".to_string()]).unwrap();
    let push = |key: u64, session: &Arc<Session>, reads: Reads| {
        carrier.routes.set(
            "d.test".into(),
            Route {
                key,
                held: Some(Arc::new(Held::new(reads))),
                ..decided_route(session, false)
            },
        )
    };
    let held = || carrier.routes.get("d.test").unwrap().held.clone().unwrap();
    let append = Decision::Append {
        fields: vec![(b"x-a".to_vec(), b"1".to_vec())],
    };
    push(7, &session, target());
    assert!(held().hold(b"k".to_vec(), &append, None));
    push(7, &session, target());
    assert_eq!(held().len(), 1, "renewed: kept");
    push(8, &session, target());
    assert!(held().is_empty(), "another key");
    assert!(held().hold(b"k".to_vec(), &append, None));
    push(8, &other, target());
    assert!(held().is_empty(), "another session");
    assert!(held().hold(b"k".to_vec(), &append, None));
    push(8, &other, Reads::parse(&["fields".to_string()]).unwrap());
    assert!(held().is_empty(), "other facts read");
}

/// An endpoint pool's route: each request, on one kept-alive connection too, goes to the next
/// member in turn, on a proxy stream of that member's session with its tunnel id, and its
/// record names that member's key (Python's `Registry.http_tunnel` spreads a pool so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pools_requests_go_to_its_members_in_turn_each_recorded_under_its_member() {
    let (carrier, port, first, mut first_agent) = setup(16);
    let (second, mut second_agent) = common::agent_session(&carrier);
    let member = |key: u64, session: &Arc<Session>, tunnel: &str| Route {
        key,
        tunnel_id: tunnel.into(),
        ..route(session)
    };
    carrier.routes.set_pool(
        "p.test".into(),
        vec![member(7, &first, "tn_a"), member(8, &second, "tn_b")],
    );
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    for (n, tunnel) in ["tn_a", "tn_b", "tn_a", "tn_b"].into_iter().enumerate() {
        client
            .write_all(format!("GET /{n} HTTP/1.1\r\nHost: p.test\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let agent = if tunnel == "tn_a" {
            &mut first_agent
        } else {
            &mut second_agent
        };
        let (sid, got) = agent_reads(agent, |g| g.ends_with(b"\r\n\r\n")).await;
        assert!(
            has(&got, format!("\"Id\": \"{tunnel}\"").as_bytes()),
            "request {n} on {tunnel}'s stream: {:?}",
            String::from_utf8_lossy(&got)
        );
        assert!(has(&got, format!("GET /{n} HTTP/1.1\r\n").as_bytes()));
        let mut answer = Vec::new();
        encode(
            &mut answer,
            DATA,
            0,
            sid,
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
        );
        agent.write_all(&answer).await.unwrap();
        read_response(&mut client, b"\r\n\r\nx").await;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut served = Vec::new();
    while served.len() < 4 && Instant::now() < deadline {
        served.extend(carrier.inbox().take().served);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let keys: Vec<u64> = served.iter().map(|s| s.route).collect();
    assert_eq!(keys, [7, 8, 7, 8]);
}

/// What reads a host's route without serving a request (the TLS handshake's certificate, a
/// relay's check) takes no pool turn; a pool of no member is no route.
#[tokio::test]
async fn peeking_takes_no_turn_and_an_empty_pool_drops_the_host() {
    let carrier = Carrier::new(1).unwrap();
    let (first, _a) = common::agent_session(&carrier);
    let (second, _b) = common::agent_session(&carrier);
    let member = |key: u64, session: &Arc<Session>| Route {
        key,
        ..route(session)
    };
    let routes = &carrier.routes;
    routes.set_pool("p.test".into(), vec![member(7, &first), member(8, &second)]);
    let turns: Vec<u64> = (0..4)
        .map(|_| {
            let peeked = routes.peek("p.test").unwrap().key;
            assert_eq!(peeked, 7);
            routes.get("p.test").unwrap().key
        })
        .collect();
    assert_eq!(turns, [7, 8, 7, 8]);
    routes.set("p.test".into(), member(9, &first)); // no longer a pool
    assert_eq!(routes.get("p.test").unwrap().key, 9);
    assert_eq!(routes.get("p.test").unwrap().key, 9);
    routes.set_pool("p.test".into(), Vec::new());
    assert!(routes.get("p.test").is_none() && routes.peek("p.test").is_none());
}

/// A member whose session ended (its agent gone, Python not yet told) takes no turn while
/// another member is live; a pool of ended sessions still answers with its member in turn
/// (its request fails as the session's end says).
#[tokio::test]
async fn a_member_whose_session_ended_takes_no_turn() {
    let carrier = Carrier::new(1).unwrap();
    let sessions: Vec<_> = (0..3).map(|_| common::agent_session(&carrier)).collect();
    let member = |key: u64| Route {
        key,
        ..route(&sessions[key as usize - 1].0)
    };
    let routes = &carrier.routes;
    routes.set_pool("p.test".into(), (1..=3).map(member).collect());
    sessions[1].0.with(|st| st.closed = true);
    let turns: Vec<u64> = (0..6).map(|_| routes.get("p.test").unwrap().key).collect();
    assert_eq!(turns, [1, 3, 3, 1, 3, 3]);
    for (session, _) in &sessions {
        session.with(|st| st.closed = true);
    }
    let turns: Vec<u64> = (0..3).map(|_| routes.get("p.test").unwrap().key).collect();
    assert_eq!(turns, [1, 2, 3]);
}

/// Pushing a pool's members again (Python's checks, each refresh) keeps its turn: one request
/// between two pushes goes to each member in turn, not always to the first.
#[tokio::test]
async fn a_pools_turn_goes_on_across_its_renewals() {
    let carrier = Carrier::new(1).unwrap();
    let (session, _agent) = common::agent_session(&carrier);
    let member = |key| Route {
        key,
        ..route(&session)
    };
    let mut served = Vec::new();
    for _ in 0..4 {
        carrier
            .routes
            .set_pool("p.test".into(), (1..=3).map(member).collect());
        served.push(carrier.routes.get("p.test").unwrap().key);
    }
    assert_eq!(served, vec![1, 2, 3, 1]);
}

/// A request for an HTTP/2 endpoint whose target its `:path` would not carry unchanged goes
/// to Python with the connection (which sends it raw), before any proxy stream is opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_an_http2_endpoint_cannot_take_unchanged_is_pythons() {
    let (carrier, port, session, _agent) = setup(16);
    carrier.routes.set(
        "g.test".into(),
        Route {
            h2_upstream: Some("http"),
            ..route(&session)
        },
    );
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let sent = b"GET /a<b> HTTP/1.1\r\nHost: g.test\r\n\r\n";
    client.write_all(sent).await.unwrap();
    let conns = handed(&carrier).await;
    assert_eq!(conns.len(), 1);
    assert_eq!(&conns[0].data[..], &sent[..]);
    assert_eq!(
        session.with(|st| st.open_streams()),
        0,
        "no proxy stream opened"
    );
}

/// A forward-internal's target: the request goes on to another session's endpoint with
/// Python's head, is asked about at its response head when the decision says so, and is
/// recorded under the route's key; the route's own agent hears nothing of it, and a
/// request of the route decided otherwise goes to its own agent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_internal_goes_on_to_its_target_recorded_as_the_routes() {
    use edge_core::decide::{Decision, Target};
    let (carrier, port, session, mut agent) = setup(16);
    let (internal, mut internal_agent) = common::agent_session(&carrier);
    carrier
        .routes
        .set("f.test".into(), decided_route(&session, false));
    let to = |responses: bool| Target {
        session: internal.clone(),
        tunnel_id: "tn_internal".into(),
        responses,
        proxy: None,
        h2_upstream: None,
        ws_tcp: false,
    };
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut served = Vec::new();
    let mut sids = Vec::new();
    for (n, responses) in [(0, true), (1, false)] {
        client
            .write_all(format!("GET /{n} HTTP/1.1\r\nHost: f.test\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let row = asked_keeping(&carrier, &mut served).await;
        let head = format!("GET /hop{n} HTTP/1.1\r\nhost: app.internal\r\n\r\n");
        carrier.decisions.answer(
            row.ticket,
            decided(Decision::Internal {
                head: Some(head.clone().into_bytes()),
                fields: Vec::new(),
                to: Box::new(to(responses)),
            }),
        );
        let (sid, got) = agent_reads(&mut internal_agent, |g| g.ends_with(b"\r\n\r\n")).await;
        if n == 0 {
            assert!(
                has(&got, b"\"Id\": \"tn_internal\""),
                "the target's tunnel in the proxy header: {:?}",
                String::from_utf8_lossy(&got)
            );
        }
        assert!(has(&got, head.as_bytes()), "Python's head");
        sids.push(sid);
        let mut answer = Vec::new();
        encode(
            &mut answer,
            DATA,
            0,
            sid,
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nin",
        );
        internal_agent.write_all(&answer).await.unwrap();
        if responses {
            // the response phase in force there: the head waits for Python, under the route
            let asked = asked_response(&carrier).await;
            assert_eq!((asked.route, asked.status), (7, 200));
            carrier.decisions.answer(
                asked.ticket,
                decided(Decision::Rewrite {
                    body: None,
                    fields: vec![(b"content-length".to_vec(), b"2".to_vec())],
                    encode: None,
                }),
            );
        }
        read_response(&mut client, b"in").await;
    }
    assert_eq!(
        sids[0], sids[1],
        "the target's stream kept for the next request"
    );

    // decided otherwise: the route's own agent
    client
        .write_all(b"GET /own HTTP/1.1\r\nHost: f.test\r\n\r\n")
        .await
        .unwrap();
    let row = asked_keeping(&carrier, &mut served).await;
    carrier
        .decisions
        .answer(row.ticket, decided(Decision::Append { fields: Vec::new() }));
    let (sid, got) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
    assert!(has(&got, b"GET /own HTTP/1.1\r\n") && has(&got, b"\"Id\": \"tn_test\""));
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nown",
    );
    agent.write_all(&answer).await.unwrap();
    read_response(&mut client, b"own").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while served.len() < 3 && Instant::now() < deadline {
        served.extend(carrier.inbox().take().served);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let keys: Vec<(u64, u16)> = served.iter().map(|s| (s.route, s.status)).collect();
    assert_eq!(keys, [(7, 200), (7, 200), (7, 200)]);
}

/// A cloud endpoint's route has no session of its own: Python's answer is served, a request
/// sent on to a target goes to the target's session, and one decided to go on without a
/// target (never, from Python) is handed to Python with its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_routes_requests_are_answered_or_sent_to_a_target_else_pythons() {
    use edge_core::decide::{Decision, Target};
    let (carrier, port, session, mut agent) = setup(16);
    carrier.routes.set(
        "c.test".into(),
        Route {
            session: None,
            ..decided_route(&session, false)
        },
    );
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(b"GET /a HTTP/1.1\r\nHost: c.test\r\n\r\n")
        .await
        .unwrap();
    let row = asked(&carrier).await;
    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n".to_vec();
    carrier.decisions.answer(
        row.ticket,
        decided(Decision::Respond {
            status: 200,
            head: answer,
            body: b"cloud".to_vec(),
            close: false,
        }),
    );
    read_response(&mut client, b"cloud").await;

    client
        .write_all(b"GET /b HTTP/1.1\r\nHost: c.test\r\n\r\n")
        .await
        .unwrap();
    let row = asked(&carrier).await;
    let head = b"GET /b HTTP/1.1\r\nhost: svc.internal\r\n\r\n";
    carrier.decisions.answer(
        row.ticket,
        decided(Decision::Internal {
            head: Some(head.to_vec()),
            fields: Vec::new(),
            to: Box::new(Target {
                session: session.clone(),
                tunnel_id: "tn_svc".into(),
                responses: false,
                proxy: None,
                h2_upstream: None,
                ws_tcp: false,
            }),
        }),
    );
    let (sid, got) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
    assert!(has(&got, b"\"Id\": \"tn_svc\"") && has(&got, head));
    let mut reply = Vec::new();
    encode(
        &mut reply,
        DATA,
        0,
        sid,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nin",
    );
    agent.write_all(&reply).await.unwrap();
    read_response(&mut client, b"in").await;

    let third = b"GET /c HTTP/1.1\r\nHost: c.test\r\n\r\n";
    client.write_all(third).await.unwrap();
    let row = asked(&carrier).await;
    carrier
        .decisions
        .answer(row.ticket, decided(Decision::Append { fields: Vec::new() }));
    let conns = handed(&carrier).await;
    assert_eq!(conns.len(), 1);
    assert_eq!(conns[0].data, third.to_vec());
}

/// A route whose bodies the inspector captures: each record keeps the first `capture` data
/// bytes of the request's and the response's bodies (chunk framing left out) and says whether
/// the request's body was all read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capturing_routes_records_keep_each_bodys_first_bytes() {
    let (carrier, port, session, mut agent) = setup(16);
    carrier.routes.set(
        "k.test".into(),
        Route {
            capture: 8,
            ws_tcp: false,
            ..route(&session)
        },
    );
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let requests: [&[u8]; 2] = [
        b"POST /a HTTP/1.1\r\nHost: k.test\r\nContent-Length: 10\r\n\r\n0123456789",
        b"POST /b HTTP/1.1\r\nHost: k.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n7\r\ndefghij\r\n0\r\n\r\n",
    ];
    for request in requests {
        client.write_all(request).await.unwrap();
        let (sid, _) = agent_reads(&mut agent, |g| {
            g.ends_with(b"0123456789") || g.ends_with(b"0\r\n\r\n")
        })
        .await;
        let mut answer = Vec::new();
        encode(
            &mut answer,
            DATA,
            0,
            sid,
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        );
        agent.write_all(&answer).await.unwrap();
        read_response(&mut client, b"0\r\n\r\n").await;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut served = Vec::new();
    while served.len() < 2 && Instant::now() < deadline {
        served.extend(carrier.inbox().take().served);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let kept: Vec<(&[u8], &[u8], bool)> = served
        .iter()
        .map(|s| (&s.request_body[..], &s.response_body[..], s.request_ended))
        .collect();
    assert_eq!(
        kept,
        [
            (&b"01234567"[..], &b"hello wo"[..], true),
            (&b"abcdefgh"[..], &b"hello wo"[..], true)
        ]
    );
    assert_eq!((served[0].bytes_in, served[1].bytes_in), (10, 10));
}
// ---- what the records keep -------------------------------------------------------------------

async fn served_n(carrier: &Carrier, n: usize) -> Vec<edge_core::public::Served> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut served = Vec::new();
    while served.len() < n && Instant::now() < deadline {
        served.extend(carrier.inbox().take().served);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    served
}

/// A policy's answer (decided Respond) to a POST whose whole body came with its head: the
/// Python path reads what is already there before it runs the policy (http_policy
/// request_phase: next_event until NEED_DATA, Tap keeps the Data), so its record shows
/// "hi", not truncated; so does the core's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_answer_records_the_body_that_came_with_the_head() {
    use edge_core::decide::Decision;
    let (carrier, port, session, _agent) = setup(16);
    carrier.routes.set(
        "d.test".into(),
        Route {
            capture: 8,
            ws_tcp: false,
            ..decided_route(&session, false)
        },
    );
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(b"POST /deny HTTP/1.1\r\nHost: d.test\r\nContent-Length: 2\r\n\r\nhi")
        .await
        .unwrap();
    let row = asked(&carrier).await;
    carrier.decisions.answer(
        row.ticket,
        decided(Decision::Respond {
            status: 403,
            head: b"HTTP/1.1 403 Forbidden\r\ncontent-length: 2\r\n\r\n".to_vec(),
            body: b"no".to_vec(),
            close: false,
        }),
    );
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    let served = served_n(&carrier, 1).await;
    assert_eq!(&served[0].response_body[..], b"no");
    assert_eq!(
        (&served[0].request_body[..], served[0].request_ended),
        (&b"hi"[..], true),
        "as the Python path records it"
    );
}

/// The agent ends the stream before answering: the client gets the edge's 502 JSON body;
/// the Python path's record captures that body (answer() -> Tap.send(Data)); the core's
/// record has it too, and the request body it had read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_502_records_its_body() {
    let (carrier, port, session, mut agent) = setup(16);
    carrier.routes.set(
        "a.test".into(),
        Route {
            capture: 64,
            ws_tcp: false,
            ..route(&session)
        },
    );
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(b"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\n\r\nabc")
        .await
        .unwrap();
    let (sid, _) = agent_reads(&mut agent, |g| g.ends_with(b"abc")).await;
    let mut fin = Vec::new();
    encode(&mut fin, DATA, FIN, sid, b"");
    agent.write_all(&fin).await.unwrap();
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    assert!(got.starts_with(b"HTTP/1.1 502"));
    let served = served_n(&carrier, 1).await;
    assert_eq!(served[0].status, 502);
    assert_eq!(&served[0].request_body[..], b"abc");
    assert!(
        !served[0].response_body.is_empty(),
        "the 502's body the client got is not in the record"
    );
}

/// Chunk extensions and trailers left out, bodies split
/// across reads, both copies bounded by `capture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_extensions_trailers_and_bounds() {
    let (carrier, port, session, mut agent) = setup(16);
    carrier.routes.set(
        "k.test".into(),
        Route {
            capture: 5,
            ws_tcp: false,
            ..route(&session)
        },
    );
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(b"POST /a HTTP/1.1\r\nHost: k.test\r\nTransfer-Encoding: chunked\r\n\r\n2;x=\"y\"\r\nab")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    client
        .write_all(b"\r\n3\r\ncde\r\n4;z\r\nfghi\r\n0\r\nX-T: 1\r\n\r\n")
        .await
        .unwrap();
    let (sid, _) = agent_reads(&mut agent, |g| g.ends_with(b"X-T: 1\r\n\r\n")).await;
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nAB",
    );
    agent.write_all(&answer).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    let mut answer = Vec::new();
    encode(&mut answer, DATA, 0, sid, b"CDEFGHIJKL");
    agent.write_all(&answer).await.unwrap();
    read_response(&mut client, b"JKL").await;
    let served = served_n(&carrier, 1).await;
    assert_eq!(
        (
            &served[0].request_body[..],
            &served[0].response_body[..],
            served[0].request_ended
        ),
        (&b"abcde"[..], &b"ABCDE"[..], true)
    );
}

/// A forward-internal's append held: the route's next request with the same facts goes to
/// the target's session with the appended field and the X-Forwarded ones, without asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_targets_append_is_held_and_served_without_asking() {
    use edge_core::decide::{Decided, Decision, Target};
    use edge_core::held::{Held, Reads};
    let (carrier, port, session, _agent) = setup(16);
    let (internal, mut internal_agent) = common::agent_session(&carrier);
    let reads = Reads::parse(&["target".to_string()]).unwrap();
    carrier.routes.set(
        "h.test".into(),
        Route {
            held: Some(Arc::new(Held::new(reads))),
            ..decided_route(&session, false)
        },
    );
    carrier.tallies.set_quiet(7, true);
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    for n in 0..2 {
        client
            .write_all(format!("GET /a HTTP/1.1\r\nHost: h.test\r\nX-N: {n}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        if n == 0 {
            let row = asked(&carrier).await;
            let decided = Decided {
                decision: Decision::Internal {
                    head: None,
                    fields: vec![(b"x-a".to_vec(), b"1".to_vec())],
                    to: Box::new(Target {
                        session: internal.clone(),
                        tunnel_id: "tn_in".into(),
                        responses: false,
                        proxy: None,
                        h2_upstream: None,
                        ws_tcp: false,
                    }),
                },
                memo: Some(Arc::new(42u32)),
                hold: true,
            };
            assert!(carrier.decisions.answer(row.ticket, decided));
        }
        let (sid, got) = agent_reads(&mut internal_agent, |g| g.ends_with(b"\r\n\r\n")).await;
        assert!(n == 1 || has(&got, b"\"Id\": \"tn_in\"")); // (then its stream kept)
        assert!(
            has(&got, format!("x-n: {n}\r\nx-a: 1\r\n").as_bytes()),
            "{got:?}"
        );
        assert!(has(&got, b"x-forwarded-for: 127.0.0.1\r\n"));
        let mut answer = Vec::new();
        encode(
            &mut answer,
            DATA,
            0,
            sid,
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        );
        internal_agent.write_all(&answer).await.unwrap();
        read_response(&mut client, b"ok").await;
    }
    assert!(
        carrier.inbox().take().asked.is_empty(),
        "the second was not asked"
    );
}

/// The records the core served, once there are `n` (within 5 s).
async fn served(carrier: &Carrier, n: usize) -> Vec<edge_core::public::Served> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        got.extend(carrier.inbox().take().served);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    got
}

const WS_UPGRADE: &[u8] = b"GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n\
    Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
    Sec-WebSocket-Version: 13\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_is_forwarded_and_after_the_agents_101_bytes_go_both_ways_raw() {
    let (carrier, port, session, mut agent) = setup(16);
    carrier.routes.set("a.test".into(), route(&session));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(&[WS_UPGRADE, b"early"].concat())
        .await
        .unwrap();
    let (sid, got) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
    assert!(got.ends_with(b"\r\n\r\n"), "the head alone before the 101");
    assert!(
        has(&got, b"upgrade: websocket\r\nconnection: Upgrade\r\n"),
        "forwarded as asked"
    );
    let mut answer = Vec::new();
    let switched =
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        &[&switched[..], b"first"].concat(),
    );
    agent.write_all(&answer).await.unwrap();
    let head = read_response(&mut client, b"first").await;
    assert_eq!(head, [&switched[..], b"first"].concat());
    client.write_all(b"up").await.unwrap();
    client.shutdown().await.unwrap();
    let (after, fin, _) = common::stream_reads(&mut agent, sid, |_, fin| fin).await;
    assert_eq!(
        (after.as_slice(), fin),
        (&b"earlyup"[..], true),
        "the client's bytes, then its EOF"
    );
    let records = served(&carrier, 1).await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].status, 101);
    assert!(records[0].response_head.starts_with(b"HTTP/1.1 101"));
    assert!(
        carrier.inbox().take().conns.is_empty(),
        "nothing handed to Python"
    );
    assert_eq!(
        carrier
            .counters
            .splices
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_answered_without_a_101_ends_the_connection_after_the_answer() {
    let (carrier, port, session, mut agent) = setup(16);
    carrier.routes.set("a.test".into(), route(&session));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client.write_all(WS_UPGRADE).await.unwrap();
    let (sid, _) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        FIN,
        sid,
        b"HTTP/1.1 426 Upgrade Required\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Content-Length: 2\r\n\r\nno",
    );
    agent.write_all(&answer).await.unwrap();
    let got = read_response(&mut client, b"no").await;
    assert!(got.starts_with(b"HTTP/1.1 426 Upgrade Required\r\n"));
    // it says the connection ends (edge/http1.py's answer to an upgrade says it)
    assert!(
        has(&got, b"\r\nConnection: close\r\n"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(!has(&got, b"Connection: Upgrade"));
    let mut rest = Vec::new();
    let read = client.read_to_end(&mut rest);
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .unwrap()
        .unwrap();
    assert!(
        rest.is_empty(),
        "the connection ends after a refused upgrade"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_tcp_route_answers_the_upgrade_itself_and_anything_else_400() {
    let (carrier, port, session, mut agent) = setup(16);
    carrier.routes.set(
        "a.test".into(),
        Route {
            ws_tcp: true,
            ..route(&session)
        },
    );
    let mut plain = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    let mut refused = Vec::new();
    let read = plain.read_to_end(&mut refused);
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .unwrap()
        .unwrap();
    assert!(refused.starts_with(b"HTTP/1.1 400 Bad Request\r\n"));
    assert!(has(&refused, b"ERR_NGROK_3002"));

    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client.write_all(WS_UPGRADE).await.unwrap();
    let head = read_response(&mut client, b"\r\n\r\n").await;
    assert_eq!(
        head,
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
          sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
    );
    // a masked binary frame "hi": its payload reaches the agent after the proxy header
    client
        .write_all(&[0x82, 0x82, 1, 2, 3, 4, b'h' ^ 1, b'i' ^ 2])
        .await
        .unwrap();
    let (_, got) = agent_reads(&mut agent, |g| g.ends_with(b"hi")).await;
    assert!(has(&got, b"\"Id\": \"tn_test\""), "the proxy header first");
    let records = served(&carrier, 2).await;
    let statuses: Vec<u16> = records.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![400, 101]);
    assert!(
        carrier.inbox().take().conns.is_empty(),
        "nothing handed to Python"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_101_that_does_not_say_it_switches_is_a_502() {
    let (carrier, port, session, mut agent) = setup(16);
    carrier.routes.set("a.test".into(), route(&session));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client.write_all(WS_UPGRADE).await.unwrap();
    let (sid, _) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
    let mut answer = Vec::new();
    // no Upgrade, no Connection: upgrade
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 101 Switching Protocols\r\n\r\nraw",
    );
    agent.write_all(&answer).await.unwrap();
    let mut got = Vec::new();
    let read = client.read_to_end(&mut got);
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .unwrap()
        .unwrap();
    assert!(
        got.starts_with(b"HTTP/1.1 502 Bad Gateway\r\n"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(has(&got, b"ERR_NGROK_3004") && !has(&got, b"raw"));
    assert_eq!(
        carrier
            .counters
            .splices
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    let records = served(&carrier, 1).await;
    assert_eq!(
        records.iter().map(|r| r.status).collect::<Vec<_>>(),
        vec![502]
    );
}

/// A decided route's request whose decision asks for its body first: `(carrier, port, the
/// agent's end)` with a public listener whose body timeout is `body_timeout`.
fn body_setup(body_timeout: Duration) -> (Carrier, u16, UnixStream) {
    let carrier = Carrier::new(1).unwrap();
    let (_, local) = carrier
        .listen_public(
            Where::Bind("127.0.0.1".into(), 0),
            PublicListen {
                body_timeout,
                ..spec(16)
            },
        )
        .unwrap();
    let (session, agent) = common::agent_session(&carrier);
    carrier
        .routes
        .set("d.test".into(), decided_route(&session, false));
    (carrier, local.port(), agent)
}

/// The row asked again after a [`Decision::Body`] for `ticket`: what was read.
async fn asked_again(carrier: &Carrier, ticket: u64) -> edge_core::decide::ReadBody {
    let row = asked(carrier).await;
    assert_eq!(row.ticket, ticket, "asked again under the same ticket");
    row.body.expect("asked again with the body read")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_asked_for_is_read_unsent_then_asked_again_and_goes_on_as_the_client_framed_it() {
    use edge_core::decide::Decision;
    let (carrier, port, mut agent) = body_setup(Duration::from_secs(5));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(b"POST /x HTTP/1.1\r\nHost: d.test\r\nContent-Length: 10\r\n\r\nhello")
        .await
        .unwrap();
    let row = asked(&carrier).await;
    assert!(row.body.is_none(), "the first ask has no body");
    assert!(carrier
        .decisions
        .answer(row.ticket, decided(Decision::Body { limit: 64 })));
    // the rest of the body comes later: read before the ask, as one whole body
    tokio::time::sleep(Duration::from_millis(50)).await;
    client.write_all(b"world").await.unwrap();
    let read = asked_again(&carrier, row.ticket).await;
    assert_eq!(
        (read.data.as_deref(), read.complete),
        (Some(&b"helloworld"[..]), true)
    );
    let head = b"POST /x HTTP/1.1\r\nhost: d.test\r\ncontent-length: 10\r\n\r\n";
    carrier.decisions.answer(
        row.ticket,
        decided(Decision::Forward {
            head: head.to_vec(),
            body: None,
        }),
    );
    // nothing of it reached the agent before the decision; then the client's body, once
    let (sid, got) = agent_reads(&mut agent, |g| g.ends_with(b"helloworld")).await;
    assert!(has(&got, &[&head[..], b"helloworld"].concat()));
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    );
    agent.write_all(&answer).await.unwrap();
    read_response(&mut client, b"ok").await;
    assert_eq!(carrier.decisions.len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_longer_than_the_ask_is_read_as_far_as_the_ask_and_passes_whole() {
    use edge_core::decide::Decision;
    let (carrier, port, mut agent) = body_setup(Duration::from_secs(5));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let body = b"5\r\nabcde\r\n5\r\nfghij\r\n0\r\n\r\n";
    let sent = [
        &b"POST /x HTTP/1.1\r\nHost: d.test\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        body,
    ]
    .concat();
    client.write_all(&sent).await.unwrap();
    let row = asked(&carrier).await;
    carrier
        .decisions
        .answer(row.ticket, decided(Decision::Body { limit: 7 }));
    let read = asked_again(&carrier, row.ticket).await;
    // the ask's bytes of data (no framing), and not the whole body: one byte more was there
    assert_eq!(
        (read.data.as_deref(), read.complete),
        (Some(&b"abcdefg"[..]), false)
    );
    let head = b"POST /x HTTP/1.1\r\nhost: d.test\r\ntransfer-encoding: chunked\r\n\r\n";
    carrier.decisions.answer(
        row.ticket,
        decided(Decision::Forward {
            head: head.to_vec(),
            body: None,
        }),
    );
    let (_, got) = agent_reads(&mut agent, |g| g.ends_with(b"0\r\n\r\n")).await;
    assert!(
        has(&got, &[&head[..], &body[..]].concat()),
        "framed as it came"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_body_goes_in_place_of_the_clients_and_the_next_request_follows() {
    use edge_core::decide::Decision;
    let (carrier, port, mut agent) = body_setup(Duration::from_secs(5));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // a chunked body, then a pipelined request in the same write
    let sent = b"POST /x HTTP/1.1\r\nHost: d.test\r\nTransfer-Encoding: chunked\r\n\r\n\
3\r\ncat\r\n0\r\n\r\nGET /next HTTP/1.1\r\nHost: d.test\r\n\r\n";
    client.write_all(sent).await.unwrap();
    let row = asked(&carrier).await;
    carrier
        .decisions
        .answer(row.ticket, decided(Decision::Body { limit: 64 }));
    let read = asked_again(&carrier, row.ticket).await;
    assert_eq!(
        (read.data.as_deref(), read.complete),
        (Some(&b"cat"[..]), true)
    );
    let head = b"POST /x HTTP/1.1\r\nhost: d.test\r\ncontent-length: 5\r\n\r\n";
    carrier.decisions.answer(
        row.ticket,
        decided(Decision::Forward {
            head: head.to_vec(),
            body: Some(b"doggo".to_vec()),
        }),
    );
    let (sid, got) = agent_reads(&mut agent, |g| g.ends_with(b"doggo")).await;
    assert!(got.ends_with(&[&head[..], b"doggo"].concat()));
    assert!(!has(&got, b"cat"), "no byte of the client's body");
    let mut answer = Vec::new();
    encode(
        &mut answer,
        DATA,
        0,
        sid,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    );
    agent.write_all(&answer).await.unwrap();
    read_response(&mut client, b"ok").await;
    // the pipelined request is the next one, its head where the body ended
    let next = asked(&carrier).await;
    assert_eq!(
        (next.head.target.as_slice(), next.body.is_none()),
        (&b"/next"[..], true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_to_a_body_read_whole_keeps_the_connection_for_the_next_request() {
    use edge_core::decide::Decision;
    let (carrier, port, _agent) = body_setup(Duration::from_secs(5));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(
            b"POST /hook HTTP/1.1\r\nHost: d.test\r\nContent-Length: 2\r\n\r\n{}\
GET /next HTTP/1.1\r\nHost: d.test\r\n\r\n",
        )
        .await
        .unwrap();
    let row = asked(&carrier).await;
    carrier
        .decisions
        .answer(row.ticket, decided(Decision::Body { limit: 64 }));
    asked_again(&carrier, row.ticket).await;
    let refused = b"HTTP/1.1 403 Forbidden\r\ncontent-length: 2\r\n\r\n";
    carrier.decisions.answer(
        row.ticket,
        decided(Decision::Respond {
            status: 403,
            head: refused.to_vec(),
            body: b"no".to_vec(),
            close: false,
        }),
    );
    assert_eq!(
        read_response(&mut client, b"no").await,
        [&refused[..], b"no"].concat()
    );
    let next = asked(&carrier).await;
    assert_eq!(next.head.target, b"/next");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_ends_or_stalls_before_its_body_is_closed_and_python_told() {
    use edge_core::decide::Decision;
    let (carrier, port, _agent) = body_setup(Duration::from_millis(300));
    for stall in [false, true] {
        let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        client
            .write_all(b"POST /x HTTP/1.1\r\nHost: d.test\r\nContent-Length: 100\r\n\r\npart")
            .await
            .unwrap();
        let row = asked(&carrier).await;
        carrier
            .decisions
            .answer(row.ticket, decided(Decision::Body { limit: 64 }));
        let started = Instant::now();
        if !stall {
            client.shutdown().await.unwrap();
        }
        let read = asked_again(&carrier, row.ticket).await;
        assert!(
            read.data.is_none() && !read.complete,
            "nothing to decide on"
        );
        if stall {
            let waited = started.elapsed();
            assert!(waited >= Duration::from_millis(250), "{waited:?}");
        }
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest))
            .await
            .expect("closed");
        assert!(n.is_ok() && rest.is_empty(), "closed without an answer");
        assert_eq!(carrier.decisions.len(), 0, "no ticket left waiting");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_tiny_chunks_is_read_only_to_its_framing_bound() {
    use edge_core::decide::{Decision, BODY_FRAMING_SLACK};
    let (carrier, port, _agent) = body_setup(Duration::from_secs(5));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(b"POST /x HTTP/1.1\r\nHost: d.test\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    let row = asked(&carrier).await;
    let limit = 8 * 1024;
    carrier
        .decisions
        .answer(row.ticket, decided(Decision::Body { limit }));
    // one data byte per 128 bytes of framing (a chunk extension), sent without end: 1 MiB
    // of it would hold the ask's bytes of data
    let chunk = [&b"1;"[..], &[b'e'; 121], b"\r\nx\r\n"].concat();
    assert_eq!(chunk.len(), 128);
    let sender = tokio::spawn(async move {
        let _ = client.write_all(&chunk.repeat(limit)).await;
        client
    });
    let read = asked_again(&carrier, row.ticket).await;
    let data = read.data.expect("read");
    // stopped at the framing bound, one read past it at most: a fraction of the ask's data,
    // not called whole
    let most = (2 * limit + BODY_FRAMING_SLACK + edge_core::public::READ_CHUNK) / 128 + 1;
    assert!(!read.complete);
    assert!(data.len() >= (2 * limit + BODY_FRAMING_SLACK) / 128 - 1 && data.len() <= most);
    assert!(data.iter().all(|&b| b == b'x'));
    sender.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_asked_for_twice_closes_the_connection() {
    use edge_core::decide::Decision;
    let (carrier, port, _agent) = body_setup(Duration::from_secs(5));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    client
        .write_all(b"POST /x HTTP/1.1\r\nHost: d.test\r\nContent-Length: 2\r\n\r\nhi")
        .await
        .unwrap();
    let row = asked(&carrier).await;
    carrier
        .decisions
        .answer(row.ticket, decided(Decision::Body { limit: 64 }));
    asked_again(&carrier, row.ticket).await;
    carrier
        .decisions
        .answer(row.ticket, decided(Decision::Body { limit: 64 }));
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
}

/// A chunked body's data (the test's client reads what the core chunked).
fn dechunked(mut body: &[u8]) -> Vec<u8> {
    let mut data = Vec::new();
    loop {
        let line = body.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&body[..line]).unwrap(), 16).unwrap();
        if size == 0 {
            assert_eq!(&body[line..], b"\r\n\r\n", "no trailers, nothing after");
            return data;
        }
        data.extend_from_slice(&body[line + 2..line + 2 + size]);
        assert_eq!(&body[line + 2 + size..line + 4 + size], b"\r\n");
        body = &body[line + 4 + size..];
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_response_is_chunked_and_decodes_to_the_agents_body_in_each_framing() {
    use edge_core::decide::Decision;
    use edge_core::encode::Encoding;
    use std::io::Read;
    let (carrier, port, session, mut agent) = setup(16);
    carrier
        .routes
        .set("z.test".into(), decided_route(&session, true));
    let text = b"hello hello hello hello ".repeat(400); // 9,600 bytes
    let chunked = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
        format!("{:x}\r\n", 5000).into_bytes(),
        text[..5000].to_vec(),
        b"\r\n".to_vec(),
        format!("{:x}\r\n", text.len() - 5000).into_bytes(),
        text[5000..].to_vec(),
        b"\r\n0\r\nx-trailer: 1\r\n\r\n".to_vec(),
    ]
    .concat();
    let length = [
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", text.len()).into_bytes(),
        text.clone(),
    ]
    .concat();
    let until_close = [b"HTTP/1.1 200 OK\r\n\r\n".to_vec(), text.clone()].concat();
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // one keep-alive connection: each answer leaves it usable for the next request
    for (i, (answer, encoding)) in [
        (&length, Encoding::Gzip),
        (&chunked, Encoding::Deflate),
        (&until_close, Encoding::Gzip),
    ]
    .into_iter()
    .enumerate()
    {
        let request = format!("GET /{i} HTTP/1.1\r\nHost: z.test\r\n\r\n");
        client.write_all(request.as_bytes()).await.unwrap();
        let row = asked(&carrier).await;
        carrier
            .decisions
            .answer(row.ticket, decided(Decision::Append { fields: Vec::new() }));
        let (sid, _) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
        let mut frames = Vec::new();
        let fin = if i == 2 { FIN } else { 0 };
        encode(&mut frames, DATA, fin, sid, answer);
        agent.write_all(&frames).await.unwrap();
        let head = asked_response(&carrier).await;
        let name = if encoding == Encoding::Gzip {
            "gzip"
        } else {
            "deflate"
        };
        // as compress-response leaves the head: no Content-Length, its Content-Encoding
        let mut fields: Vec<_> = head
            .fields
            .iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case(b"content-length"))
            .cloned()
            .collect();
        fields.push((b"content-encoding".to_vec(), name.as_bytes().to_vec()));
        carrier.decisions.answer(
            head.ticket,
            decided(Decision::Rewrite {
                body: None,
                fields,
                encode: Some(encoding),
            }),
        );
        let got = read_response(&mut client, b"\r\n0\r\n\r\n").await;
        let split = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&got[..split]).to_lowercase();
        assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
        assert_eq!(
            head.matches("transfer-encoding: chunked").count(),
            1,
            "{head}"
        );
        assert!(!head.contains("content-length"), "{head}");
        assert!(
            head.contains(&format!("content-encoding: {name}")),
            "{head}"
        );
        let compressed = dechunked(&got[split..]);
        assert!(compressed.len() < 500, "{} bytes", compressed.len());
        let mut plain = Vec::new();
        match encoding {
            Encoding::Gzip => flate2::read::GzDecoder::new(&compressed[..]).read_to_end(&mut plain),
            Encoding::Deflate => {
                flate2::read::ZlibDecoder::new(&compressed[..]).read_to_end(&mut plain)
            }
        }
        .unwrap();
        assert_eq!(plain, text, "answer {i}");
    }
    // a HEAD's answer has no body to compress: its head goes as Python left it
    client
        .write_all(b"HEAD /h HTTP/1.1\r\nHost: z.test\r\n\r\n")
        .await
        .unwrap();
    let row = asked(&carrier).await;
    carrier
        .decisions
        .answer(row.ticket, decided(Decision::Append { fields: Vec::new() }));
    let (sid, _) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
    let mut frames = Vec::new();
    encode(
        &mut frames,
        DATA,
        0,
        sid,
        b"HTTP/1.1 200 OK\r\nContent-Length: 9600\r\n\r\n",
    );
    agent.write_all(&frames).await.unwrap();
    let head = asked_response(&carrier).await;
    carrier.decisions.answer(
        head.ticket,
        decided(Decision::Rewrite {
            body: None,
            fields: vec![(b"content-length".to_vec(), b"9600".to_vec())],
            encode: Some(Encoding::Gzip),
        }),
    );
    let got = read_response(&mut client, b"\r\n\r\n").await;
    assert_eq!(got, b"HTTP/1.1 200 OK\r\ncontent-length: 9600\r\n\r\n");
}

/// The agent's answer to request `i` of `client`'s connection, on a route whose response
/// phase asks for the body: (the response head's ticket, what the second ask read of the
/// body, whether that is all of it).
async fn body_asked(
    carrier: &Carrier,
    client: &mut TcpStream,
    agent: &mut UnixStream,
    i: usize,
    answer: &[u8],
    limit: usize,
    fin: bool,
) -> (u64, Option<(Vec<u8>, bool)>) {
    use edge_core::decide::Decision;
    let request = format!("GET /{i} HTTP/1.1\r\nHost: b.test\r\n\r\n");
    client.write_all(request.as_bytes()).await.unwrap();
    let row = asked(carrier).await;
    carrier
        .decisions
        .answer(row.ticket, decided(Decision::Append { fields: Vec::new() }));
    let (sid, _) = agent_reads(agent, |g| g.ends_with(b"\r\n\r\n")).await;
    let mut frames = Vec::new();
    encode(&mut frames, DATA, if fin { FIN } else { 0 }, sid, answer);
    agent.write_all(&frames).await.unwrap();
    let head = asked_response(carrier).await;
    assert!(head.body.is_none(), "the first ask has no body");
    carrier
        .decisions
        .answer(head.ticket, decided(Decision::Body { limit }));
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        if let Some(again) = carrier.inbox().take().responses.pop() {
            assert_eq!(
                again.ticket, head.ticket,
                "asked again under the same ticket"
            );
            let read = again.body.expect("asked again with the body");
            return (head.ticket, Some((read.data.expect("read"), read.complete)));
        }
        if Instant::now() > deadline {
            return (head.ticket, None);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_body_read_for_the_phase_is_bounded_and_goes_first_then_the_rest() {
    use edge_core::decide::Decision;
    let (carrier, port, session, mut agent) = setup(16);
    carrier
        .routes
        .set("b.test".into(), decided_route(&session, true));
    let text: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let length = [
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", text.len()).into_bytes(),
        text.clone(),
    ]
    .concat();
    let mut chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for piece in text.chunks(10_000) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\nx-trailer: 1\r\n\r\n");
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // one keep-alive connection: each answer leaves it usable for the next request
    for (i, answer) in [&length, &chunked].into_iter().enumerate() {
        let (ticket, read) =
            body_asked(&carrier, &mut client, &mut agent, i, answer, 4096, false).await;
        let (data, complete) = read.expect("asked again");
        // the ask, and at most one read of the stream past it; the body's data, unframed
        assert!(
            (4097..=4096 + 65536).contains(&data.len()) && !complete,
            "{} bytes read, complete {complete}",
            data.len()
        );
        assert_eq!(data[..], text[..data.len()]);
        let fields = vec![(b"x-checked".to_vec(), b"1".to_vec())];
        let fields = if i == 0 {
            [
                fields,
                vec![(b"content-length".to_vec(), b"100000".to_vec())],
            ]
            .concat()
        } else {
            [
                fields,
                vec![(b"transfer-encoding".to_vec(), b"chunked".to_vec())],
            ]
            .concat()
        };
        carrier.decisions.answer(
            ticket,
            decided(Decision::Rewrite {
                fields,
                encode: None,
                body: None,
            }),
        );
        let end: &[u8] = if i == 0 {
            &text[90_000..]
        } else {
            b"\r\n0\r\n\r\n"
        };
        let got = read_response(&mut client, end).await;
        let split = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&got[..split]).to_lowercase();
        assert!(head.contains("x-checked: 1"), "{head}");
        if i == 0 {
            // by the agent's Content-Length: what was read, then the rest as it came
            assert!(head.contains("content-length: 100000"), "{head}");
            assert_eq!(got[split..], text[..]);
        } else {
            // chunked anew (what was read left its framing), the agent's trailers not sent
            assert_eq!(
                head.matches("transfer-encoding: chunked").count(),
                1,
                "{head}"
            );
            assert_eq!(dechunked(&got[split..]), text);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_response_body_goes_in_place_of_the_agents_framed_by_its_size() {
    use edge_core::decide::Decision;
    let (carrier, port, session, mut agent) = setup(16);
    carrier
        .routes
        .set("b.test".into(), decided_route(&session, true));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let answers = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\na secret".to_vec(),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\na \r\n6\r\nsecret\r\n0\r\n\r\n"
            .to_vec(),
    ];
    for (i, answer) in answers.iter().enumerate() {
        let (ticket, read) =
            body_asked(&carrier, &mut client, &mut agent, i, answer, 8, false).await;
        // a body of exactly the ask is read to its end (its last chunk too): whole
        assert_eq!(read, Some((b"a secret".to_vec(), true)), "read whole");
        // Python's fields keep the agent's framing fields: the core frames the new body itself
        carrier.decisions.answer(
            ticket,
            decided(Decision::Rewrite {
                fields: vec![
                    (b"content-length".to_vec(), b"8".to_vec()),
                    (b"transfer-encoding".to_vec(), b"chunked".to_vec()),
                ],
                encode: None,
                body: Some(b"a [removed]".to_vec()),
            }),
        );
        let got = read_response(&mut client, b"a [removed]").await;
        assert_eq!(
            got, b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\na [removed]",
            "answer {i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_ends_while_its_body_is_read_is_a_502_and_nothing_asked_again() {
    let (carrier, port, session, mut agent) = setup(16);
    carrier
        .routes
        .set("b.test".into(), decided_route(&session, true));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly ten b";
    let (_, read) = body_asked(&carrier, &mut client, &mut agent, 0, answer, 1 << 20, true).await;
    assert!(read.is_none(), "asked again after a failed read");
    let got = read_response(&mut client, b"}").await;
    let text = String::from_utf8_lossy(&got);
    // (as the Python path's parser says it: not a valid response, ERR_NGROK_3004)
    assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
    assert!(text.contains("ERR_NGROK_3004"), "{text}");
    assert!(!text.contains("only ten"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_streams_pieces_are_pythons_to_rewrite_before_they_go_on() {
    use edge_core::decide::Decision;
    let (carrier, port, session, mut agent) = setup(16);
    carrier
        .routes
        .set("e.test".into(), decided_route(&session, true));
    let mut client = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // a stream rewritten to its end, then one Python cuts (a message past its bound)
    for (i, cut) in [false, true].into_iter().enumerate() {
        let request = format!("GET /{i} HTTP/1.1\r\nHost: e.test\r\n\r\n");
        client.write_all(request.as_bytes()).await.unwrap();
        let row = asked(&carrier).await;
        carrier
            .decisions
            .answer(row.ticket, decided(Decision::Append { fields: Vec::new() }));
        let (sid, _) = agent_reads(&mut agent, |g| g.ends_with(b"\r\n\r\n")).await;
        let mut frames = Vec::new();
        encode(
            &mut frames,
            DATA,
            0,
            sid,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n9\r\ndata: a\n\n\r\n",
        );
        agent.write_all(&frames).await.unwrap();
        let head = asked_response(&carrier).await;
        carrier.decisions.answer(
            head.ticket,
            decided(Decision::Events {
                fields: vec![(b"content-type".to_vec(), b"text/event-stream".to_vec())],
                encode: None,
            }),
        );
        // the piece, out of its framing, Python's first
        let piece = asked_response(&carrier).await;
        let read = piece.body.expect("asked with the piece");
        assert_eq!(piece.ticket, head.ticket);
        assert_eq!(
            (read.data.unwrap(), read.complete),
            (b"data: a\n\n".to_vec(), false)
        );
        if cut {
            carrier
                .decisions
                .answer(piece.ticket, decided(Decision::Close));
            // the response ends there: no last chunk, the connection closed
            let mut got = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut got))
                .await
                .expect("closed");
            assert!(read.is_ok());
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
            assert!(
                !text.contains("data: a") && !text.ends_with("0\r\n\r\n"),
                "{text}"
            );
            return;
        }
        carrier.decisions.answer(
            piece.ticket,
            decided(Decision::Rewrite {
                fields: Vec::new(),
                encode: None,
                body: Some(b"data: A\n\n".to_vec()),
            }),
        );
        let mut frames = Vec::new();
        encode(&mut frames, DATA, 0, sid, b"0\r\n\r\n");
        agent.write_all(&frames).await.unwrap();
        // the body's end: what the rewriter still held
        let end = asked_response(&carrier).await;
        let read = end.body.expect("asked at the end");
        assert_eq!((read.data.unwrap(), read.complete), (Vec::new(), true));
        carrier.decisions.answer(
            end.ticket,
            decided(Decision::Rewrite {
                fields: Vec::new(),
                encode: None,
                body: Some(b"data: tail\n\n".to_vec()),
            }),
        );
        let got = read_response(&mut client, b"\r\n0\r\n\r\n").await;
        let split = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&got[..split]).to_lowercase();
        assert_eq!(
            head.matches("transfer-encoding: chunked").count(),
            1,
            "{head}"
        );
        assert_eq!(dechunked(&got[split..]), b"data: A\n\ndata: tail\n\n");
    }
}
