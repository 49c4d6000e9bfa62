//! The PROXY protocol header towards the agent (HAProxy's spec: version 1 text, version 2
//! binary), written after the proxy stream's own header when an endpoint asked for it (the
//! Bind's `ProxyProto`, the SDKs' `proxy_proto`): the agent forwards the connection's bytes
//! unchanged, so its upstream reads the public client's address from it. One implementation
//! for the edge: the core's routes write it, and Python's streams (a TCP endpoint's, a
//! connection Python serves) get theirs from here too (edge/proxyproto.py `header`).
//!
//! Source: the public client's address; destination: the address of the edge's listener the
//! client reached. An address that is not an IP literal with a port is sent as 0.0.0.0:0;
//! with an IPv6 address on either side both are IPv6 (an IPv4 one mapped), written as
//! `inet_ntop` writes them (the spec's textual form).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Version 2's 12-byte signature.
pub const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\x00\r\nQUIT\n";

/// `ip:port`, `[ip6]:port` or `ip6:port` (a port after the last colon), else 0.0.0.0:0.
fn split(addr: &str) -> (IpAddr, u16) {
    if let Ok(sock) = addr.parse::<SocketAddr>() {
        return (sock.ip(), sock.port());
    }
    let unknown = (IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
    let Some((host, port)) = addr.rsplit_once(':') else {
        return unknown;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match (host.parse::<IpAddr>(), port.parse::<u16>()) {
        (Ok(ip), Ok(port)) => (ip, port),
        _ => unknown,
    }
}

fn as_v6(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
        v6 => v6,
    }
}

/// The header of `version` (1 or 2; anything else: none) for a connection from `client` to
/// `server`.
pub fn header(version: u8, client: &str, server: &str) -> Vec<u8> {
    let ((mut src, sport), (mut dst, dport)) = (split(client), split(server));
    let six = src.is_ipv6() || dst.is_ipv6();
    if six {
        (src, dst) = (as_v6(src), as_v6(dst));
    }
    match version {
        1 => {
            let family = if six { "TCP6" } else { "TCP4" };
            format!("PROXY {family} {src} {dst} {sport} {dport}\r\n").into_bytes()
        }
        2 => {
            let mut out = V2_SIGNATURE.to_vec();
            out.push(0x21); // version 2, PROXY
            out.push(if six { 0x21 } else { 0x11 }); // TCP over IPv6 / IPv4
            let mut addresses = Vec::with_capacity(36);
            for ip in [src, dst] {
                match ip {
                    IpAddr::V4(v4) => addresses.extend_from_slice(&v4.octets()),
                    IpAddr::V6(v6) => addresses.extend_from_slice(&v6.octets()),
                }
            }
            addresses.extend_from_slice(&sport.to_be_bytes());
            addresses.extend_from_slice(&dport.to_be_bytes());
            out.extend_from_slice(&(addresses.len() as u16).to_be_bytes());
            out.extend_from_slice(&addresses);
            out
        }
        _ => Vec::new(),
    }
}
