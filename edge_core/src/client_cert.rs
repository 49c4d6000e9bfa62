//! Client certificates checked as OpenSSL checks them (mutual TLS on the public HTTPS listener).
//!
//! The edge's Python path verified client certificates with OpenSSL (`ssl`'s
//! `CERT_REQUIRED` with the name's CAs loaded), and the hosted service with Go's `crypto/x509`.
//! rustls' own verifier (webpki) disagrees with both where it matters to users: it refuses
//! version 1 certificates and a self-signed certificate used as both the CA and the client's,
//! cannot check a P-521 key, and accepts a certificate whose CA has expired. So the core asks
//! the same library the Python path asked: the chain is built and checked by OpenSSL's
//! `X509_verify_cert` (the CAs as trust anchors, the client's other certificates as untrusted
//! intermediates, purpose `sslclient`, the current time, OpenSSL's default depth), and the
//! handshake's signature by OpenSSL's `EVP_DigestVerify` with the leaf's key. No CA names are
//! sent in the certificate request, as the Python path sent none.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Mutex;

use openssl::ec::EcKeyRef;
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{Id, PKey, Public};
use openssl::rsa::Padding;
use openssl::sign::{RsaPssSaltlen, Verifier};
use openssl::stack::Stack;
use openssl::x509::store::{X509Store, X509StoreBuilder};
use openssl::x509::verify::X509VerifyParam;

use openssl::x509::{X509PurposeId, X509StoreContext, X509};
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::pki_types::{CertificateDer, UnixTime};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, Error, PeerIncompatible,
    SignatureScheme,
};

/// The signature schemes a client may sign its handshake with, most preferred first.
const SCHEMES: &[SignatureScheme] = &[
    SignatureScheme::ED25519,
    SignatureScheme::ECDSA_NISTP256_SHA256,
    SignatureScheme::ECDSA_NISTP384_SHA384,
    SignatureScheme::ECDSA_NISTP521_SHA512,
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PSS_SHA384,
    SignatureScheme::RSA_PSS_SHA512,
    SignatureScheme::RSA_PKCS1_SHA256,
    SignatureScheme::RSA_PKCS1_SHA384,
    SignatureScheme::RSA_PKCS1_SHA512,
    SignatureScheme::ED448,
];

/// The security level Python's `ssl` contexts run at (CPython 3.10+: `@SECLEVEL=2`), which
/// OpenSSL's TLS server applies to the client's chain as the verification's auth level.
const AUTH_LEVEL: i32 = 2;

/// Intermediate certificates a client may send with its own (OpenSSL's default depth is 100:
/// a bound of the edge's, docs/SECURITY.md).
pub const MAX_INTERMEDIATES: usize = 10;

/// A client certificate verifier over `cas` (DER), as OpenSSL verifies.
pub struct OpenSslClientVerifier {
    store: X509Store,
    /// The keys of the last leaves [`OpenSslClientVerifier::check`] verified, by their DER:
    /// the handshake's signature is checked with its key right after, and parsing a
    /// certificate again costs OpenSSL 3 ~100 µs (measured; nginx parses it once too).
    recent: Mutex<VecDeque<(Vec<u8>, PKey<Public>)>>,
}

/// How many verified leaves' keys are kept for their handshakes' signatures.
const RECENT: usize = 32;

impl fmt::Debug for OpenSslClientVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenSslClientVerifier")
            .finish_non_exhaustive()
    }
}

impl OpenSslClientVerifier {
    /// A verifier trusting each of `cas` (DER certificates); an error names one that does not
    /// parse.
    pub fn new(cas: &[Vec<u8>]) -> Result<Self, String> {
        let mut builder = X509StoreBuilder::new().map_err(|e| e.to_string())?;
        for der in cas {
            let ca = X509::from_der(der).map_err(|e| format!("client CA certificate: {e}"))?;
            builder
                .add_cert(ca)
                .map_err(|e| format!("client CA certificate: {e}"))?;
        }
        // what OpenSSL's TLS server sets for the client's chain (ssl_verify_cert_chain): the
        // purpose, and the context's security level as the auth level (Python's ssl context is
        // at level 2: no RSA/DSA/DH key under 2048 bits, no EC key under 224, no SHA-1 or MD5
        // signature in the chain; Go refuses SHA-1 signatures too)
        let mut param = X509VerifyParam::new().map_err(|e| e.to_string())?;
        param.set_auth_level(AUTH_LEVEL);
        builder.set_param(&param).map_err(|e| e.to_string())?;
        builder
            .set_purpose(X509PurposeId::SSL_CLIENT)
            .map_err(|e| e.to_string())?;
        Ok(OpenSslClientVerifier {
            store: builder.build(),
            recent: Mutex::new(VecDeque::with_capacity(RECENT)),
        })
    }

