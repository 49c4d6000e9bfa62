//! Server TLS configurations from PEM, as the edge's certificates are kept.

use std::io;
use std::sync::Arc;

use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// A server configuration serving `chain_pem` (leaf first) with `key_pem` (PKCS#8, SEC1 or
/// PKCS#1), TLS 1.2 and 1.3 (the edge's minimum is TLS 1.2, as before), offering `alpn` in
/// the server's order of preference.
pub fn server_config(
    chain_pem: &[u8],
    key_pem: &[u8],
    alpn: Vec<Vec<u8>>,
) -> io::Result<Arc<ServerConfig>> {
    let chain: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut &chain_pem[..])
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(format!("certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(invalid("certificate chain: no CERTIFICATE block".into()));
    }
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut &key_pem[..])
        .map_err(|e| invalid(format!("private key: {e}")))?
        .ok_or_else(|| invalid("private key: no PRIVATE KEY block".into()))?;
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(format!("protocol versions: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| invalid(format!("certificate and key: {e}")))?;
    config.alpn_protocols = alpn;
    Ok(Arc::new(config))
}
