//! held.rs: a held decision's key is made of exactly the facts the route's policy reads
//! (each fact broken: two requests that differ in it get two keys; in an unread one, the
//! same key), and every bound of what a route and the process hold.

use std::net::SocketAddr;
use std::sync::Arc;

use edge_core::decide::Decision;
use edge_core::held::{held_bytes, Held, Reads, MAX_DECISION, MAX_HELD, MAX_KEY};
use edge_core::http::{parse_request, Parsed, RequestHead};
use edge_core::public::TlsFacts;

fn head(text: &str) -> RequestHead {
    match parse_request(text.as_bytes()) {
        Parsed::Done(head) => head,
        _ => panic!("not a head: {text:?}"),
    }
}

fn reads(facts: &[&str]) -> Reads {
    Reads::parse(&facts.iter().map(|f| f.to_string()).collect::<Vec<_>>()).unwrap()
}

const PEER: &str = "198.51.100.7:40000";
const LOCAL: &str = "127.0.0.1:80";

fn key_of(reads: &Reads, text: &str) -> Vec<u8> {
    key_at(reads, text, PEER, LOCAL, None)
}

fn key_at(reads: &Reads, text: &str, peer: &str, local: &str, tls: Option<&TlsFacts>) -> Vec<u8> {
    let head = head(text);
    let peer: SocketAddr = peer.parse().unwrap();
    let local: SocketAddr = local.parse().unwrap();
    let bodiless = matches!(
        head.framing,
        edge_core::http::Framing::None | edge_core::http::Framing::Length(0)
    );
    reads.key(&head, peer, local, tls, bodiless).expect("a key")
}

const BASE: &str = "GET /a?x=1 HTTP/1.1\r\nHost: h.test\r\nX-A: 1\r\nX-B: 2\r\n\r\n";

#[test]
fn each_fact_read_is_in_the_key_and_no_other() {
    let nothing = reads(&[]);
    let base = key_of(&nothing, BASE);
    // nothing read: the target and fields other than Connection do not count
    for other in [
        "GET /a?x=1 HTTP/1.1\r\nHost: h.test\r\nX-A: 1\r\nX-B: 2\r\nContent-Length: 0\r\n\r\n",
        "GET /b HTTP/1.1\r\nHost: h.test\r\nX-A: 9\r\n\r\n",
    ] {
        assert_eq!(key_of(&nothing, other), base, "{other}");
    }
    // the method always does: an answer held for a HEAD has no body, one for a GET has
    for method in ["HEAD", "POST"] {
        let other = format!("{method} /a?x=1 HTTP/1.1\r\nHost: h.test\r\nX-A: 1\r\nX-B: 2\r\n\r\n");
        assert_ne!(key_of(&nothing, &other), base, "{method}");
    }
    let cases: [(&str, &str); 3] = [
        (
            "target",
            "GET /a?x=2 HTTP/1.1\r\nHost: h.test\r\nX-A: 1\r\nX-B: 2\r\n\r\n",
        ),
        (
            "field:x-a",
            "GET /a?x=1 HTTP/1.1\r\nHost: h.test\r\nX-A: 2\r\nX-B: 2\r\n\r\n",
        ),
        (
            "fields",
            "GET /a?x=1 HTTP/1.1\r\nHost: h.test\r\nX-A: 1\r\nX-B: 3\r\n\r\n",
        ),
    ];
    for (fact, changed) in cases {
        let r = reads(&[fact]);
        assert_ne!(
            key_of(&r, changed),
            key_of(&r, BASE),
            "{fact} read: another key"
        );
        assert_eq!(
            key_of(&nothing, changed),
            base,
            "{fact} not read: the same key"
        );
    }
    // a field's presence, its count of values and its absence are three keys
    let xc = reads(&["field:X-C"]);
    let absent = key_of(&xc, BASE);
    let empty = key_of(&xc, "GET /a?x=1 HTTP/1.1\r\nHost: h.test\r\nX-C:\r\n\r\n");
    let twice = key_of(
        &xc,
        "GET /a?x=1 HTTP/1.1\r\nHost: h.test\r\nX-C:\r\nX-C:\r\n\r\n",
    );
    assert!(absent != empty && empty != twice && absent != twice);
    // but only the named field: X-B changed under a route that reads X-A alone
    let xa = reads(&["field:x-a"]);
    assert_eq!(
        key_of(
            &xa,
            "GET /zz HTTP/1.1\r\nHost: h.test\r\nX-A: 1\r\nX-B: 9\r\n\r\n"
        ),
        key_of(&xa, BASE)
    );
}