    /// Whether OpenSSL verifies `leaf` with `intermediates` to one of the CAs now: Ok, or
    /// OpenSSL's reason.
    pub fn check(&self, der: &[u8], intermediates: &[&[u8]]) -> Result<(), String> {
        if intermediates.len() > MAX_INTERMEDIATES {
            // refused before OpenSSL builds anything: a chain's cost is bounded (a Certificate
            // message of 64 KiB holds ~220 certificates, 25-50 ms of chain building)
            return Err(format!(
                "more than {MAX_INTERMEDIATES} intermediate certificates"
            ));
        }
        let leaf = X509::from_der(der).map_err(|e| format!("client certificate: {e}"))?;
        let mut chain = Stack::new().map_err(|e| e.to_string())?;
        for der in intermediates {
            let cert = X509::from_der(der).map_err(|e| format!("client certificate: {e}"))?;
            chain.push(cert).map_err(|e| e.to_string())?;
        }
        let mut context = X509StoreContext::new().map_err(|e| e.to_string())?;
        context
            .init(&self.store, &leaf, &chain, |c| {
                Ok(if c.verify_cert()? {
                    Ok(())
                } else {
                    Err(c.error().error_string().to_string())
                })
            })
            .map_err(|e| e.to_string())??;
        if let Ok(key) = leaf.public_key() {
            let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back((der.to_vec(), key));
        }
        Ok(())
    }

    /// A handshake's signature `dss` over `message` by the key of `cert`.
    fn verify_dss(
        &self,
        message: &[u8],
        cert: &[u8],
        dss: &DigitallySignedStruct,
        tls13: bool,
    ) -> Result<HandshakeSignatureValid, Error> {
        let key = self.key_for(cert)?;
        verify_with(&key, message, dss.scheme, dss.signature(), tls13)
    }

    /// The key of `cert` (DER): the one [`OpenSslClientVerifier::check`] kept, else parsed.
    fn key_for(&self, cert: &[u8]) -> Result<PKey<Public>, Error> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        match recent.iter().rev().find(|(der, _)| der == cert) {
            Some((_, key)) => Ok(key.clone()),
            None => {
                drop(recent);
                key_of(cert)
            }
        }
    }
}

fn bad_signature() -> Error {
    Error::InvalidCertificate(CertificateError::BadSignature)
}

/// The key of `cert`, for a handshake signature.
fn key_of(cert: &[u8]) -> Result<PKey<Public>, Error> {
    X509::from_der(cert)
        .and_then(|c| c.public_key())
        .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))
}

fn curve(key: &EcKeyRef<Public>) -> Option<Nid> {
    key.group().curve_name()
}

/// Verifies `signature` (by `scheme`) over `message` with the key of `cert` (DER); in TLS 1.3
/// an ECDSA scheme also names the key's curve.
pub fn verify_signature(
    message: &[u8],
    cert: &[u8],
    scheme: SignatureScheme,
    signature: &[u8],
    tls13: bool,
) -> Result<HandshakeSignatureValid, Error> {
    verify_with(&key_of(cert)?, message, scheme, signature, tls13)
}

