//! The edge's data path below Python.
//!
//! The edge (the Python package `edge`) decides; this crate carries bytes. Today it carries
//! the agent listener: it accepts TCP connections, completes each TLS handshake on its own
//! threads (rustls), and runs each agent's muxado session ([`mux`], [`session`]): framing,
//! flow control, the stream table and its bounds, and the echo of its heartbeats
//! ([`heartbeat`]). Python gets the session and its streams
//! through a typed seam (python.rs, edge_core.pyi) and keeps every decision.
//!
//! A route with a traffic policy is *decided* ([`decide`]): the core reads each request's
//! head, Python decides (forward as rewritten, answer, close) and the core carries; a
//! decision Python says holds for every request with the same facts is applied again by the
//! core to such requests ([`held`]).
//!
//! Nothing here calls Python: accepted sessions and the sessions' events wait in an
//! [`inbox::Inbox`] whose wake-up descriptor the edge's event loop watches, and the edge takes
//! them in batches.

pub mod carrier;
pub mod client_cert;
pub mod decide;
pub mod encode;
pub mod h2front;
pub mod h2up;
pub mod heartbeat;
pub mod held;
pub mod http;
pub mod https;
pub mod inbox;
pub mod mux;
pub mod proxyproto;
pub mod public;
pub mod quickack;
pub mod relay;
pub mod session;
pub mod splice;
pub mod tls;
pub mod wstcp;

#[cfg(feature = "python")]
mod python;
