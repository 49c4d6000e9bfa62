"""muxado's constants as the edge uses them: the error codes it sends (GOAWAY, RST) and the
per-stream window. The wire itself is the compiled core's (edge_core/src/mux.rs); the codec
the tests' and the benchmarks' fake agents speak is stacks/muxado.py."""

DEFAULT_WINDOW = 256 * 1024  # the crate's DEFAULT_WINDOW: per stream, per direction

# error codes (muxado/src/errors.rs)
E_NONE, E_PROTOCOL, E_INTERNAL, E_FLOW_CONTROL, E_STREAM_CLOSED = 0, 1, 2, 3, 4
E_STREAM_REFUSED, E_STREAM_CANCELLED, E_STREAM_RESET, E_FRAME_SIZE = 5, 6, 7, 8
E_ACCEPT_QUEUE_FULL, E_ENHANCE_YOUR_CALM, E_REMOTE_GONE_AWAY = 9, 10, 11
E_STREAMS_EXHAUSTED, E_WRITE_TIMEOUT, E_SESSION_CLOSED, E_PEER_EOF = 12, 13, 14, 15
