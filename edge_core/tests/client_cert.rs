//! Client certificates as OpenSSL checks them (client_cert.rs): the cases where rustls' own
//! verifier disagreed with OpenSSL (the edge's Python path) and Go (the hosted service), and
//! the handshake signatures a client may make.

use edge_core::client_cert::{verify_signature, OpenSslClientVerifier};
use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::rsa::{Padding, Rsa};
use openssl::sign::{RsaPssSaltlen, Signer};
use openssl::x509::extension::{BasicConstraints, ExtendedKeyUsage};
use openssl::x509::{X509Builder, X509NameBuilder, X509};
use tokio_rustls::rustls::SignatureScheme;

const DAY: i64 = 86_400;

fn p256() -> PKey<Private> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
}

fn p521() -> PKey<Private> {
    let group = EcGroup::from_curve_name(Nid::SECP521R1).unwrap();
    PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
}

struct Made<'a> {
    name: &'a str,
    key: &'a PKey<Private>,
    /// the issuer's certificate and key; None: self-signed
    by: Option<(&'a X509, &'a PKey<Private>)>,
    /// 0: version 1 (no extensions), 2: version 3
    version: i32,
    /// validity, in days from now
    from: i64,
    to: i64,
    ca: bool,
    /// extended key usage: None for none, else client (true) or server (false) only
    client_eku: Option<bool>,
    /// the issuer's signature's digest
    digest: MessageDigest,
}

impl Made<'_> {
    fn cert(&self) -> X509 {
        let mut name = X509NameBuilder::new().unwrap();
        name.append_entry_by_text("CN", self.name).unwrap();
        let name = name.build();
        let mut b = X509Builder::new().unwrap();
        b.set_version(self.version).unwrap();
        let serial = BigNum::from_u32(rand_serial())
            .unwrap()
            .to_asn1_integer()
            .unwrap();
        b.set_serial_number(&serial).unwrap();
        b.set_subject_name(&name).unwrap();
        match self.by {
            Some((issuer, _)) => b.set_issuer_name(issuer.subject_name()).unwrap(),
            None => b.set_issuer_name(&name).unwrap(),
        }
        b.set_pubkey(self.key).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        b.set_not_before(&Asn1Time::from_unix(now + self.from * DAY).unwrap())
            .unwrap();
        b.set_not_after(&Asn1Time::from_unix(now + self.to * DAY).unwrap())
            .unwrap();
        if self.version == 2 {
            if self.ca {
                b.append_extension(BasicConstraints::new().critical().ca().build().unwrap())
                    .unwrap();
            }
            match self.client_eku {
                Some(true) => b
                    .append_extension(ExtendedKeyUsage::new().client_auth().build().unwrap())
                    .unwrap(),
                Some(false) => b
                    .append_extension(ExtendedKeyUsage::new().server_auth().build().unwrap())
                    .unwrap(),
                None => {}
            }
        }
        let signer = self.by.map(|(_, k)| k).unwrap_or(self.key);
        b.sign(signer, self.digest).unwrap();
        b.build()
    }
}

