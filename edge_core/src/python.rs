//! The Python module `edge_core`: the typed seam's lower side (edge/core.py is its upper side,
//! edge_core.pyi its types).

use std::net::TcpListener as StdTcpListener;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::carrier::{Carrier, TlsListen, Where};
use crate::tls::server_config;

/// One connection handed over: (listener id, fd, peer host, peer port, SNI, ALPN).
type Handed = (u64, i32, String, u16, Option<String>, Option<Vec<u8>>);

#[pyclass(frozen, module = "edge_core")]
struct Core {
    carrier: Carrier,
}

#[pymethods]
impl Core {
    #[new]
    #[pyo3(signature = (threads = 0))]
    fn new(threads: usize) -> PyResult<Self> {
        Ok(Core {
            carrier: Carrier::new(threads).map_err(|e| PyOSError::new_err(e.to_string()))?,
        })
    }

    /// The descriptor that turns readable when connections wait to be taken.
    #[getter]
    fn wake_fd(&self) -> i32 {
        self.carrier.inbox().wake_fd()
    }

    /// Start a TLS listener on (host, port), or on the listening socket `fd` (the carrier
    /// owns it from then on). Returns (listener id, port).
    #[pyo3(signature = (chain_pem, key_pem, alpn, *, host = None, port = 0, fd = None,
                        handshake_timeout = 15.0, max_handshakes = 1024, relay_buffer = 16384))]
    #[allow(clippy::too_many_arguments)]
    fn listen_tls(
        &self,
        chain_pem: &[u8],
        key_pem: &[u8],
        alpn: Vec<Vec<u8>>,
        host: Option<String>,
        port: u16,
        fd: Option<i32>,
        handshake_timeout: f64,
        max_handshakes: usize,
        relay_buffer: usize,
    ) -> PyResult<(u64, u16)> {
        if !(handshake_timeout.is_finite() && handshake_timeout > 0.0) {
            return Err(PyValueError::new_err(
                "handshake_timeout must be a positive number",
            ));
        }
        if relay_buffer == 0 || max_handshakes == 0 {
            return Err(PyValueError::new_err(
                "relay_buffer and max_handshakes must be > 0",
            ));
        }
        let tls = server_config(chain_pem, key_pem, alpn)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let at = match (fd, host) {
            // SAFETY: the caller hands the descriptor over (documented in edge_core.pyi).
            (Some(fd), _) => Where::Socket(unsafe { StdTcpListener::from_raw_fd(fd) }),
            (None, Some(host)) => Where::Bind(host, port),
            (None, None) => return Err(PyValueError::new_err("give host and port, or fd")),
        };
        let spec = TlsListen {
            tls,
            handshake_timeout: Duration::from_secs_f64(handshake_timeout),
            max_handshakes,
            relay_buffer,
        };
        let (id, local) = self
            .carrier
            .listen_tls(at, spec)
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        Ok((id, local.port()))
    }

    /// Stop accepting on a listener; False when it was not listening.
    fn close(&self, listener: u64) -> bool {
        self.carrier.close(listener)
    }

    /// Every connection waiting, oldest first; each fd is the caller's to close from then on.
    fn take(&self) -> Vec<Handed> {
        self.carrier
            .inbox()
            .take()
            .into_iter()
            .map(|a| {
                (
                    a.listener,
                    a.fd.into_raw_fd(),
                    a.peer.ip().to_string(),
                    a.peer.port(),
                    a.sni,
                    a.alpn,
                )
            })
            .collect()
    }

    /// (handshakes in progress, relays running, connections refused over max_handshakes,
    /// handshakes failed or timed out).
    fn counters(&self) -> (usize, usize, u64, u64) {
        let c = &self.carrier.counters;
        (
            c.handshakes.load(Ordering::Relaxed),
            c.relays.load(Ordering::Relaxed),
            c.refused.load(Ordering::Relaxed),
            c.failed_handshakes.load(Ordering::Relaxed),
        )
    }
}

#[pymodule]
fn edge_core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Core>()?;
    Ok(())
}
