//! The WebSocket-to-TCP converter (src/wstcp.rs): its frame codec at its bounds, and a client's
//! WebSocket converted to and from an agent's stream as the edge uses it (the client over TCP,
//! the agent's session over a Unix socket pair played by the test).

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use edge_core::carrier::Carrier;
use edge_core::mux::{encode, DATA, FIN};
use edge_core::session::Session;
use edge_core::wstcp::{
    frame, next_frame, FrameError, BINARY, CLOSE, CONT, MAX_FRAME, PING, PONG, TEXT,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

mod common;

/// A client frame: final, masked with `mask`.
fn client_frame(opcode: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let mut out = Vec::new();
    frame(&mut out, opcode, payload);
    out[1] |= 0x80;
    let at = out.len() - payload.len();
    let masked: Vec<u8> = payload
        .iter()
        .enumerate()
        .map(|(i, b)| b ^ mask[i % 4])
        .collect();
    out.truncate(at);
    out.extend_from_slice(&mask);
    out.extend_from_slice(&masked);
    out
}

#[test]
fn server_frames_use_the_shortest_length_form() {
    for (size, head) in [(125usize, 2usize), (126, 4), (65535, 4), (65536, 10)] {
        let mut out = Vec::new();
        frame(&mut out, BINARY, &vec![7u8; size]);
        assert_eq!(out.len(), head + size, "{size} bytes");
        assert_eq!(out[0], 0x80 | BINARY);
    }
}

#[test]
fn a_client_frame_is_unmasked_in_place_and_its_end_told() {
    let payload = b"hello over ws".repeat(20); // 260 bytes: the 16-bit length form
    let mut buf = client_frame(TEXT, &payload, [1, 2, 3, 4]);
    let whole = buf.len();
    buf.extend_from_slice(b"\x81"); // the next frame's first byte
    let (opcode, range) = next_frame(&mut buf).unwrap().unwrap();
    assert_eq!((opcode, &buf[range.clone()]), (TEXT, payload.as_slice()));
    assert_eq!(
        range.end, whole,
        "the frame's end: the next one starts there"
    );
    let whole = client_frame(BINARY, &payload, [9, 8, 7, 6]);
    let mut partial = whole[..whole.len() - 1].to_vec();
    assert_eq!(next_frame(&mut partial).unwrap(), None);
    assert_eq!(
        partial,
        whole[..whole.len() - 1],
        "a partial frame is left as it is"
    );
}

#[test]
fn the_bound_is_read_from_the_header_before_any_payload() {
    let announce = |size: u64| {
        let mut buf = vec![0x82, 0x80 | 127];
        buf.extend_from_slice(&size.to_be_bytes());
        buf.extend_from_slice(&[0, 0, 0, 0]);
        buf
    };
    assert_eq!(next_frame(&mut announce(MAX_FRAME)).unwrap(), None); // waits for it
    assert_eq!(
        next_frame(&mut announce(MAX_FRAME + 1)),
        Err(FrameError(1009))
    );
    let mut unmasked = vec![0x82, 2, b'n', b'o'];
    assert_eq!(next_frame(&mut unmasked), Err(FrameError(1002)));
}

/// A carrier, an authenticated session whose agent end the test holds, one stream of the
/// edge's on it converting a connected TCP pair's edge side: (the carrier, the session, the
/// agent, the stream, the client).
async fn converting(frames: Vec<u8>) -> (Carrier, Arc<Session>, UnixStream, u32, TcpStream) {
    let carrier = Carrier::new(1).unwrap();
    let (session, agent) = common::agent_session(&carrier);
    let sid = session.with(|st| st.open()).unwrap();
    // what the edge writes first on a proxy stream (its proxy header)
    assert_eq!(session.with(|st| st.write(sid, b"hdr.")).unwrap(), 4);
    session.flush();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (accepted, _) = listener.accept().await.unwrap();
    let fd = OwnedFd::from(accepted.into_std().unwrap());
    carrier
        .convert_websocket(fd, false, session.clone(), sid, frames)
        .unwrap();
    (carrier, session, agent, sid, client)
}

/// The client's next server frame: (opcode, payload).
async fn server_frame(client: &mut TcpStream) -> (u8, Vec<u8>) {
    tokio::time::timeout(Duration::from_secs(5), untimed_frame(client))
        .await
        .expect("the client got no frame")
}

/// [`server_frame`] with no timer (on a paused clock, a timer would pass at once).
async fn untimed_frame(client: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut head = [0u8; 2];
    client.read_exact(&mut head).await.unwrap();
    let size = match head[1] & 0x7F {
        126 => client.read_u16().await.unwrap() as usize,
        127 => client.read_u64().await.unwrap() as usize,
        n => n as usize,
    };
    assert_eq!(head[1] & 0x80, 0, "server frames are not masked");
    let mut payload = vec![0u8; size];
    client.read_exact(&mut payload).await.unwrap();
    (head[0] & 0x0F, payload)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_both_ways_pings_answered_and_a_close_echoed_ends_it_at_once() {
    let first = client_frame(TEXT, b"read with the upgrade.", [5, 6, 7, 8]);
    let (carrier, session, mut agent, sid, mut client) = converting(first).await;
    let mut up = client_frame(BINARY, b"bin.", [1, 1, 1, 1]);
    up.extend(client_frame(CONT, b"", [2, 2, 2, 2])); // empty: nothing to write
    up.extend(client_frame(CONT, b"cont", [3, 3, 3, 3]));
    client.write_all(&up).await.unwrap();
    let want = b"hdr.read with the upgrade.bin.cont";
    let (got, fin, _) =
        common::stream_reads(&mut agent, sid, |got, _| got.len() >= want.len()).await;
    assert_eq!(got, want);
    assert!(!fin);

    let mut frames = Vec::new();
    encode(&mut frames, DATA, 0, sid, b"from the agent");
    agent.write_all(&frames).await.unwrap();
    assert_eq!(
        server_frame(&mut client).await,
        (BINARY, b"from the agent".to_vec())
    );

    let long_ping = vec![b'p'; 200]; // the pong carries its first 125 bytes
    client
        .write_all(&client_frame(PING, &long_ping, [4, 3, 2, 1]))
        .await
        .unwrap();
    assert_eq!(
        server_frame(&mut client).await,
        (PONG, long_ping[..125].to_vec())
    );

    client
        .write_all(&client_frame(
            CLOSE,
            &[0x03, 0xE8, b'b', b'y'],
            [7, 7, 7, 7],
        ))
        .await
        .unwrap();
    assert_eq!(server_frame(&mut client).await, (CLOSE, vec![0x03, 0xE8]));
    // the close frames exchanged: the WebSocket is done, its connection ends at once (the
    // agent's side silent still)
    let mut rest = Vec::new();
    let read = client.read_to_end(&mut rest);
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .unwrap()
        .unwrap();
    assert!(rest.is_empty(), "the connection ends after the close");
    let (_, fin, _) = common::stream_reads(&mut agent, sid, |_, fin| fin).await;
    assert!(fin, "the client's close reaches the agent as FIN");
    for _ in 0..100 {
        if !carrier.inbox().take().spliced.is_empty() {
            let _ = session;
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the conversion never ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_past_the_bound_is_closed_1009_and_an_unmasked_one_1002() {
    for (bytes, code) in [
        {
            let mut b = vec![0x82, 0x80 | 127];
            b.extend_from_slice(&(MAX_FRAME + 1).to_be_bytes());
            (b, 1009u16)
        },
        (vec![0x82, 2, b'n', b'o'], 1002),
    ] {
        let (_carrier, _session, mut agent, sid, mut client) = converting(Vec::new()).await;
        client.write_all(&bytes).await.unwrap();
        assert_eq!(
            server_frame(&mut client).await,
            (CLOSE, code.to_be_bytes().to_vec())
        );
        let mut rest = Vec::new();
        let read = client.read_to_end(&mut rest);
        tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .unwrap()
            .unwrap();
        assert!(rest.is_empty(), "the connection ends at once");
        let (got, fin, _) = common::stream_reads(&mut agent, sid, |_, fin| fin).await;
        assert_eq!(
            (got.as_slice(), fin),
            (&b"hdr."[..], true),
            "nothing of the frame"
        );
    }
}

/// The conversion run on the test's own runtime (its clock paused: LINGER passes at once
/// when nothing else can happen), over a session of `carrier`'s: (agent, stream, client, the
/// conversion's task).
async fn converting_here(
    carrier: &Carrier,
) -> (
    UnixStream,
    u32,
    TcpStream,
    tokio::task::JoinHandle<(u64, u64)>,
) {
    let (session, agent) = common::agent_session(carrier);
    let sid = session.with(|st| st.open()).unwrap();
    assert_eq!(session.with(|st| st.write(sid, b"hdr.")).unwrap(), 4);
    session.flush();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (accepted, _) = listener.accept().await.unwrap();
    let wakes = session.own(sid);
    let task = tokio::spawn(edge_core::wstcp::run(
        accepted,
        session,
        sid,
        wakes,
        Vec::new(),
    ));
    (agent, sid, client, task)
}

#[tokio::test(start_paused = true)]
async fn after_the_agents_end_a_silent_client_is_closed_within_the_linger() {
    let carrier = Carrier::new(1).unwrap();
    let (mut agent, sid, mut client, task) = converting_here(&carrier).await;
    let mut frames = Vec::new();
    encode(&mut frames, DATA, FIN, sid, b"bye");
    agent.write_all(&frames).await.unwrap();
    assert_eq!(untimed_frame(&mut client).await, (BINARY, b"bye".to_vec()));
    assert_eq!(
        untimed_frame(&mut client).await,
        (CLOSE, 1000u16.to_be_bytes().to_vec())
    );
    let started = tokio::time::Instant::now();
    // the client neither closes nor reads on (bounded here: a conversion that never ends
    // fails the test instead of hanging it)
    let (_, written) = tokio::time::timeout(2 * edge_core::wstcp::LINGER, task)
        .await
        .expect("the conversion never ended")
        .unwrap();
    assert!(
        started.elapsed() >= edge_core::wstcp::LINGER,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(written, 5 + 4);
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "the connection closed");
}

#[tokio::test(start_paused = true)]
async fn after_the_clients_eof_a_silent_agent_is_finished_within_the_linger() {
    let carrier = Carrier::new(1).unwrap();
    let (mut agent, sid, client, task) = converting_here(&carrier).await;
    drop(client); // EOF without a close frame
    let started = tokio::time::Instant::now();
    tokio::time::timeout(2 * edge_core::wstcp::LINGER, task) // the agent never ends its side
        .await
        .expect("the conversion never ended")
        .unwrap();
    assert!(
        started.elapsed() >= edge_core::wstcp::LINGER,
        "{:?}",
        started.elapsed()
    );
    // what the agent got: the header, then FIN (read with no timer: the clock is paused)
    let (mut buf, mut fin) = (Vec::new(), false);
    while !fin {
        let mut chunk = [0u8; 4096];
        let n = agent.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the session ended");
        buf.extend_from_slice(&chunk[..n]);
        fin = common::frames(&mut buf)
            .iter()
            .any(|(typ, flags, id, _)| *typ == DATA && *id == sid && flags & FIN != 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_empty_frames_in_one_read_then_data_and_the_data_is_written_once() {
    let mut burst: Vec<u8> = (0..20_000)
        .flat_map(|i| client_frame(BINARY, b"", [i as u8, 1, 2, 3]))
        .collect();
    burst.extend(client_frame(TEXT, b"after", [4, 4, 4, 4]));
    let (_carrier, _session, mut agent, sid, mut client) = converting(Vec::new()).await;
    client.write_all(&burst).await.unwrap();
    let (got, _, _) = common::stream_reads(&mut agent, sid, |got, _| got.ends_with(b"after")).await;
    assert_eq!(got, b"hdr.after");
}
