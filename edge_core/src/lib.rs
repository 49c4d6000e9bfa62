//! The edge's data path below Python.
//!
//! The edge (the Python package `edge`) decides; this crate carries bytes. Today it carries
//! one job: the agent listener's TLS. It accepts TCP connections, completes each TLS handshake
//! on its own threads (rustls), and hands Python one end of a Unix socket pair with the
//! plaintext, plus the connection's facts (peer address, SNI, ALPN); a relay task copies
//! between the TLS connection and the other end until both sides are done.
//!
//! Nothing here calls Python: accepted connections wait in an [`inbox::Inbox`] whose wake-up
//! descriptor the edge's event loop watches, and the edge takes them in batches.

pub mod carrier;
pub mod inbox;
pub mod quickack;
pub mod tls;

#[cfg(feature = "python")]
mod python;
