//! An agent's heartbeat stream, echoed by the core.
//!
//! The agent opens one stream of type Heartbeat (0xFFFFFFFF) and writes a 4-byte id on it
//! every interval; the edge writes each id back and the agent measures the round trip
//! (ngrok-rust's `muxado/src/heartbeat.rs`). Python reads the stream's type and decides what
//! serves it; for a heartbeat stream it hands the stream over ([`crate::carrier::Carrier::echo`])
//! and from then on no beat wakes the interpreter: the core echoes each id and keeps the time
//! of the last one ([`Session::since_beat`]), which Python reads at its periodic check to reap
//! an agent that stopped beating.
//!
//! The rules, as edge/agents.py had them in Python:
//! - Each id is echoed once whole (an id split over frames is put together first); a beat
//!   counts when its last byte arrives, before the echo is written.
//! - The stream ends at the agent's FIN (ours follows) or at its reset or the session's end.
//! - Memory: at most one id (4 bytes) in the core's own buffer; the stream's window
//!   (mux.rs) bounds what an agent that never reads its echoes may send ahead.

use std::sync::Arc;

use crate::session::{Session, Wakes};

/// The length of a heartbeat's id.
pub const ID_LEN: usize = 4;

/// Echo the ids of the heartbeat stream `sid` of `session` (owned by the core: `wakes`)
/// until it ends; the stream is finished then. Returns the ids echoed.
pub async fn echo(session: Arc<Session>, sid: u32, wakes: Arc<Wakes>) -> u64 {
    let mut id = Vec::with_capacity(ID_LEN);
    let mut echoed = 0u64;
    loop {
        let want = ID_LEN - id.len();
        match session.read_owned(sid, &wakes, &mut id, want).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if id.len() == ID_LEN {
            session.beat();
            if session.write_owned(sid, &wakes, &id).await.is_err() {
                break;
            }
            id.clear();
            echoed += 1;
        }
    }
    session.disown(sid);
    echoed
}
