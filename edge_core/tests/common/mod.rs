//! What the core's listener tests share: an agent session whose other end the test plays
//! (muxado frames in the clear over a Unix socket pair), and reading those frames.
#![allow(dead_code)] // each test file uses its part

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;

use edge_core::carrier::Carrier;
use edge_core::mux::Limits;
use edge_core::session::Session;
use tokio::net::UnixStream;

pub mod h2listen;

/// An authenticated session on `carrier`, and the agent's end of its connection.
pub fn agent_session(carrier: &Carrier) -> (Arc<Session>, UnixStream) {
    let (ours, theirs) = StdUnixStream::pair().unwrap();
    let session = carrier
        .attach(OwnedFd::from(ours), Limits::default())
        .unwrap();
    session.with(|st| st.authenticate());
    theirs.set_nonblocking(true).unwrap();
    (session, UnixStream::from_std(theirs).unwrap())
}

/// The frames in `buf` that are whole, removed from it: (type, flags, stream id, payload).
pub fn frames(buf: &mut Vec<u8>) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut out = Vec::new();
    while buf.len() >= 8 {
        let word = u32::from_be_bytes(buf[..4].try_into().unwrap());
        let len = (word >> 8) as usize;
        if buf.len() < 8 + len {
            break;
        }
        let sid = u32::from_be_bytes(buf[4..8].try_into().unwrap());
        out.push((
            ((word >> 4) & 0xF) as u8,
            (word & 0xF) as u8,
            sid,
            buf[8..8 + len].to_vec(),
        ));
        buf.drain(..8 + len);
    }
    out
}

pub fn has(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The agent's next read (within 5 s; the session must still be open), and the frames it
/// completed in `buf`.
pub async fn next_frames(agent: &mut UnixStream, buf: &mut Vec<u8>) -> Vec<(u8, u8, u32, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let mut chunk = [0u8; 65536];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), agent.read(&mut chunk))
        .await
        .expect("the agent got nothing")
        .unwrap();
    assert!(n > 0, "the session ended");
    buf.extend_from_slice(&chunk[..n]);
    frames(buf)
}

/// What the agent got on stream `sid` until `done` says it is whole (given the bytes so far
/// and whether a FIN came): (bytes, FIN seen, RST seen).
pub async fn stream_reads(
    agent: &mut UnixStream,
    sid: u32,
    done: impl Fn(&[u8], bool) -> bool,
) -> (Vec<u8>, bool, bool) {
    use edge_core::mux::{DATA, FIN, RST};
    let (mut buf, mut got, mut fin, mut rst) = (Vec::new(), Vec::new(), false, false);
    while !done(&got, fin) {
        for (typ, flags, id, payload) in next_frames(agent, &mut buf).await {
            if id == sid {
                match typ {
                    DATA => {
                        got.extend_from_slice(&payload);
                        fin |= flags & FIN != 0;
                    }
                    RST => rst = true,
                    _ => {}
                }
            }
        }
    }
    (got, fin, rst)
}
