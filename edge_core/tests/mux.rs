//! The rules of an agent session's muxado (src/mux.rs), each pinned by the test that names
//! it. They were edge/session.py's, learned against the real agents; the test plays the
//! agent's frames into the state machine and reads the frames and events it answers with.

use std::time::{Duration, Instant};

use edge_core::mux::*;

fn frame(typ: u8, flags: u8, sid: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode(&mut out, typ, flags, sid, payload);
    out
}

fn data(sid: u32, payload: &[u8], flags: u8) -> Vec<u8> {
    frame(DATA, flags, sid, payload)
}

#[derive(Debug, PartialEq)]
struct F {
    typ: u8,
    flags: u8,
    sid: u32,
    payload: Vec<u8>,
}

fn parse(out: &mut Vec<u8>) -> Vec<F> {
    let mut frames = Vec::new();
    let mut at = 0;
    while out.len() - at >= 8 {
        let word = u32::from_be_bytes(out[at..at + 4].try_into().unwrap());
        let sid = u32::from_be_bytes(out[at + 4..at + 8].try_into().unwrap());
        let len = (word >> 8) as usize;
        frames.push(F {
            typ: ((word >> 4) & 0xF) as u8,
            flags: (word & 0xF) as u8,
            sid,
            payload: out[at + 8..at + 8 + len].to_vec(),
        });
        at += 8 + len;
    }
    out.clear();
    frames
}

fn code(f: &F) -> u32 {
    let at = if f.typ == GOAWAY { 4 } else { 0 };
    u32::from_be_bytes(f.payload[at..at + 4].try_into().unwrap())
}

fn state(limits: Limits) -> State {
    let mut st = State::new(limits);
    st.authenticate();
    st
}

fn feed(st: &mut State, bytes: &[u8]) -> Result<(), End> {
    let mut buf = bytes.to_vec();
    st.feed(&mut buf)
}

fn read_all(st: &mut State, sid: u32) -> Vec<u8> {
    st.read(sid, usize::MAX, |b| b.to_vec()).unwrap().unwrap()
}

fn protocol_code(result: Result<(), End>) -> u32 {
    match result {
        Err(End::Protocol(code, _)) => code,
        other => panic!("no protocol error: {other:?}"),
    }
}

// ---- windows and credit -------------------------------------------------------------------

#[test]
fn credit_batch_credit_goes_back_once_a_batch_is_consumed() {
    let mut st = state(Limits::default());
    let batch = Limits::default().credit_batch;
    feed(&mut st, &data(1, &vec![7u8; 1000], SYN)).unwrap();
    let mut sent = 1000;
    while sent < 2 * batch + 10 {
        let n = 32 * 1024;
        feed(&mut st, &data(1, &vec![7u8; n], 0)).unwrap();
        sent += n;
    }
    let mut read = 0;
    let mut increments = Vec::new();
    while read < 2 * batch - 1 {
        let got = st
            .read(1, 4096.min(2 * batch - 1 - read), |b| b.len())
            .unwrap()
            .unwrap();
        read += got;
        for f in parse(&mut st.out) {
            assert_eq!(f.typ, WNDINC);
            increments.push(code(&f));
        }
    }
    assert_eq!(increments, vec![batch as u32]); // the rest is held
    st.read(1, 1, |b| b.len()).unwrap();
    let more: Vec<u32> = parse(&mut st.out).iter().map(code).collect();
    assert_eq!(more, vec![batch as u32]);
}

#[test]
fn window_data_beyond_the_window_ends_the_session_with_flow_control() {
    let mut st = state(Limits::default());
    let window = Limits::default().window;
    feed(&mut st, &data(1, &vec![0u8; window], SYN)).unwrap();
    assert_eq!(
        protocol_code(feed(&mut st, &data(1, b"x", 0))),
        E_FLOW_CONTROL
    );
}

