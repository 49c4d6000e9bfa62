"""The muxado frame codec the tests' fake agents speak (stacks/muxado.py), alone: the wire
layout of the ``muxado`` crate (ngrok-rust muxado/src/frame.rs), every malformed header
refused with its error code, frames split at any byte, and the bound on what one frame may make the parser buffer.

The session's stream state machine over these frames (SYN, FIN, RST, window credit, linger,
the pre-authentication bounds) is tests/unit/test_edge_session.py.
"""

import pytest

from stacks import muxado


def header(length: int, type_: int, flags: int, stream_id: int) -> bytes:
    return ((length << 8) | (type_ << 4) | flags).to_bytes(4, "big") + stream_id.to_bytes(4, "big")


# ---- the layout, byte for byte ------------------------------------------------------------
def test_data_frame_layout_is_length_type_flags_then_stream_id():
    frame = muxado.data(5, b"abc", syn=True, fin=True)
    assert frame == bytes([0, 0, 3, 0x13, 0, 0, 0, 5]) + b"abc"


def test_control_frame_layouts():
    assert muxado.rst(7, muxado.E_STREAM_CANCELLED) == bytes(
        [0, 0, 4, 0x00, 0, 0, 0, 7, 0, 0, 0, 6]
    )
    assert muxado.wndinc(9, 65536) == bytes([0, 0, 4, 0x20, 0, 0, 0, 9, 0, 1, 0, 0])
    assert (
        muxado.goaway(3, muxado.E_NONE, b"bye")
        == bytes([0, 0, 11, 0x30, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0]) + b"bye"
    )


def test_the_reserved_bit_of_the_stream_id_is_never_sent_and_ignored_when_received():
    assert muxado.data(0xFFFFFFFF, b"")[4:] == bytes([0x7F, 0xFF, 0xFF, 0xFF])
    frames = muxado.FrameParser().feed(header(0, muxado.DATA, 0, 0x80000001))
    assert frames[0].stream_id == 1


def test_a_window_increment_is_capped_at_31_bits():
    frame = muxado.FrameParser().feed(muxado.wndinc(1, 2**40))[0]
    assert frame.increment == muxado.WNDINC_MAX


def test_decoded_fields_of_each_control_frame():
    rst, wnd, away = muxado.FrameParser().feed(
        muxado.rst(1, muxado.E_FLOW_CONTROL)
        + muxado.wndinc(1, 10)
        + muxado.goaway(41, muxado.E_PROTOCOL, b"why")
    )
    assert (rst.type, rst.stream_id, rst.error_code) == (muxado.RST, 1, muxado.E_FLOW_CONTROL)
    assert (wnd.type, wnd.increment) == (muxado.WNDINC, 10)
    assert (away.type, away.last_stream_id, away.error_code, away.message) == (
        muxado.GOAWAY,
        41,
        muxado.E_PROTOCOL,
        b"why",
    )
    with pytest.raises(ValueError):
        _ = wnd.error_code


def test_flags():
    syn, fin, plain = muxado.FrameParser().feed(
        muxado.data(1, b"", syn=True) + muxado.data(1, b"", fin=True) + muxado.data(1, b"x")
    )
    assert (syn.syn, syn.fin) == (True, False)
    assert (fin.syn, fin.fin) == (False, True)
    assert (plain.syn, plain.fin, plain.payload) == (False, False, b"x")


def test_a_payload_longer_than_24_bits_cannot_be_encoded():
    muxado.encode(muxado.DATA, 0, 1, b"\0" * muxado.LENGTH_MAX)
    with pytest.raises(ValueError):
        muxado.encode(muxado.DATA, 0, 1, b"\0" * (muxado.LENGTH_MAX + 1))


def test_a_goaway_message_is_cut_to_what_a_frame_carries():
    frame = muxado.goaway(1, 0, b"m" * (muxado.LENGTH_MAX + 10))
    assert int.from_bytes(frame[:3], "big") == muxado.LENGTH_MAX


