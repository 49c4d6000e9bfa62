//! Server TLS configurations from PEM, as the edge's certificates are kept.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::{Arc, OnceLock, RwLock};

use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ProducesTickets, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::version::{TLS12, TLS13};
use tokio_rustls::rustls::{ServerConfig, SupportedProtocolVersion};

use crate::client_cert::OpenSslClientVerifier;

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// A certificate and its key, ready to serve: `chain_pem` (leaf first) with `key_pem`
/// (PKCS#8, SEC1 or PKCS#1).
pub fn certified_key(chain_pem: &[u8], key_pem: &[u8]) -> io::Result<Arc<CertifiedKey>> {
    let (chain, key) = parse(chain_pem, key_pem)?;
    let signing =
        ring::sign::any_supported_type(&key).map_err(|e| invalid(format!("private key: {e}")))?;
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

/// Which certificate a handshake gets: the one named for its SNI name (exactly, lower-case),
/// else the listener's own. The names are replaced whole by [`SniResolver::set`] while the
/// listener runs (the agent ingresses' certificates: edge/certs.py).
pub struct SniResolver {
    default: Arc<CertifiedKey>,
    names: RwLock<HashMap<String, Arc<CertifiedKey>>>,
}

impl fmt::Debug for SniResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SniResolver").finish_non_exhaustive()
    }
}

impl SniResolver {
    pub fn set(&self, names: HashMap<String, Arc<CertifiedKey>>) {
        *self.names.write().unwrap_or_else(|e| e.into_inner()) = names;
    }

    pub fn names_served(&self) -> usize {
        self.names.read().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(name) = hello.server_name() {
            let names = self.names.read().unwrap_or_else(|e| e.into_inner());
            if let Some(found) = names.get(&name.to_ascii_lowercase()) {
                return Some(found.clone());
            }
        }
        Some(self.default.clone())
    }
}

fn parse(
    chain_pem: &[u8],
    key_pem: &[u8],
) -> io::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let chain: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut &chain_pem[..])
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(format!("certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(invalid("certificate chain: no CERTIFICATE block".into()));
    }
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut &key_pem[..])
        .map_err(|e| invalid(format!("private key: {e}")))?
        .ok_or_else(|| invalid("private key: no PRIVATE KEY block".into()))?;
    Ok((chain, key))
}

/// A server configuration serving `chain_pem` (leaf first) with `key_pem` (PKCS#8, SEC1 or
/// PKCS#1), TLS 1.2 and 1.3 (the edge's minimum is TLS 1.2, as before), offering `alpn` in
/// the server's order of preference.
pub fn server_config(
    chain_pem: &[u8],
    key_pem: &[u8],
    alpn: Vec<Vec<u8>>,
) -> io::Result<Arc<ServerConfig>> {
    Ok(sni_server_config(chain_pem, key_pem, alpn)?.0)
}

/// The public HTTPS listener's configuration of one certificate (https.rs): as
/// [`server_config`] with ALPN h2 and http/1.1 (h2 preferred), and sessions resumed by stateless tickets (TLS 1.3
/// and 1.2), as the OpenSSL listener before it resumed them: one ticket key for all the
/// listener's certificates (a ticket names its server name, which resumption checks), made
/// at the first use and rotated by rustls every 6 hours; nothing kept per client.
pub fn public_server_config(chain_pem: &[u8], key_pem: &[u8]) -> io::Result<Arc<ServerConfig>> {
    public_server_config_requiring(chain_pem, key_pem, &Requires::default())
}

/// What a name requires of a handshake beyond the listener's TLS 1.2 and 1.3 without a client
/// certificate (edge/tls_spec.py's `TlsSpec`: an HTTPS edge's modules, an endpoint's mutual
/// TLS option, a `terminate-tls` action).
#[derive(Clone, Debug, Default)]
pub struct Requires {
    /// TLS 1.3 only (`min_version` 1.3): a client that offers no TLS 1.3 gets a
    /// protocol_version alert.
    pub tls13_only: bool,
    /// TLS 1.2 only (`terminate-tls`'s `max_version` 1.2).
    pub tls12_only: bool,
    /// A client certificate is required, and must chain to one of these CA certificates
    /// (DER); None: none is asked for.
    pub client_cas: Option<Vec<Vec<u8>>>,
}

/// [`public_server_config`] for a name that requires what `requires` says.
pub fn public_server_config_requiring(
    chain_pem: &[u8],
    key_pem: &[u8],
    requires: &Requires,
) -> io::Result<Arc<ServerConfig>> {
    static TICKETER: OnceLock<Arc<dyn ProducesTickets>> = OnceLock::new();
    let ticketer = match TICKETER.get() {
        Some(t) => t.clone(),
        None => {
            let made = ring::Ticketer::new().map_err(|e| invalid(format!("ticketer: {e}")))?;
            TICKETER.get_or_init(|| made).clone()
        }
    };
    let versions: &[&'static SupportedProtocolVersion] = match requires {
        Requires {
            tls13_only: true,
            tls12_only: true,
            ..
        } => return Err(invalid("TLS 1.3 only and TLS 1.2 only".into())),
        Requires {
            tls13_only: true, ..
        } => &[&TLS13],
        Requires {
            tls12_only: true, ..
        } => &[&TLS12],
        _ => &[&TLS13, &TLS12],
    };
    let provider = Arc::new(ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| invalid(format!("protocol versions: {e}")))?;
    let builder = match &requires.client_cas {
        None => builder.with_no_client_auth(),
        Some(cas) => {
            let verifier = OpenSslClientVerifier::new(cas).map_err(invalid)?;
            builder.with_client_cert_verifier(Arc::new(verifier))
        }
    };
    let key = certified_key(chain_pem, key_pem)?;
    key.keys_match()
        .map_err(|e| invalid(format!("certificate and key: {e}")))?;
    let resolver = Arc::new(SniResolver {
        default: key,
        names: RwLock::new(HashMap::new()),
    });
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    if requires.client_cas.is_none() {
        // a ticket names its server name, not what the handshake required
        config.ticketer = ticketer;
    } else {
        // a name that asks for a client certificate resumes no session: each connection's
        // certificate is checked now (a resumed TLS 1.2 session would carry its certificate
        // past its expiry, for as long as the configuration lives)
        config.session_storage = Arc::new(tokio_rustls::rustls::server::NoServerSessionStorage {});
    }
    Ok(Arc::new(config))
}

/// As [`server_config`], with its certificate chosen per SNI name by the returned resolver
/// (the listener's own certificate until names are set).
pub fn sni_server_config(
    chain_pem: &[u8],
    key_pem: &[u8],
    alpn: Vec<Vec<u8>>,
) -> io::Result<(Arc<ServerConfig>, Arc<SniResolver>)> {
    let default = certified_key(chain_pem, key_pem)?;
    default
        .keys_match()
        .map_err(|e| invalid(format!("certificate and key: {e}")))?;
    let resolver = Arc::new(SniResolver {
        default,
        names: RwLock::new(HashMap::new()),
    });
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(format!("protocol versions: {e}")))?
        .with_no_client_auth()
        .with_cert_resolver(resolver.clone());
    config.alpn_protocols = alpn;
    Ok((Arc::new(config), resolver))
}