#[test]
fn window_a_writer_never_has_more_than_its_window_in_flight() {
    let mut st = state(Limits::default());
    let sid = st.open().unwrap();
    let window = Limits::default().window;
    let big = vec![1u8; 2 * window];
    let mut taken = 0;
    loop {
        let n = st.write(sid, &big[taken..]).unwrap();
        if n == 0 {
            break;
        }
        taken += n;
        parse(&mut st.out);
    }
    assert_eq!(taken, window);
    feed(&mut st, &frame(WNDINC, 0, sid, &1000u32.to_be_bytes())).unwrap();
    assert!(st.events.contains(&(EV_WRITABLE, sid)));
    assert_eq!(st.write(sid, &big[taken..]).unwrap(), 1000);
}

#[test]
fn syn_goes_with_the_first_frame_of_ours_only() {
    let mut st = state(Limits::default());
    let sid = st.open().unwrap();
    assert_eq!(sid % 2, 0);
    st.write(sid, b"head").unwrap();
    st.write(sid, b"more").unwrap();
    let frames = parse(&mut st.out);
    assert_eq!(frames[0].flags, SYN);
    assert_eq!(frames[1].flags, 0);
    assert_eq!(st.open().unwrap(), sid + 2);
}

// ---- out-of-order SYNs (OUT_OF_ORDER_IDS) ---------------------------------------------------

fn opened(limits: Limits, sids: &[u32]) -> (Vec<u32>, Option<u32>) {
    let mut st = state(limits);
    let mut got = Vec::new();
    for &sid in sids {
        match feed(&mut st, &data(sid, b"x", SYN)) {
            Ok(()) => got.extend(
                st.events
                    .drain(..)
                    .filter(|e| e.0 == EV_OPENED)
                    .map(|e| e.1),
            ),
            Err(End::Protocol(code, _)) => return (got, Some(code)),
            Err(e) => panic!("{e:?}"),
        }
    }
    (got, None)
}

#[test]
fn out_of_order_ids_a_syn_that_overtook_an_earlier_one_leaves_it_free_to_open() {
    assert_eq!(
        opened(Limits::default(), &[1, 5, 3, 9, 7]),
        (vec![1, 5, 3, 9, 7], None)
    );
    for sids in [&[3, 1][..], &[5, 1, 3], &[7, 3, 5, 1]] {
        assert_eq!(opened(Limits::default(), sids), (sids.to_vec(), None));
    }
}

#[test]
fn out_of_order_ids_each_passed_over_id_opens_once_and_old_ones_are_forgotten() {
    // an id used twice
    assert_eq!(
        opened(Limits::default(), &[1, 5, 3, 3]),
        (vec![1, 5, 3], Some(E_PROTOCOL))
    );
    // an id already seen in order
    assert_eq!(opened(Limits::default(), &[1, 3, 1]).1, Some(E_PROTOCOL));
    // beyond the bound: the oldest passed-over ids are forgotten
    let limits = Limits {
        out_of_order_ids: 4,
        ..Limits::default()
    };
    let (got, err) = opened(limits.clone(), &[21, 13]);
    assert_eq!((got, err), (vec![21, 13], None));
    let (_, err) = opened(limits.clone(), &[21, 11]);
    assert_eq!(err, Some(E_PROTOCOL));
    let mut st = state(limits);
    feed(&mut st, &data(101, b"", SYN)).unwrap();
    assert_eq!(st.passed_over(), 4);
}

#[test]
fn even_ids_and_live_ids_cannot_be_opened_by_the_peer() {
    assert_eq!(opened(Limits::default(), &[2]).1, Some(E_PROTOCOL));
    let mut st = state(Limits::default());
    feed(&mut st, &data(1, b"", SYN)).unwrap();
    assert_eq!(protocol_code(feed(&mut st, &data(1, b"", SYN))), E_PROTOCOL);
    let mut st = state(Limits::default());
    assert_eq!(protocol_code(feed(&mut st, &data(7, b"x", 0))), E_PROTOCOL);
}

// ---- the stream caps (MAX_STREAMS, MAX_LOCAL_STREAMS, SLOT_GRACE) --------------------------