#[test]
fn the_connections_facts_are_in_the_key_when_read() {
    let other_peer = "198.51.100.8:40000";
    let other_port = "198.51.100.7:40001";
    let other_local = "127.0.0.1:8080";
    let nothing = reads(&[]);
    let base = key_at(&nothing, BASE, PEER, LOCAL, None);
    for (peer, local) in [
        (other_peer, LOCAL),
        (other_port, LOCAL),
        (PEER, other_local),
    ] {
        assert_eq!(key_at(&nothing, BASE, peer, local, None), base);
    }
    for (fact, peer, local) in [
        ("peer_ip", other_peer, LOCAL),
        ("peer_port", other_port, LOCAL),
        ("local", PEER, other_local),
    ] {
        let r = reads(&[fact]);
        assert_ne!(
            key_at(&r, BASE, peer, local, None),
            key_at(&r, BASE, PEER, LOCAL, None),
            "{fact}"
        );
    }
    let ip = reads(&["peer_ip"]);
    assert_eq!(
        key_at(&ip, BASE, other_port, LOCAL, None),
        key_at(&ip, BASE, PEER, LOCAL, None),
        "the port is not the address"
    );
    let facts = |sni: &str, alpn: Option<&[u8]>| TlsFacts {
        sni: sni.into(),
        version: "1.3",
        cipher: "TLS13_AES_128_GCM_SHA256",
        alpn: alpn.map(|a| a.to_vec()),
        spec: 0,
        client_cert: None,
    };
    let tls = reads(&["tls"]);
    let one = facts("a.test", Some(b"http/1.1"));
    let key = |t: Option<&TlsFacts>| key_at(&tls, BASE, PEER, LOCAL, t);
    assert_ne!(
        key(Some(&one)),
        key(Some(&facts("b.test", Some(b"http/1.1"))))
    );
    assert_ne!(key(Some(&one)), key(Some(&facts("a.test", None))));
    assert_ne!(key(Some(&one)), key(None));
    assert_eq!(
        key_at(&nothing, BASE, PEER, LOCAL, Some(&one)),
        base,
        "TLS not read"
    );
}

#[test]
fn whether_a_body_follows_and_the_connection_field_are_always_in_the_key() {
    let nothing = reads(&[]);
    let base = key_of(&nothing, BASE);
    let closing = "GET /a?x=1 HTTP/1.1\r\nHost: h.test\r\nConnection: close\r\n\r\n";
    assert_ne!(key_of(&nothing, closing), base);
    let head = head(BASE);
    let (peer, local) = (PEER.parse().unwrap(), LOCAL.parse().unwrap());
    assert_ne!(
        nothing.key(&head, peer, local, None, false),
        nothing.key(&head, peer, local, None, true)
    );
}

#[test]
fn a_fact_not_known_is_refused_and_a_key_over_its_bound_is_none() {
    assert!(Reads::parse(&["time".to_string()]).is_err());
    assert!(Reads::parse(&["field:".to_string()]).is_err());
    let long = format!(
        "GET /{} HTTP/1.1\r\nHost: h.test\r\n\r\n",
        "a".repeat(MAX_KEY)
    );
    let r = reads(&["target"]);
    let h = head(&long);
    let (peer, local) = (PEER.parse().unwrap(), LOCAL.parse().unwrap());
    assert_eq!(r.key(&h, peer, local, None, true), None);
    let fits = format!(
        "GET /{} HTTP/1.1\r\nHost: h.test\r\n\r\n",
        "a".repeat(MAX_KEY - 64)
    );
    assert!(r.key(&head(&fits), peer, local, None, true).is_some());
}

fn append(value: &str) -> Decision {
    Decision::Append {
        fields: vec![(b"x-a".to_vec(), value.as_bytes().to_vec())],
    }
}

#[test]
fn what_is_held_and_what_never_is() {
    let held = Held::new(reads(&["target"]));
    let memo: edge_core::decide::Memo = Arc::new(1u32);
    assert!(held.hold(b"k1".to_vec(), &append("1"), Some(&memo)));
    let got = held.get(b"k1").expect("held");
    assert!(matches!(&got.decision, Decision::Append { fields } if fields[0].1 == b"1"));
    assert!(Arc::ptr_eq(got.memo.as_ref().unwrap(), &memo));
    assert!(held.get(b"k2").is_none());
    let respond = Decision::Respond {
        status: 403,
        head: b"HTTP/1.1 403 Forbidden\r\n\r\n".to_vec(),
        body: Vec::new(),
        close: false,
    };
    assert!(held.hold(b"k2".to_vec(), &respond, None));
    // never: a forward (the client's whole head), a body's read, a rewrite, a hand-over, a
    // close
    for never in [
        Decision::Forward {
            head: b"GET / HTTP/1.1\r\n\r\n".to_vec(),
            body: None,
        },
        Decision::Body { limit: 16 },
        Decision::Rewrite {
            fields: Vec::new(),
            encode: None,
            body: None,
        },
        Decision::Python,
        Decision::Close,
    ] {
        assert!(!held.hold(b"k3".to_vec(), &never, None));
    }
    // an answer past MAX_DECISION is asked about each time
    let big = Decision::Respond {
        status: 200,
        head: Vec::new(),
        body: vec![b'a'; MAX_DECISION + 1],
        close: false,
    };
    assert!(!held.hold(b"k4".to_vec(), &big, None));
    let fits = Decision::Respond {
        status: 200,
        head: Vec::new(),
        body: vec![b'a'; MAX_DECISION],
        close: false,
    };
    assert!(held.hold(b"k4".to_vec(), &fits, None));
    assert_eq!(held.len(), 3);
}

#[test]
fn a_route_holds_at_most_max_held() {
    let held = Held::new(reads(&["target"]));
    for i in 0..MAX_HELD {
        assert!(held.hold(format!("k{i}").into_bytes(), &append("1"), None));
    }
    assert_eq!(held.len(), MAX_HELD);
    assert!(held.get(b"k0").is_some());
    // one more: the route's held ones are dropped and it starts again
    assert!(held.hold(b"one-more".to_vec(), &append("1"), None));
    assert_eq!(held.len(), 1);
    assert!(held.get(b"k0").is_none() && held.get(b"one-more").is_some());
    // the same key decided again counts once
    assert!(held.hold(b"one-more".to_vec(), &append("1"), None));
    assert_eq!(held.len(), 1);
    assert!(held_bytes() > 0);
}