fn verify_with(
    key: &PKey<Public>,
    message: &[u8],
    scheme: SignatureScheme,
    signature: &[u8],
    tls13: bool,
) -> Result<HandshakeSignatureValid, Error> {
    let (digest, pss) = match scheme {
        SignatureScheme::ED25519 | SignatureScheme::ED448 => {
            let wanted = if scheme == SignatureScheme::ED25519 {
                Id::ED25519
            } else {
                Id::ED448
            };
            if key.id() != wanted {
                return Err(bad_signature());
            }
            let mut verifier = Verifier::new_without_digest(key).map_err(|_| bad_signature())?;
            return match verifier.verify_oneshot(signature, message) {
                Ok(true) => Ok(HandshakeSignatureValid::assertion()),
                _ => Err(bad_signature()),
            };
        }
        SignatureScheme::ECDSA_NISTP256_SHA256
        | SignatureScheme::ECDSA_NISTP384_SHA384
        | SignatureScheme::ECDSA_NISTP521_SHA512 => {
            let (digest, nid) = match scheme {
                SignatureScheme::ECDSA_NISTP256_SHA256 => {
                    (MessageDigest::sha256(), Nid::X9_62_PRIME256V1)
                }
                SignatureScheme::ECDSA_NISTP384_SHA384 => (MessageDigest::sha384(), Nid::SECP384R1),
                _ => (MessageDigest::sha512(), Nid::SECP521R1),
            };
            let ec = key.ec_key().map_err(|_| bad_signature())?;
            if tls13 && curve(&ec) != Some(nid) {
                return Err(bad_signature());
            }
            (digest, false)
        }
        // not a CertificateVerify scheme in TLS 1.3 (RFC 8446 4.4.3; OpenSSL refuses it)
        SignatureScheme::RSA_PKCS1_SHA256
        | SignatureScheme::RSA_PKCS1_SHA384
        | SignatureScheme::RSA_PKCS1_SHA512
            if tls13 =>
        {
            return Err(Error::PeerMisbehaved(
                tokio_rustls::rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme,
            ))
        }
        SignatureScheme::RSA_PKCS1_SHA256 => (MessageDigest::sha256(), false),
        SignatureScheme::RSA_PKCS1_SHA384 => (MessageDigest::sha384(), false),
        SignatureScheme::RSA_PKCS1_SHA512 => (MessageDigest::sha512(), false),
        SignatureScheme::RSA_PSS_SHA256 => (MessageDigest::sha256(), true),
        SignatureScheme::RSA_PSS_SHA384 => (MessageDigest::sha384(), true),
        SignatureScheme::RSA_PSS_SHA512 => (MessageDigest::sha512(), true),
        _ => {
            return Err(Error::PeerIncompatible(
                PeerIncompatible::NoSignatureSchemesInCommon,
            ))
        }
    };
    let is_rsa = matches!(
        scheme,
        SignatureScheme::RSA_PKCS1_SHA256
            | SignatureScheme::RSA_PKCS1_SHA384
            | SignatureScheme::RSA_PKCS1_SHA512
            | SignatureScheme::RSA_PSS_SHA256
            | SignatureScheme::RSA_PSS_SHA384
            | SignatureScheme::RSA_PSS_SHA512
    );
    if is_rsa != (key.id() == Id::RSA) {
        return Err(bad_signature());
    }
    let mut verifier = Verifier::new(digest, key).map_err(|_| bad_signature())?;
    if pss {
        verifier
            .set_rsa_padding(Padding::PKCS1_PSS)
            .and_then(|_| verifier.set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH))
            .and_then(|_| verifier.set_rsa_mgf1_md(digest))
            .map_err(|_| bad_signature())?;
    }
    match verifier.verify_oneshot(signature, message) {
        Ok(true) => Ok(HandshakeSignatureValid::assertion()),
        _ => Err(bad_signature()),
    }
}

impl ClientCertVerifier for OpenSslClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let rest: Vec<&[u8]> = intermediates.iter().map(|c| c.as_ref()).collect();
        self.check(end_entity, &rest)
            .map(|_| ClientCertVerified::assertion())
            .map_err(|reason| {
                Error::InvalidCertificate(CertificateError::Other(
                    tokio_rustls::rustls::OtherError(std::sync::Arc::new(Refused(reason))),
                ))
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.verify_dss(message, cert, dss, false)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.verify_dss(message, cert, dss, true)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        SCHEMES.to_vec()
    }
}

/// OpenSSL's reason for refusing a client's certificate.
#[derive(Debug)]
struct Refused(String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}