#[test]
fn max_streams_a_syn_past_the_peers_limit_is_refused_with_rst_and_the_session_goes_on() {
    let mut st = state(Limits {
        max_streams: 2,
        ..Limits::default()
    });
    for sid in [1, 3, 5] {
        feed(&mut st, &data(sid, b"", SYN)).unwrap();
    }
    let frames = parse(&mut st.out);
    assert_eq!(frames.len(), 1);
    assert_eq!((frames[0].typ, frames[0].sid), (RST, 5));
    assert_eq!(code(&frames[0]), E_STREAMS_EXHAUSTED);
    assert!(!st.closed);
    // the edge's own streams do not count there
    let mut st = state(Limits {
        max_streams: 1,
        ..Limits::default()
    });
    st.open().unwrap();
    st.open().unwrap();
    feed(&mut st, &data(1, b"", SYN)).unwrap();
    assert_eq!(st.remote_open, 1);
}

#[test]
fn max_local_streams_opening_past_the_cap_fails_and_a_slot_comes_back_after_slot_grace() {
    let mut st = state(Limits {
        max_local_streams: 2,
        slot_grace: Duration::from_millis(150),
        ..Limits::default()
    });
    let a = st.open().unwrap();
    st.open().unwrap();
    assert!(matches!(st.open(), Err(StreamError::Exhausted(_))));
    st.write(a, b"x").unwrap(); // the peer knows it
    assert!(st.want_slot().is_none());
    feed(&mut st, &data(a, b"", FIN)).unwrap();
    st.finish(a);
    assert!(st.events.contains(&(EV_SLOT, 0)));
    let in_grace = st.want_slot().expect("a slot in grace");
    assert!(in_grace <= Duration::from_millis(150));
    assert!(matches!(st.open(), Err(StreamError::Exhausted(m)) if m.contains("ended just now")));
    std::thread::sleep(Duration::from_millis(170));
    assert!(st.open().is_ok());
}

#[test]
fn slot_grace_a_stream_the_agent_never_heard_of_gives_its_slot_back_at_once() {
    let mut st = state(Limits {
        max_local_streams: 1,
        ..Limits::default()
    });
    let a = st.open().unwrap();
    st.finish(a);
    assert!(parse(&mut st.out).is_empty()); // no frame for it
    assert!(st.open().is_ok());
}

// ---- how a stream ends (FIN before RST, LINGER_SECONDS) -----------------------------------

#[test]
fn finish_sends_fin_and_the_stream_stays_until_the_peers_fin() {
    let mut st = state(Limits::default());
    feed(&mut st, &data(1, b"req", SYN)).unwrap();
    st.finish(1);
    let frames = parse(&mut st.out);
    assert_eq!(
        (frames[0].typ, frames[0].flags, frames[0].sid),
        (DATA, FIN, 1)
    );
    assert_eq!((st.remote_open, st.lingering()), (1, 1));
    feed(&mut st, &data(1, b"", FIN)).unwrap();
    assert_eq!((st.remote_open, st.lingering(), st.held()), (0, 0, 0));
}

#[test]
fn finish_data_after_finish_is_refused_with_rst_and_the_stream_leaves() {
    let mut st = state(Limits::default());
    feed(&mut st, &data(1, b"req", SYN)).unwrap();
    st.finish(1);
    parse(&mut st.out);
    feed(&mut st, &data(1, b"more", 0)).unwrap();
    let frames = parse(&mut st.out);
    assert_eq!(frames.len(), 1);
    assert_eq!((frames[0].typ, code(&frames[0])), (RST, E_STREAM_CLOSED));
    assert_eq!((st.remote_open, st.held()), (0, 0));
}