fn rand_serial() -> u32 {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn ca<'a>(name: &'a str, key: &'a PKey<Private>, from: i64, to: i64) -> Made<'a> {
    Made {
        name,
        key,
        by: None,
        version: 2,
        from,
        to,
        ca: true,
        client_eku: None,
        digest: MessageDigest::sha256(),
    }
}

fn leaf<'a>(name: &'a str, key: &'a PKey<Private>, by: (&'a X509, &'a PKey<Private>)) -> Made<'a> {
    Made {
        name,
        key,
        by: Some(by),
        version: 2,
        from: -1,
        to: 30,
        ca: false,
        client_eku: Some(true),
        digest: MessageDigest::sha256(),
    }
}

fn verifier(cas: &[&X509]) -> OpenSslClientVerifier {
    let ders: Vec<Vec<u8>> = cas.iter().map(|c| c.to_der().unwrap()).collect();
    OpenSslClientVerifier::new(&ders).unwrap()
}

fn check(v: &OpenSslClientVerifier, leaf: &X509, rest: &[&X509]) -> Result<(), String> {
    let ders: Vec<Vec<u8>> = rest.iter().map(|c| c.to_der().unwrap()).collect();
    let refs: Vec<&[u8]> = ders.iter().map(|d| d.as_slice()).collect();
    v.check(&leaf.to_der().unwrap(), &refs)
}

#[test]
fn a_certificate_the_ca_signed_is_accepted_and_another_cas_or_a_stray_one_refused() {
    let (ca_key, other_key, key) = (p256(), p256(), p256());
    let ca_cert = ca("client CA", &ca_key, -1, 365).cert();
    // another CA of the same name: the signature tells them apart
    let other = ca("client CA", &other_key, -1, 365).cert();
    let good = leaf("client", &key, (&ca_cert, &ca_key)).cert();
    let stray = leaf("client", &key, (&other, &other_key)).cert();
    let v = verifier(&[&ca_cert]);
    assert_eq!(check(&v, &good, &[]), Ok(()));
    assert!(check(&v, &stray, &[]).is_err());
    assert!(v.check(b"not a certificate", &[]).is_err());
}

#[test]
fn a_version_1_client_certificate_is_accepted_as_openssl_and_go_accept_it() {
    let (ca_key, key) = (p256(), p256());
    let ca_cert = ca("client CA", &ca_key, -1, 365).cert();
    let mut made = leaf("client v1", &key, (&ca_cert, &ca_key));
    made.version = 0;
    let cert = made.cert();
    assert_eq!(cert.version(), 0);
    assert_eq!(check(&verifier(&[&ca_cert]), &cert, &[]), Ok(()));
}

#[test]
fn a_self_signed_certificate_trusted_as_its_own_ca_is_accepted() {
    let key = p256();
    let mut made = ca("self", &key, -1, 365);
    made.ca = false;
    made.client_eku = Some(true);
    let cert = made.cert();
    assert_eq!(check(&verifier(&[&cert]), &cert, &[]), Ok(()));
}

#[test]
fn a_certificate_whose_ca_expired_or_is_not_yet_valid_is_refused() {
    let (ca_key, key) = (p256(), p256());
    for (from, to) in [(-30, -1), (1, 30)] {
        let ca_cert = ca("client CA", &ca_key, from, to).cert();
        let cert = leaf("client", &key, (&ca_cert, &ca_key)).cert();
        let refused = check(&verifier(&[&ca_cert]), &cert, &[]).unwrap_err();
        assert!(
            refused.contains("expired") || refused.contains("not yet valid"),
            "{refused}"
        );
    }
}

#[test]
fn an_expired_client_certificate_is_refused() {
    let (ca_key, key) = (p256(), p256());
    let ca_cert = ca("client CA", &ca_key, -30, 365).cert();
    let mut made = leaf("client", &key, (&ca_cert, &ca_key));
    made.to = -1;
    let refused = check(&verifier(&[&ca_cert]), &made.cert(), &[]).unwrap_err();
    assert!(refused.contains("expired"), "{refused}");
}

#[test]
fn an_intermediate_the_client_sends_completes_its_chain() {
    let (root_key, mid_key, key) = (p256(), p256(), p256());
    let root = ca("root", &root_key, -1, 365).cert();
    let mut mid = ca("intermediate", &mid_key, -1, 365);
    mid.by = Some((&root, &root_key));
    let mid = mid.cert();
    let cert = leaf("client", &key, (&mid, &mid_key)).cert();
    let v = verifier(&[&root]);
    assert_eq!(check(&v, &cert, &[&mid]), Ok(()));
    assert!(check(&v, &cert, &[]).is_err());
}

#[test]
fn a_certificate_for_servers_only_is_refused_as_a_clients() {
    let (ca_key, key) = (p256(), p256());
    let ca_cert = ca("client CA", &ca_key, -1, 365).cert();
    let mut made = leaf("server", &key, (&ca_cert, &ca_key));
    made.client_eku = Some(false);
    assert!(check(&verifier(&[&ca_cert]), &made.cert(), &[]).is_err());
    made.client_eku = None; // no extended key usage: any purpose
    assert_eq!(check(&verifier(&[&ca_cert]), &made.cert(), &[]), Ok(()));
}

#[test]
fn weak_certificates_are_refused_as_pythons_ssl_refuses_them() {
    // OpenSSL's TLS server checks the chain at its security level, Python's at 2: no SHA-1
    // signature, no RSA key under 2048 bits (Go refuses SHA-1 too)
    let (ca_key, key) = (p256(), p256());
    let ca_cert = ca("client CA", &ca_key, -1, 365).cert();
    let v = verifier(&[&ca_cert]);
    let mut made = leaf("sha1", &key, (&ca_cert, &ca_key));
    made.digest = MessageDigest::sha1();
    assert!(check(&v, &made.cert(), &[]).is_err());
    let small = PKey::from_rsa(Rsa::generate(1024).unwrap()).unwrap();
    assert!(check(
        &v,
        &leaf("rsa1024", &small, (&ca_cert, &ca_key)).cert(),
        &[]
    )
    .is_err());
    let enough = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
    let cert = leaf("rsa2048", &enough, (&ca_cert, &ca_key)).cert();
    assert_eq!(check(&v, &cert, &[]), Ok(()));
}

#[test]
fn a_chain_of_more_intermediates_than_the_bound_is_refused_before_it_is_built() {
    use edge_core::client_cert::MAX_INTERMEDIATES;
    let root_key = p256();
    let root = ca("root", &root_key, -1, 365).cert();
    let keys: Vec<PKey<Private>> = (0..=MAX_INTERMEDIATES).map(|_| p256()).collect();
    let names: Vec<String> = (0..=MAX_INTERMEDIATES)
        .map(|n| format!("mid {n}"))
        .collect();
    let mut mids: Vec<X509> = Vec::new();
    for (n, key) in keys.iter().enumerate() {
        let mut made = ca(&names[n], key, -1, 365);
        made.by = Some(match n {
            0 => (&root, &root_key),
            _ => (&mids[n - 1], &keys[n - 1]),
        });
        let cert = made.cert();
        mids.push(cert);
    }
    let key = p256();
    let v = verifier(&[&root]);
    // MAX_INTERMEDIATES of them, the leaf's issuer first: verified
    let last = MAX_INTERMEDIATES - 1;
    let cert = leaf("client", &key, (&mids[last], &keys[last])).cert();
    let sent: Vec<&X509> = mids[..MAX_INTERMEDIATES].iter().rev().collect();
    assert_eq!(check(&v, &cert, &sent), Ok(()));
    // one more: refused, whatever they are
    let cert = leaf("client", &key, (&mids[last + 1], &keys[last + 1])).cert();
    let sent: Vec<&X509> = mids.iter().rev().collect();
    let refused = check(&v, &cert, &sent).unwrap_err();
    assert!(refused.contains("intermediate"), "{refused}");
}

fn signed(
    key: &PKey<Private>,
    digest: Option<MessageDigest>,
    pss: bool,
    message: &[u8],
) -> Vec<u8> {
    let mut signer = match digest {
        Some(d) => Signer::new(d, key).unwrap(),
        None => Signer::new_without_digest(key).unwrap(),
    };
    if pss {
        signer.set_rsa_padding(Padding::PKCS1_PSS).unwrap();
        signer
            .set_rsa_pss_saltlen(RsaPssSaltlen::DIGEST_LENGTH)
            .unwrap();
    }
    signer.sign_oneshot_to_vec(message).unwrap()
}

#[test]
fn handshake_signatures_verify_by_their_scheme_and_key() {
    let message = b"the handshake's transcript, signed";
    let ca_key = p256();
    let ca_cert = ca("client CA", &ca_key, -1, 365).cert();
    let cert_of = |key: &PKey<Private>| {
        leaf("client", key, (&ca_cert, &ca_key))
            .cert()
            .to_der()
            .unwrap()
    };
    let (k521, k256) = (p521(), p256());
    let rsa = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
    let ed = PKey::generate_ed25519().unwrap();
    let cases: Vec<(&PKey<Private>, Option<MessageDigest>, bool, SignatureScheme)> = vec![
        (
            &k521,
            Some(MessageDigest::sha512()),
            false,
            SignatureScheme::ECDSA_NISTP521_SHA512,
        ),
        (
            &k256,
            Some(MessageDigest::sha256()),
            false,
            SignatureScheme::ECDSA_NISTP256_SHA256,
        ),
        (
            &rsa,
            Some(MessageDigest::sha256()),
            true,
            SignatureScheme::RSA_PSS_SHA256,
        ),
        (
            &rsa,
            Some(MessageDigest::sha384()),
            false,
            SignatureScheme::RSA_PKCS1_SHA384,
        ),
        (&ed, None, false, SignatureScheme::ED25519),
    ];
    for (key, digest, pss, scheme) in cases {
        let cert = cert_of(key);
        let sig = signed(key, digest, pss, message);
        // RSA PKCS#1 v1.5 is no CertificateVerify scheme in TLS 1.3 (RFC 8446 4.4.3)
        let tls13 = scheme != SignatureScheme::RSA_PKCS1_SHA384;
        assert_eq!(
            verify_signature(message, &cert, scheme, &sig, true).is_ok(),
            tls13,
            "{scheme:?}"
        );
        assert!(
            verify_signature(message, &cert, scheme, &sig, false).is_ok(),
            "{scheme:?}"
        );
        let tampered = b"another transcript";
        assert!(
            verify_signature(tampered, &cert, scheme, &sig, false).is_err(),
            "{scheme:?}"
        );
    }
    // TLS 1.3 binds an ECDSA scheme to its curve; TLS 1.2 does not
    let cert = cert_of(&k256);
    let sig = signed(&k256, Some(MessageDigest::sha512()), false, message);
    let scheme = SignatureScheme::ECDSA_NISTP521_SHA512;
    assert!(verify_signature(message, &cert, scheme, &sig, true).is_err());
    assert!(verify_signature(message, &cert, scheme, &sig, false).is_ok());
    // a scheme of another kind of key than the certificate's
    let sig = signed(&rsa, Some(MessageDigest::sha256()), false, message);
    let scheme = SignatureScheme::ECDSA_NISTP256_SHA256;
    assert!(verify_signature(message, &cert_of(&rsa), scheme, &sig, false).is_err());
    let sig = signed(&k256, Some(MessageDigest::sha256()), false, message);
    let scheme = SignatureScheme::RSA_PKCS1_SHA256;
    assert!(verify_signature(message, &cert_of(&k256), scheme, &sig, false).is_err());
}
