//! The session's writer: when the frames queued by the streams of one turn of the runtime leave.
//!
//! On one worker thread the order in which tasks run is fixed: a task spawned from a worker
//! runs next (tokio's LIFO slot), the one it displaced waits in the queue, and so does a writer
//! that yields. These tests count the writes the session makes to its connection.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use edge_core::inbox::Inbox;
use edge_core::mux::Limits;
use edge_core::session::{self, Session};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection that never has anything to read and counts the writes made to it.
struct Counted(Arc<AtomicUsize>);

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Pending
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn one_worker() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// A session served on a counted connection, with `streams` streams of ours open.
async fn served(streams: usize) -> (Arc<Session>, Arc<AtomicUsize>, Vec<u32>) {
    let session = Session::new(1, Limits::default(), Arc::new(Inbox::new().unwrap()));
    session.with(|st| st.authenticate());
    let writes = Arc::new(AtomicUsize::new(0));
    tokio::spawn(session::run(session.clone(), Counted(writes.clone())));
    let sids = (0..streams)
        .map(|_| session.with(|st| st.open().unwrap()))
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    (session, writes, sids)
}

/// A request's frame queued on `sid`, and the writer told.
fn request(session: &Session, sid: u32) {
    let taken = session.with(|st| st.write(sid, b"GET / HTTP/1.1\r\n\r\n").unwrap());
    assert!(taken > 0);
    session.flush();
}

#[test]
fn the_requests_of_one_turn_leave_in_one_write() {
    one_worker().block_on(async {
        let (session, writes, sids) = served(2).await;
        let before = writes.load(Ordering::SeqCst);
        tokio::spawn(async move {
            for sid in sids {
                let session = session.clone();
                tokio::spawn(async move { request(&session, sid) });
            }
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(writes.load(Ordering::SeqCst) - before, 1);
    });
}

#[test]
fn a_lone_request_leaves_before_the_next_task_runs() {
    one_worker().block_on(async {
        let (session, writes, sids) = served(1).await;
        let before = writes.load(Ordering::SeqCst);
        let seen = Arc::new(AtomicUsize::new(usize::MAX));
        let (seen_at, counted) = (seen.clone(), writes.clone());
        tokio::spawn(async move {
            // Queued behind the request's task and, unless it yields, behind the writer.
            tokio::spawn(
                async move { seen_at.store(counted.load(Ordering::SeqCst), Ordering::SeqCst) },
            );
            let sid = sids[0];
            tokio::spawn(async move { request(&session, sid) });
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(writes.load(Ordering::SeqCst) - before, 1);
        assert_eq!(
            seen.load(Ordering::SeqCst) - before,
            1,
            "the next task ran before the write"
        );
    });
}