# ---- parsing: any split, nothing lost, nothing kept --------------------------------------
def test_frames_split_at_every_byte_arrive_whole_and_in_order():
    wire = (
        muxado.data(1, b"hello", syn=True)
        + muxado.wndinc(1, 100)
        + muxado.data(1, b"", fin=True)
        + muxado.rst(3, 2)
        + muxado.goaway(3, 0, b"x")
    )
    whole = muxado.FrameParser().feed(wire)
    assert len(whole) == 5
    for cut in range(1, len(wire)):
        parser = muxado.FrameParser()
        assert parser.feed(wire[:cut]) + parser.feed(wire[cut:]) == whole
    parser = muxado.FrameParser()
    assert [f for byte in wire for f in parser.feed(bytes([byte]))] == whole


def test_a_parser_that_consumed_everything_holds_no_buffer():
    parser = muxado.FrameParser()
    parser.feed(muxado.data(1, b"x" * 1000, syn=True))
    assert len(parser._buf) == 0
    parser.feed(muxado.data(1, b"y" * 10)[:5])
    assert len(parser._buf) == 5


# ---- malformed headers: refused at the header, with the crate's error code -----------------
@pytest.mark.parametrize(
    "raw, code",
    [
        (header(0, muxado.DATA, 0, 0), muxado.E_PROTOCOL),  # DATA on stream 0
        (header(0, muxado.RST, muxado.SYN, 1), muxado.E_PROTOCOL),  # SYN on a non-DATA
        (header(0, muxado.WNDINC, muxado.SYN, 1), muxado.E_PROTOCOL),
        (header(8, muxado.GOAWAY, muxado.SYN, 0), muxado.E_PROTOCOL),
        (header(3, muxado.RST, 0, 1), muxado.E_FRAME_SIZE),  # RST is 4 bytes
        (header(5, muxado.RST, 0, 1), muxado.E_FRAME_SIZE),
        (header(3, muxado.WNDINC, 0, 1), muxado.E_FRAME_SIZE),  # WNDINC is 4 bytes
        (header(5, muxado.WNDINC, 0, 1), muxado.E_FRAME_SIZE),
        (header(4, muxado.RST, 0, 0), muxado.E_PROTOCOL),  # on stream 0
        (header(4, muxado.WNDINC, 0, 0), muxado.E_PROTOCOL),
        (header(7, muxado.GOAWAY, 0, 0), muxado.E_FRAME_SIZE),  # GOAWAY ≥ 8 bytes
        (header(8 + 64 * 1024 + 1, muxado.GOAWAY, 0, 0), muxado.E_FRAME_SIZE),
        (header(0, 4, 0, 1), muxado.E_PROTOCOL),  # unknown types
        (header(0, 15, 0, 1), muxado.E_PROTOCOL),
    ],
)
def test_a_malformed_header_is_refused_before_its_payload(raw, code):
    with pytest.raises(muxado.ProtocolError) as refused:
        muxado.FrameParser().feed(raw)  # the header alone: no payload needed to refuse
    assert refused.value.code == code


@pytest.mark.parametrize("length", [8, 8 + 64 * 1024])
def test_goaway_lengths_at_the_bounds_are_accepted(length):
    raw = header(length, muxado.GOAWAY, 0, 0) + bytes(length)
    assert muxado.FrameParser().feed(raw)[0].type == muxado.GOAWAY


def test_a_data_frame_is_bounded_by_the_window_at_its_header():
    parser = muxado.FrameParser(max_payload=1000)
    assert parser.feed(muxado.data(1, b"x" * 1000))[0].payload == b"x" * 1000
    with pytest.raises(muxado.ProtocolError) as refused:
        parser.feed(header(1001, muxado.DATA, 0, 1))
    assert refused.value.code == muxado.E_FLOW_CONTROL


def test_the_default_bound_is_the_crates_window():
    parser = muxado.FrameParser()
    assert parser.max_payload == muxado.DEFAULT_WINDOW == 256 * 1024
    with pytest.raises(muxado.ProtocolError):
        parser.feed(header(muxado.DEFAULT_WINDOW + 1, muxado.DATA, 0, 1))