#[test]
fn linger_a_finished_stream_without_the_peers_fin_is_reset() {
    let mut st = state(Limits {
        linger: Duration::from_millis(50),
        ..Limits::default()
    });
    feed(&mut st, &data(1, b"req", SYN)).unwrap();
    st.finish(1);
    parse(&mut st.out);
    let at = st.next_linger().expect("lingering");
    st.lingers_due(at - Duration::from_millis(10));
    assert_eq!(st.remote_open, 1);
    st.lingers_due(Instant::now() + Duration::from_millis(60));
    let frames = parse(&mut st.out);
    assert_eq!(frames.len(), 1);
    assert_eq!((frames[0].typ, code(&frames[0])), (RST, E_STREAM_CANCELLED));
    assert_eq!(st.remote_open, 0);
}

#[test]
fn fin_before_rst_a_reset_sends_fin_first() {
    let mut st = state(Limits::default());
    feed(&mut st, &data(1, b"req", SYN)).unwrap();
    st.reset(1, E_STREAM_CANCELLED);
    let frames = parse(&mut st.out);
    assert_eq!(frames.len(), 2);
    assert_eq!((frames[0].typ, frames[0].flags), (DATA, FIN));
    assert_eq!((frames[1].typ, code(&frames[1])), (RST, E_STREAM_CANCELLED));
    // a stream of ours the peer never heard of: no frame at all
    let sid = st.open().unwrap();
    st.reset(sid, E_STREAM_CANCELLED);
    assert!(parse(&mut st.out).is_empty());
    assert_eq!(st.local_open, 0);
}

#[test]
fn data_received_stays_readable_after_the_stream_left_the_table() {
    let mut st = state(Limits::default());
    let sid = st.open().unwrap();
    st.write(sid, b"req").unwrap();
    st.close_write(sid).unwrap();
    feed(&mut st, &data(sid, b"answer", FIN)).unwrap();
    assert_eq!(st.local_open, 0); // both FINs: out of the table
    assert_eq!(read_all(&mut st, sid), b"answer");
    assert_eq!(read_all(&mut st, sid), b"");
    st.finish(sid);
    assert_eq!(st.held(), 0);
}

#[test]
fn a_reset_from_the_peer_wakes_the_reader_and_fails_its_read() {
    let mut st = state(Limits::default());
    feed(&mut st, &data(1, b"", SYN)).unwrap();
    assert!(st.read(1, 10, |b| b.len()).unwrap().is_none());
    feed(
        &mut st,
        &frame(RST, 0, 1, &E_STREAM_CANCELLED.to_be_bytes()),
    )
    .unwrap();
    assert!(st.events.contains(&(EV_READABLE, 1)));
    assert!(
        matches!(st.read(1, 10, |b| b.len()), Err(StreamError::Reset(m)) if m.contains("code 6"))
    );
}

// ---- before authentication (PRE_AUTH_STREAMS, PRE_AUTH_BYTES) ------------------------------

#[test]
fn pre_auth_bytes_more_than_the_bound_before_authentication_ends_the_session() {
    let limits = Limits::default();
    let mut st = State::new(limits.clone());
    feed(&mut st, &data(1, &vec![0; limits.pre_auth_bytes - 10], SYN)).unwrap();
    feed(&mut st, &data(1, &[0; 10], 0)).unwrap();
    assert_eq!(
        protocol_code(feed(&mut st, &data(1, b"x", 0))),
        E_ENHANCE_YOUR_CALM
    );
}

#[test]
fn pre_auth_bytes_a_larger_frame_is_refused_at_its_header() {
    let limits = Limits::default();
    let mut st = State::new(limits.clone());
    let whole = data(1, &vec![0; limits.pre_auth_bytes + 1], SYN);
    // the header alone is enough: its payload is never held
    assert_eq!(protocol_code(feed(&mut st, &whole[..8])), E_FLOW_CONTROL);
}

#[test]
fn pre_auth_streams_more_than_the_bound_before_authentication_ends_the_session() {
    let mut st = State::new(Limits::default());
    feed(&mut st, &data(1, b"", SYN)).unwrap();
    feed(&mut st, &data(3, b"", SYN)).unwrap();
    assert_eq!(
        protocol_code(feed(&mut st, &data(5, b"", SYN))),
        E_ENHANCE_YOUR_CALM
    );
}

