//! An agent's heartbeat stream echoed by the core (src/heartbeat.rs), as the edge hands it
//! over: the agent opens the stream, Python reads its type, the core echoes from then on.
//! The agent's end is played by the test (muxado frames in the clear over a Unix socket pair).

use std::sync::Arc;
use std::time::Duration;

use edge_core::carrier::Carrier;
use edge_core::mux::{encode, DATA, FIN, SYN};
use edge_core::session::Session;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

mod common;

const HEARTBEAT: [u8; 4] = [0xFF; 4];

/// The agent opens stream 1 with the heartbeat type and `first` after it; the type is read
/// off the stream as Python reads it; the core echoes from then on.
async fn handed_over(first: &[u8]) -> (Carrier, Arc<Session>, UnixStream) {
    let carrier = Carrier::new(1).unwrap();
    let (session, mut agent) = common::agent_session(&carrier);
    let mut frames = Vec::new();
    encode(&mut frames, DATA, SYN, 1, &[&HEARTBEAT[..], first].concat());
    agent.write_all(&frames).await.unwrap();
    let mut typ = None;
    for _ in 0..100 {
        typ = session
            .with(|st| st.read(1, 4, |b| b.to_vec()))
            .ok()
            .flatten();
        if typ.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(typ.as_deref(), Some(&HEARTBEAT[..]), "the stream's type");
    carrier.echo(session.clone(), 1);
    (carrier, session, agent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_id_is_echoed_whole_once_and_counts_as_a_beat() {
    let (_carrier, session, mut agent) = handed_over(b"ab").await; // half of the first id
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(session.beats(), 0, "half an id is no beat");
    let mut frames = Vec::new();
    encode(&mut frames, DATA, 0, 1, b"cdef"); // the rest of it, then half of the second
    encode(&mut frames, DATA, 0, 1, b"gh"); // the rest of the second
    encode(&mut frames, DATA, 0, 1, b"ij"); // half of a third
    agent.write_all(&frames).await.unwrap();
    let (got, _, _) = common::stream_reads(&mut agent, 1, |got, _| got.len() >= 8).await;
    assert_eq!(got, b"abcdefgh");
    assert_eq!(session.beats(), 2);
    assert!(session.since_beat() < Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        session.since_beat() >= Duration::from_millis(300),
        "the half id is no beat"
    );
    assert_eq!(session.beats(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_since_the_last_beat_runs_from_the_sessions_start_before_the_first() {
    let carrier = Carrier::new(1).unwrap();
    let (session, _agent) = common::agent_session(&carrier);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(session.since_beat() >= Duration::from_millis(200));
    assert_eq!(session.beats(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_fin_ends_the_echo_with_ours_and_the_stream_leaves_the_table() {
    let (_carrier, session, mut agent) = handed_over(b"").await;
    let mut frames = Vec::new();
    encode(&mut frames, DATA, FIN, 1, b"beat");
    agent.write_all(&frames).await.unwrap();
    let (got, fin, rst) = common::stream_reads(&mut agent, 1, |_, fin| fin).await;
    assert_eq!((got.as_slice(), fin, rst), (&b"beat"[..], true, false));
    for _ in 0..100 {
        if session.lock().held() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(session.lock().held(), 0, "both FINs: the stream is gone");
}

/// `n` bytes of ids on stream 1.
async fn send(agent: &mut UnixStream, n: usize) {
    let mut frames = Vec::new();
    for chunk in vec![b'x'; n].chunks(16 * 1024) {
        encode(&mut frames, DATA, 0, 1, chunk);
    }
    agent.write_all(&frames).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_never_reads_its_echoes_is_bounded_and_loses_none() {
    let (_carrier, session, mut agent) = handed_over(b"").await;
    // The agent sends a window of ids and reads nothing: the echoes queue until the session's
    // unsent bytes reach their bound (mux.rs: a write waits past 4 x flush_at), then the core
    // reads no more ids, and the rest waits in the stream's receive window.
    let window = edge_core::mux::DEFAULT_WINDOW;
    // the stream's type took 4 bytes of the window (no credit back yet: it comes in batches)
    let sent = window - 4;
    let full = (sent / 4) as u64; // the ids it may send
    send(&mut agent, sent).await;
    let mut beats = 0;
    for _ in 0..250 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if session.beats() == beats {
            break; // stalled
        }
        beats = session.beats();
    }
    let limits = edge_core::mux::Limits::default();
    assert!(
        beats < full,
        "{beats}: the echoes stall behind an agent that reads nothing"
    );
    let unsent = session.lock().unsent();
    assert!(
        unsent <= 4 * limits.flush_at + limits.write_chunk,
        "{unsent}"
    );
    assert!(!session.lock().closed);
    // once it reads, every id comes back
    let (got, _, _) = common::stream_reads(&mut agent, 1, |got, _| got.len() >= sent).await;
    assert_eq!(got.len(), sent);
    assert_eq!(session.beats(), full);
}
