//! The PROXY protocol header (src/proxyproto.rs) by HAProxy's spec.

use edge_core::proxyproto::{header, V2_SIGNATURE};

#[test]
fn version_1_is_a_text_line_and_version_2_the_binary_block() {
    assert_eq!(
        header(1, "10.0.0.1:5000", "10.0.0.2:443"),
        b"PROXY TCP4 10.0.0.1 10.0.0.2 5000 443\r\n"
    );
    let mut v2 = V2_SIGNATURE.to_vec();
    v2.extend_from_slice(&[
        0x21, 0x11, 0, 12, 10, 0, 0, 1, 10, 0, 0, 2, 0x13, 0x88, 0x01, 0xBB,
    ]);
    assert_eq!(header(2, "10.0.0.1:5000", "10.0.0.2:443"), v2);
    assert!(header(3, "10.0.0.1:5000", "10.0.0.2:443").is_empty());
}

#[test]
fn an_ipv6_side_makes_both_ipv6_and_what_is_not_an_address_is_unknown() {
    // inet_ntop's form of a mapped IPv4 address (the spec's textual form)
    let mapped = b"PROXY TCP6 ::1 ::ffff:127.0.0.1 5000 80\r\n".to_vec();
    assert_eq!(header(1, "[::1]:5000", "127.0.0.1:80"), mapped);
    assert_eq!(header(1, "::1:5000", "127.0.0.1:80"), mapped); // unbracketed, as Python writes
    let v2 = header(2, "[::1]:1", "[::2]:2");
    assert_eq!((v2[13], v2[14], v2[15]), (0x21, 0, 36));
    assert_eq!(
        header(1, "client.example:5", "10.0.0.2:443"),
        b"PROXY TCP4 0.0.0.0 10.0.0.2 0 443\r\n"
    );
    assert_eq!(
        header(1, "10.0.0.1", "10.0.0.2:x"),
        b"PROXY TCP4 0.0.0.0 0.0.0.0 0 0\r\n"
    );
}