#[test]
fn authentication_lifts_the_bounds() {
    let limits = Limits::default();
    let mut st = State::new(limits.clone());
    st.authenticate();
    for sid in [1, 3, 5] {
        feed(&mut st, &data(sid, &vec![0; limits.pre_auth_bytes], SYN)).unwrap();
    }
    assert_eq!(st.remote_open, 3);
}

// ---- the wire, GOAWAY ---------------------------------------------------------------------

#[test]
fn malformed_headers_end_the_session_with_their_code() {
    let cases: Vec<(Vec<u8>, u32)> = vec![
        (data(0, b"x", 0), E_PROTOCOL),               // DATA on stream 0
        (frame(WNDINC, 0, 1, b"abc"), E_FRAME_SIZE),  // WNDINC of 3 bytes
        (frame(RST, SYN, 1, &[0; 4]), E_PROTOCOL),    // SYN on RST
        (frame(RST, 0, 0, &[0; 4]), E_PROTOCOL),      // RST on stream 0
        (frame(GOAWAY, 0, 0, &[0; 4]), E_FRAME_SIZE), // GOAWAY too short
        (frame(9, 0, 1, b""), E_PROTOCOL),            // unknown type
    ];
    for (bytes, expected) in cases {
        let mut st = state(Limits::default());
        assert_eq!(protocol_code(feed(&mut st, &bytes)), expected, "{bytes:?}");
    }
}

#[test]
fn a_frame_split_across_reads_is_handled_whole() {
    let mut st = state(Limits::default());
    let bytes = data(1, b"hello", SYN);
    let mut buf = bytes[..5].to_vec();
    st.feed(&mut buf).unwrap();
    assert!(st.events.is_empty());
    buf.extend_from_slice(&bytes[5..]);
    st.feed(&mut buf).unwrap();
    assert!(buf.is_empty());
    assert_eq!(read_all(&mut st, 1), b"hello");
}

#[test]
fn goaway_carries_its_code_message_and_the_last_id() {
    let mut st = state(Limits::default());
    feed(&mut st, &data(5, b"", SYN)).unwrap();
    st.go_away(E_NONE, "the edge is shutting down");
    let frames = parse(&mut st.out);
    let f = frames.last().unwrap();
    assert_eq!(f.typ, GOAWAY);
    assert_eq!(u32::from_be_bytes(f.payload[..4].try_into().unwrap()), 5);
    assert_eq!(code(f), E_NONE);
    assert_eq!(&f.payload[8..], b"the edge is shutting down");
    assert!(st.closed);
    assert!(st.events.contains(&(EV_CLOSED, 0)));
    assert!(matches!(
        st.read(5, 1, |b| b.len()),
        Err(StreamError::Reset(_))
    ));
    // the peer's GOAWAY ends the session with its message
    let mut st = state(Limits::default());
    let mut payload = 0u32.to_be_bytes().to_vec();
    payload.extend_from_slice(&E_NONE.to_be_bytes());
    payload.extend_from_slice(b"bye");
    assert_eq!(
        feed(&mut st, &frame(GOAWAY, 0, 0, &payload)),
        Err(End::GoneAway("peer went away (code 0): bye".into()))
    );
}

#[test]
fn unsent_pause_at_reading_stops_past_the_bound_and_resumes_once_written() {
    let mut st = state(Limits {
        max_streams: 1,
        unsent_pause_at: 1200,
        ..Limits::default()
    });
    let syns: Vec<u8> = (0..200u32)
        .flat_map(|i| data(2 * i + 1, b"", SYN))
        .collect();
    feed(&mut st, &syns).unwrap(); // 199 RSTs of 12 bytes queued
    assert!(st.reading_paused());
    st.in_flight = std::mem::take(&mut st.out).len();
    assert!(st.reading_paused());
    assert!(st.written());
    assert!(!st.reading_paused());
}
