//! compress-response's bytes. Python decides (chalicelib/core/policy/compress.py negotiates
//! the algorithm from the request's Accept-Encoding and the action's list, and rewrites the
//! response's head: Content-Encoding, Vary, no Content-Length); the core compresses the
//! body as it comes, as edge/public.py's relay fed Python's `Compressor`: zlib's level 6,
//! each piece read from the agent flushed to a byte boundary (a sync flush) so that a
//! streamed response (server-sent events, a long poll) reaches the client as it is sent, and
//! the stream finished when the agent's body ends.

use std::io::Write;

use flate2::write::{GzEncoder, ZlibEncoder};
use flate2::Compression;

/// The level Python's path compressed at (zlib.compressobj(6, ...)).
pub const LEVEL: u32 = 6;

/// The algorithms the core compresses with (HTTP's `gzip` and `deflate`: RFC 9110 8.4.1,
/// `deflate` being the zlib format).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Gzip,
    Deflate,
}

impl Encoding {
    /// The Content-Encoding token's algorithm; None for one the core does not compress with.
    pub fn named(name: &str) -> Option<Encoding> {
        match name {
            "gzip" => Some(Encoding::Gzip),
            "deflate" => Some(Encoding::Deflate),
            _ => None,
        }
    }
}

enum Inner {
    Gzip(GzEncoder<Vec<u8>>),
    Deflate(ZlibEncoder<Vec<u8>>),
}

/// One response body's compressor: [`Encoder::feed`] each piece, then [`Encoder::finish`].
pub struct Encoder {
    inner: Inner,
}

impl Encoder {
    pub fn new(encoding: Encoding) -> Encoder {
        let level = Compression::new(LEVEL);
        let inner = match encoding {
            Encoding::Gzip => Inner::Gzip(GzEncoder::new(Vec::new(), level)),
            Encoding::Deflate => Inner::Deflate(ZlibEncoder::new(Vec::new(), level)),
        };
        Encoder { inner }
    }

    /// `data` compressed and flushed to a byte boundary: what the client can be sent now.
    pub fn feed(&mut self, data: &[u8]) -> Vec<u8> {
        // writes into a Vec cannot fail
        match &mut self.inner {
            Inner::Gzip(z) => {
                let _ = z.write_all(data);
                let _ = z.flush();
                std::mem::take(z.get_mut())
            }
            Inner::Deflate(z) => {
                let _ = z.write_all(data);
                let _ = z.flush();
                std::mem::take(z.get_mut())
            }
        }
    }

    /// The compressed stream's end (the format's trailer).
    pub fn finish(self) -> Vec<u8> {
        match self.inner {
            Inner::Gzip(z) => z.finish().unwrap_or_default(),
            Inner::Deflate(z) => z.finish().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::{GzDecoder, ZlibDecoder};
    use std::io::Read;

    fn pieces(encoding: Encoding, parts: &[&[u8]]) -> (Vec<Vec<u8>>, Vec<u8>) {
        let mut enc = Encoder::new(encoding);
        let fed: Vec<Vec<u8>> = parts.iter().map(|p| enc.feed(p)).collect();
        (fed, enc.finish())
    }

    #[test]
    fn each_piece_is_sent_at_once_and_the_whole_decodes_to_the_body() {
        let parts: [&[u8]; 3] = [b"data: one\n\n", b"data: two\n\n", &[b'x'; 100_000]];
        for encoding in [Encoding::Gzip, Encoding::Deflate] {
            let (fed, tail) = pieces(encoding, &parts);
            let mut sofar = Vec::new();
            for (i, piece) in fed.iter().enumerate() {
                assert!(!piece.is_empty(), "piece {i} held back");
                sofar.extend_from_slice(piece);
                // what was sent so far decodes to what was fed so far (a sync flush)
                let mut got = Vec::new();
                let mut partial: Box<dyn Read> = match encoding {
                    Encoding::Gzip => Box::new(GzDecoder::new(&sofar[..])),
                    Encoding::Deflate => Box::new(ZlibDecoder::new(&sofar[..])),
                };
                let _ = partial.read_to_end(&mut got); // no trailer yet: an early end
                assert_eq!(got, parts[..=i].concat());
            }
            sofar.extend_from_slice(&tail);
            let mut whole = Vec::new();
            match encoding {
                Encoding::Gzip => GzDecoder::new(&sofar[..]).read_to_end(&mut whole),
                Encoding::Deflate => ZlibDecoder::new(&sofar[..]).read_to_end(&mut whole),
            }
            .unwrap();
            assert_eq!(whole, parts.concat());
            assert!(sofar.len() < 2_000, "compressed: {}", sofar.len());
        }
    }

    #[test]
    fn an_empty_body_is_a_whole_stream() {
        let (_, tail) = pieces(Encoding::Gzip, &[]);
        let mut whole = Vec::new();
        GzDecoder::new(&tail[..]).read_to_end(&mut whole).unwrap();
        assert!(whole.is_empty());
        assert_eq!(&tail[..2], &[0x1f, 0x8b]);
    }

    #[test]
    fn only_gzip_and_deflate_are_named() {
        assert_eq!(Encoding::named("gzip"), Some(Encoding::Gzip));
        assert_eq!(Encoding::named("deflate"), Some(Encoding::Deflate));
        assert_eq!(Encoding::named("br"), None);
        assert_eq!(Encoding::named("GZIP"), None);
    }
}
