//! A client connection and an agent's stream carried both ways (src/splice.rs) as the edge
//! uses it: the client over TCP, the agent's session over a Unix socket pair played by the test
//! (muxado frames in the clear).

use std::os::fd::OwnedFd;
use std::sync::Arc;

use std::time::{Duration, Instant};

use edge_core::carrier::Carrier;
use edge_core::mux::{encode, DATA, FIN, RST};
use edge_core::session::Session;
use edge_core::splice::Spliced;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

mod common;

/// A carrier, an authenticated session whose agent end the test holds, one stream of the
/// edge's on it, and a connected TCP pair: (client, the edge's side as a descriptor).
async fn setup() -> (Carrier, Arc<Session>, UnixStream, u32, TcpStream, OwnedFd) {
    let carrier = Carrier::new(1).unwrap();
    let (session, agent) = common::agent_session(&carrier);
    let sid = session.with(|st| st.open()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (accepted, _) = listener.accept().await.unwrap();
    let fd = OwnedFd::from(accepted.into_std().unwrap());
    (carrier, session, agent, sid, client, fd)
}

async fn client_reads(client: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut got = vec![0u8; n];
    tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got))
        .await
        .expect("the client got nothing")
        .unwrap();
    got
}

/// The inbox's carried connections that ended, within 5 s.
async fn ended(carrier: &Carrier) -> Vec<Spliced> {
    for _ in 0..100 {
        let spliced = carrier.inbox().take().spliced;
        if !spliced.is_empty() {
            return spliced;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Vec::new()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_ways_first_bytes_first_each_end_a_half_close_then_the_counts() {
    let (carrier, session, mut agent, sid, mut client, fd) = setup().await;
    let id = carrier
        .splice(
            fd,
            false,
            session.clone(),
            sid,
            b"held.".to_vec(),
            b"101.".to_vec(),
        )
        .unwrap();
    assert_eq!(client_reads(&mut client, 4).await, b"101.");
    client.write_all(b"up").await.unwrap();
    client.shutdown().await.unwrap(); // the client's EOF: FIN on the stream
    let (got, fin, _) = common::stream_reads(&mut agent, sid, |_, fin| fin).await;
    assert_eq!(got, b"held.up");
    assert!(fin, "the client's EOF reaches the agent as FIN");
    assert!(
        carrier.inbox().take().spliced.is_empty(),
        "the agent's side is still open"
    );
    let mut frames = Vec::new();
    encode(&mut frames, DATA, 0, sid, b"down");
    encode(&mut frames, DATA, FIN, sid, b"");
    agent.write_all(&frames).await.unwrap();
    assert_eq!(client_reads(&mut client, 4).await, b"down");
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "the agent's FIN reaches the client as EOF");
    assert_eq!(
        ended(&carrier).await,
        vec![Spliced {
            id,
            from_client: 2,
            to_client: 8
        }]
    );
    assert_eq!(
        carrier
            .counters
            .splices
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_reset_ends_it_and_closes_the_client() {
    let (carrier, session, mut agent, sid, mut client, fd) = setup().await;
    carrier
        .splice(fd, false, session.clone(), sid, Vec::new(), Vec::new())
        .unwrap();
    client.write_all(b"x").await.unwrap();
    common::stream_reads(&mut agent, sid, |got, _| got == b"x").await;
    let mut frames = Vec::new();
    encode(&mut frames, RST, 0, sid, &6u32.to_be_bytes());
    agent.write_all(&frames).await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest))
        .await
        .expect("the client was not closed");
    assert!(read.is_err() || rest.is_empty());
    let spliced = ended(&carrier).await;
    assert_eq!(spliced.len(), 1);
    assert_eq!(spliced[0].from_client, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_failure_ends_it_with_a_fin_never_an_rst_alone() {
    let (carrier, session, mut agent, sid, client, fd) = setup().await;
    carrier
        .splice(fd, false, session.clone(), sid, b"a".to_vec(), Vec::new())
        .unwrap();
    common::stream_reads(&mut agent, sid, |got, _| got == b"a").await;
    // the client resets its connection (SO_LINGER 0): the core's read fails
    #[allow(deprecated)] // linger 0: the close sends RST at once, nothing blocks
    client.set_linger(Some(Duration::ZERO)).unwrap();
    drop(client);
    let (_, fin, rst) = common::stream_reads(&mut agent, sid, |_, fin| fin).await;
    assert!(
        fin && !rst,
        "the stream is finished: FIN, and it lingers for the agent's"
    );
    assert_eq!(ended(&carrier).await.len(), 1);
}

/// A connected TCP pair: (the far end the test holds, the near end as a descriptor).
async fn tcp_pair() -> (TcpStream, OwnedFd) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let far = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (near, _) = listener.accept().await.unwrap();
    (far, OwnedFd::from(near.into_std().unwrap()))
}

/// The cluster's relay (splice::relay): the client's connection and the one to the holding
/// instance, each side's first bytes first, each end a half-close the other side sees while
/// its own direction goes on, then the client's counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_carries_both_ways_first_bytes_first_each_end_a_half_close() {
    let carrier = Carrier::new(1).unwrap();
    let (mut client, a) = tcp_pair().await;
    let (mut holder, b) = tcp_pair().await;
    let id = carrier
        .relay(
            a,
            false,
            b,
            b"GET / HTTP/1.1\r\n".to_vec(),
            b"early".to_vec(),
        )
        .unwrap();
    assert_eq!(client_reads(&mut client, 5).await, b"early");
    assert_eq!(client_reads(&mut holder, 16).await, b"GET / HTTP/1.1\r\n");
    client.write_all(b"Host: x\r\n\r\n").await.unwrap();
    assert_eq!(client_reads(&mut holder, 11).await, b"Host: x\r\n\r\n");
    client.shutdown().await.unwrap(); // the client's EOF: the holder sees it ...
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), holder.read_to_end(&mut rest))
        .await
        .expect("the holder saw no EOF")
        .unwrap();
    assert!(rest.is_empty());
    holder.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap(); // ... and still answers
    assert_eq!(client_reads(&mut client, 17).await, b"HTTP/1.1 200 OK\r\n");
    holder.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest))
        .await
        .expect("the client saw no EOF")
        .unwrap();
    assert!(rest.is_empty());
    assert_eq!(
        ended(&carrier).await,
        vec![Spliced {
            id,
            from_client: 11,
            to_client: 5 + 17,
        }]
    );
    assert_eq!(
        carrier
            .counters
            .splices
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

/// Either side's failure ends the whole relay: the holder's connection reset closes the
/// client's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_ends_at_either_sides_failure() {
    let carrier = Carrier::new(1).unwrap();
    let (mut client, a) = tcp_pair().await;
    let (holder, b) = tcp_pair().await;
    carrier.relay(a, false, b, Vec::new(), Vec::new()).unwrap();
    #[allow(deprecated)] // a zero linger: the close is an RST, and never blocks
    holder.set_linger(Some(Duration::ZERO)).unwrap();
    drop(holder); // an RST
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest))
        .await
        .expect("the client's connection stayed open");
    assert!(read.is_err() || rest.is_empty());
    assert_eq!(ended(&carrier).await.len(), 1);
}

/// Once the holder's side ended (its EOF passed on to the client), a client that neither
/// sends nor closes holds the relay no longer than the linger: both sockets are closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_whose_holder_ended_waits_for_the_client_only_the_linger() {
    let (mut client, a) = tcp_pair().await;
    let (holder, b) = tcp_pair().await;
    let a = TcpStream::from_std(std::net::TcpStream::from(a)).unwrap();
    let b = TcpStream::from_std(std::net::TcpStream::from(b)).unwrap();
    let relay = tokio::spawn(edge_core::splice::relay(
        a,
        b,
        Vec::new(),
        b"hi".to_vec(),
        Duration::from_millis(300),
    ));
    drop(holder); // the holder's end (its FIN)
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut got))
        .await
        .expect("the holder's EOF did not reach the client")
        .unwrap();
    assert_eq!(got, b"hi");
    let started = Instant::now();
    let (from_client, to_client) = tokio::time::timeout(Duration::from_secs(5), relay)
        .await
        .expect("the relay outlived its linger")
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!((from_client, to_client), (0, 2));
    // while the holder's side lasts, a silent client is not cut: see the tests above
}
