//! HTTP/1.1 for the public listener's fast path, sans-IO: request and response heads
//! (httparse), what the edge writes instead of them, and where a body ends.
//!
//! The rules are edge/http1.py's (the Python path's framing), for the requests the core
//! carries; [`carriable`] says which those are, and every other request goes to Python with
//! the bytes read. A head the core reads as bad is never answered here: Python reads it again
//! and gives its answer.

/// A head (request or response) larger than this is refused (edge/public.py MAX_HEAD_BYTES).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Fields in one head the core parses; a head with more goes to Python.
pub const MAX_FIELDS: usize = 128;
/// Chunk framing or trailer bytes without a body byte between them (http1.py's bound).
pub const MAX_FRAMING_BYTES: usize = MAX_HEAD_BYTES;
/// The fields the edge writes itself (http_policy.HOP_HEADERS).
const HOP_HEADERS: [&[u8]; 3] = [
    b"x-forwarded-for",
    b"x-forwarded-proto",
    b"x-forwarded-host",
];
/// The methods the core carries (llhttp knows more; those go to Python).
const METHODS: [&[u8]; 7] = [
    b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH",
];
/// ACME HTTP-01 validations are answered by Python (edge/challenges.py).
pub const ACME_PREFIX: &[u8] = b"/.well-known/acme-challenge/";

/// How a message's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// What a parse found.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<T> {
    /// More bytes are needed (and fewer than MAX_HEAD_BYTES were given).
    Partial,
    Done(T),
    /// Not a head the core carries (bad, too large, or outside its rules).
    Invalid(&'static str),
}

pub type Field = (Vec<u8>, Vec<u8>);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// Bytes of the head, its blank line included.
    pub len: usize,
    pub method: Vec<u8>,
    pub target: Vec<u8>,
    /// 1 for HTTP/1.1, 0 for HTTP/1.0.
    pub minor: u8,
    /// Lower-case names, values without surrounding whitespace.
    pub fields: Vec<Field>,
    /// The Host field's name part, lower-case, its port dropped (public.request_host).
    pub host: String,
    pub hosts: usize,
    pub framing: Framing,
    /// Connection: close, or HTTP/1.0: the connection ends after this exchange.
    pub close: bool,
    /// Upgrade or Transfer-Encoding or several Content-Length fields: the Python path's.
    pub unusual: bool,
    /// It asks to switch protocols: an Upgrade field and `Connection: upgrade` (the rest of
    /// its framing usual or not: `unusual` says).
    pub upgrade: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub struct ResponseHead {
    pub len: usize,
    pub status: u16,
    pub reason: Vec<u8>,
    /// The upstream's own spelling of the names (a response is relayed with it).
    pub fields: Vec<Field>,
    pub framing: Framing,
    pub close: bool,
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| *b != b' ' && *b != b'\t')
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| *b != b' ' && *b != b'\t')
        .map_or(start, |e| e + 1);
    &v[start..end.max(start)]
}

/// Every LF of the head preceded by CR (llhttp refuses a bare LF; httparse takes it).
fn crlf_only(head: &[u8]) -> bool {
    head.iter()
        .enumerate()
        .all(|(i, b)| *b != b'\n' || (i > 0 && head[i - 1] == b'\r'))
}

fn contains_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|b| *b == b',')
        .any(|t| trim(t).eq_ignore_ascii_case(token))
}

/// (framing from Content-Length / Transfer-Encoding, Connection says close, anything
/// unusual: several lengths, a transfer coding, both, a bad length)
fn declared<N: AsRef<[u8]>, V: AsRef<[u8]>>(fields: &[(N, V)]) -> (Framing, bool, bool) {
    let (mut length, mut lengths, mut chunked, mut coded, mut close) =
        (None, 0, false, false, false);
    let mut bad = false;
    for (name, value) in fields {
        let (name, value) = (name.as_ref(), value.as_ref());
        if name.eq_ignore_ascii_case(b"content-length") {
            lengths += 1;
            match std::str::from_utf8(value)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
            {
                Some(n) if length.is_none() || length == Some(n) => length = Some(n),
                _ => bad = true,
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            coded = true;
            if value.eq_ignore_ascii_case(b"chunked") {
                chunked = true;
            } else {
                bad = true;
            }
        } else if name.eq_ignore_ascii_case(b"connection") && contains_token(value, b"close") {
            close = true;
        }
    }
    let unusual = bad || lengths > 1 || (coded && lengths > 0);
    let framing = if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    (framing, close, unusual)
}

/// A request head at the start of `buf`.
pub fn parse_request(buf: &[u8]) -> Parsed<RequestHead> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut slots);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD_BYTES => return Parsed::Partial,
        Ok(httparse::Status::Partial) => return Parsed::Invalid("head too large"),
        Err(_) => return Parsed::Invalid("not a head the core carries"),
    };
    if len > MAX_HEAD_BYTES {
        return Parsed::Invalid("head too large");
    }
    if !crlf_only(&buf[..len]) {
        return Parsed::Invalid("bare LF");
    }
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Parsed::Invalid("incomplete request line");
    };
    let fields: Vec<Field> = req
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase().into_bytes(),
                trim(h.value).to_vec(),
            )
        })
        .collect();
    let (mut host, mut hosts, mut upgrade) = (String::new(), 0, false);
    let (mut close, mut connection_upgrade) = (minor != 1, false);
    for (name, value) in &fields {
        match name.as_slice() {
            b"host" => {
                hosts += 1;
                host = host_of(value);
            }
            b"upgrade" => upgrade = true,
            b"connection" => {
                close |= contains_token(value, b"close");
                connection_upgrade |= contains_token(value, b"upgrade");
            }
            _ => {}
        }
    }
    let (framing, _, odd) = declared(&fields);
    let framing = match framing {
        Framing::UntilClose => Framing::None, // a request without a length has no body
        other => other,
    };
    Parsed::Done(RequestHead {
        len,
        method: method.as_bytes().to_vec(),
        target: target.as_bytes().to_vec(),
        minor,
        fields,
        host,
        hosts,
        framing,
        close,
        unusual: odd || upgrade,
        upgrade: upgrade && connection_upgrade && !odd,
    })
}

/// public.request_host: lower-case, the port dropped (an IPv6 literal keeps its brackets).
pub fn host_of(value: &[u8]) -> String {
    let host = String::from_utf8_lossy(value).trim().to_ascii_lowercase();
    if host.starts_with('[') {
        return match host.split_once(']') {
            Some((name, _)) => format!("{name}]"),
            None => host,
        };
    }
    match host.rsplit_once(':') {
        Some((name, _)) => name.to_string(),
        None => host,
    }
}

/// Whether the core serves this request itself (given a plain route for its host): HTTP/1.1,
/// one Host, a method of METHODS, no body, a Content-Length one or a chunked one (its
/// framing checked as it passes: [`Chunks`]), no upgrade, not an ACME validation. The rest
/// is Python's.
pub fn carriable(req: &RequestHead) -> bool {
    req.minor == 1
        && req.hosts == 1
        && !req.unusual
        && METHODS.contains(&req.method.as_slice())
        && !req.target.starts_with(ACME_PREFIX)
}

/// Whether a 101 switches protocols as HTTP/1.1 has it: the response says `Upgrade` and
/// `Connection: upgrade` (edge/http1.py refuses any other 101).
pub fn switches(resp: &ResponseHead) -> bool {
    let has = |name: &[u8], token: Option<&[u8]>| {
        resp.fields.iter().any(|(n, v)| {
            n.eq_ignore_ascii_case(name) && token.is_none_or(|t| contains_token(v, t))
        })
    };
    resp.status == 101 && has(b"upgrade", None) && has(b"connection", Some(b"upgrade"))
}

/// `head` (a response head the edge wrote itself) with `Connection: close` in place of any
/// Connection field: an answer to an upgrade request ends its connection and says so.
pub fn closing(head: &[u8]) -> Vec<u8> {
    let Parsed::Done(resp) = parse_response(head) else {
        return head.to_vec();
    };
    let mut out = Vec::with_capacity(head.len() + 20);
    client_head(&resp, false, true, &mut out);
    if !contains_field(&resp.fields, b"connection", b"close") {
        return out;
    }
    head.to_vec()
}

fn contains_field(fields: &[Field], name: &[u8], token: &[u8]) -> bool {
    fields
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case(name) && contains_token(v, token))
}

/// The GUID of RFC 6455's `Sec-WebSocket-Accept`.
const WEBSOCKET_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// An upgrade request the core serves (a WebSocket's, forwarded and switched after the
/// agent's 101; or answered by a WebSocket-TCP route): unusual for nothing else, without a
/// body (Python refuses an upgrade with a body before routing it), otherwise what
/// [`carriable`] takes.
pub fn carriable_upgrade(req: &RequestHead) -> bool {
    req.upgrade
        && req.minor == 1
        && req.hosts == 1
        && matches!(req.framing, Framing::None | Framing::Length(0))
        && METHODS.contains(&req.method.as_slice())
        && !req.target.starts_with(ACME_PREFIX)
}

/// A WebSocket-TCP route's request the core answers itself (wstcp.rs): a request
/// [`carriable`] takes (refused 400), or an upgrade [`carriable_upgrade`] takes.
pub fn carriable_by_converter(req: &RequestHead) -> bool {
    carriable(req) || carriable_upgrade(req)
}

/// The `Sec-WebSocket-Accept` of a valid WebSocket upgrade request (GET, `Upgrade:
/// websocket`, `Connection: upgrade`, version 13, a key; each field's first), None when it
/// is not one (edge/wstcp.py accept_key).
pub fn websocket_accept(req: &RequestHead) -> Option<String> {
    let first = |name: &[u8]| {
        req.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    };
    let key = first(b"sec-websocket-key").filter(|k| !k.is_empty())?;
    let valid = req.method == b"GET"
        && first(b"upgrade").is_some_and(|u| u.eq_ignore_ascii_case(b"websocket"))
        && first(b"connection").is_some_and(|c| contains_token(c, b"upgrade"))
        && first(b"sec-websocket-version") == Some(b"13".as_slice());
    if !valid {
        return None;
    }
    let digest = openssl::sha::sha1(&[key, WEBSOCKET_GUID].concat());
    Some(openssl::base64::encode_block(&digest))
}

/// The request as it goes to the agent (http_policy.forwarded_headers): lower-case names,
/// X-Forwarded-For appended to, X-Forwarded-Proto and X-Forwarded-Host set.
pub fn upstream_head(req: &RequestHead, client_ip: &str, scheme: &str, out: &mut Vec<u8>) {
    upstream_head_with(req, &[], client_ip, scheme, out);
}

/// [`upstream_head`] of the request with `added` after its own fields (a decided route's
/// policy appended them: the Python path forwards `request.headers + added` the same way).
pub fn upstream_head_with(
    req: &RequestHead,
    added: &[Field],
    client_ip: &str,
    scheme: &str,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(&req.method);
    out.push(b' ');
    out.extend_from_slice(&req.target);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut xff: Vec<&[u8]> = Vec::new();
    let mut host: &[u8] = b"";
    for (name, value) in req.fields.iter().chain(added) {
        if name == b"x-forwarded-for" {
            xff.push(value);
        }
        if name == b"host" {
            host = value;
        }
        if !HOP_HEADERS.contains(&name.as_slice()) {
            field(out, name, value);
        }
    }
    xff.push(client_ip.as_bytes());
    field(out, b"x-forwarded-for", &xff.join(&b", "[..]));
    field(out, b"x-forwarded-proto", scheme.as_bytes());
    if !host.is_empty() {
        field(out, b"x-forwarded-host", host);
    }
    out.extend_from_slice(b"\r\n");
}

fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// A response head at the start of `buf`; Invalid is a bad upstream response (502).
pub fn parse_response(buf: &[u8]) -> Parsed<ResponseHead> {
    match view_response(buf) {
        Parsed::Done(view) => Parsed::Done(ResponseHead {
            len: view.len,
            status: view.status,
            reason: view.reason.to_vec(),
            fields: view
                .fields
                .iter()
                .map(|(n, v)| (n.to_vec(), v.to_vec()))
                .collect(),
            framing: view.framing,
            close: view.close,
        }),
        Parsed::Partial => Parsed::Partial,
        Parsed::Invalid(why) => Parsed::Invalid(why),
    }
}

/// A response head read in place: its reason and fields are slices of the bytes parsed
/// (`parse_response` copies them; the HTTP/2 front reads each answer of its virtual
/// connections this way, once, to make the stream's HEADERS).
pub struct ResponseView<'a> {
    pub len: usize,
    pub status: u16,
    pub reason: &'a [u8],
    pub fields: Vec<(&'a [u8], &'a [u8])>,
    pub framing: Framing,
    pub close: bool,
}

/// A response head at the start of `buf`, as `parse_response` reads it, uncopied.
pub fn view_response(buf: &[u8]) -> Parsed<ResponseView<'_>> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut resp = httparse::Response::new(&mut slots);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD_BYTES => return Parsed::Partial,
        Ok(httparse::Status::Partial) => return Parsed::Invalid("response head too large"),
        Err(_) => return Parsed::Invalid("invalid response head"),
    };
    if len > MAX_HEAD_BYTES {
        return Parsed::Invalid("response head too large");
    }
    let (Some(status), Some(minor)) = (resp.code, resp.version) else {
        return Parsed::Invalid("incomplete status line");
    };
    if status < 100 {
        return Parsed::Invalid("status code below 100");
    }
    let fields: Vec<(&[u8], &[u8])> = resp
        .headers
        .iter()
        .map(|h| (h.name.as_bytes(), trim(h.value)))
        .collect();
    let (framing, says_close, unusual) = declared(&fields);
    if unusual {
        return Parsed::Invalid("invalid response framing");
    }
    Parsed::Done(ResponseView {
        len,
        status,
        reason: resp.reason.unwrap_or("").as_bytes(),
        fields,
        framing,
        close: says_close || minor != 1,
    })
}

/// What the client gets for `resp` (http1.Connection._send_response to an HTTP/1.1 client):
/// its head, how its body is framed towards the client, and whether the client's connection
/// stays open after it. `head_request`: the request was HEAD; `request_close`: it ends its
/// connection.
pub fn client_head(
    resp: &ResponseHead,
    head_request: bool,
    request_close: bool,
    out: &mut Vec<u8>,
) -> (Framing, bool) {
    let mut kind = resp.framing;
    let mut chunk_it = false;
    if head_request || resp.status == 204 || resp.status == 304 || resp.status < 200 {
        kind = Framing::None;
    } else if kind == Framing::UntilClose {
        kind = Framing::Chunked; // an HTTP/1.1 client gets it chunked
        chunk_it = true;
    }
    let says_close = resp
        .fields
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case(b"connection") && contains_token(v, b"close"));
    let keep_alive = !request_close && !says_close;
    out.extend_from_slice(format!("HTTP/1.1 {} ", resp.status).as_bytes());
    if resp.reason.is_empty() {
        out.extend_from_slice(phrase(resp.status).as_bytes());
    } else {
        out.extend_from_slice(&resp.reason);
    }
    out.extend_from_slice(b"\r\n");
    let drop_connection = !keep_alive && !says_close;
    for (name, value) in &resp.fields {
        if drop_connection && name.eq_ignore_ascii_case(b"connection") {
            continue;
        }
        field(out, name, value);
    }
    if chunk_it {
        field(out, b"Transfer-Encoding", b"chunked");
    }
    if drop_connection {
        field(out, b"Connection", b"close");
    }
    out.extend_from_slice(b"\r\n");
    (kind, keep_alive)
}

/// The reason phrase of a status the upstream gave none for (Python's HTTPStatus).
pub fn phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        102 => "Processing",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        207 => "Multi-Status",
        208 => "Already Reported",
        226 => "IM Used",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        305 => "Use Proxy",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        418 => "I'm a Teapot",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        423 => "Locked",
        424 => "Failed Dependency",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        506 => "Variant Also Negotiates",
        507 => "Insufficient Storage",
        508 => "Loop Detected",
        510 => "Not Extended",
        511 => "Network Authentication Required",
        _ => "",
    }
}

/// Where a chunked body ends, its bytes passed through unchanged: fed the body's bytes, it
/// says how many belong to the message and whether the message ended there. What it passes
/// is unambiguous to any reader: CRLF line ends only, no control character in a chunk
/// extension or a trailer line, each trailer line a name and a colon, no folded line.
#[derive(Debug, Default)]
pub struct Chunks {
    state: ChunkState,
    /// bytes of the current chunk's data still to come
    left: u64,
    /// framing bytes seen since the last data byte
    framing: usize,
    /// the size line so far (digits only; extensions skipped)
    size: Option<u64>,
    in_ext: bool,
    line_len: usize,
    /// the trailer line so far has a name and a colon
    colon: bool,
    /// body bytes (chunk data, not framing) seen so far
    pub data: u64,
    /// how many more data bytes to keep in `kept` (the inspector's copy of a body)
    keep: usize,
    /// the body's first data bytes, up to what `keeping` asked
    pub kept: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    Trailer,
    TrailerLf,
    Done,
}

impl Chunks {
    /// A body's framing, its first `keep` data bytes (not framing) kept in `kept`.
    pub fn keeping(keep: usize) -> Chunks {
        Chunks {
            keep,
            ..Chunks::default()
        }
    }

    /// From now on, at most `keep` more data bytes kept.
    pub fn keep_only(&mut self, keep: usize) {
        self.keep = keep;
    }

    /// The bytes of `data` that belong to the body, and whether it ended; Err on bad framing.
    pub fn feed(&mut self, data: &[u8]) -> Result<(usize, bool), &'static str> {
        let mut i = 0;
        while i < data.len() {
            let b = data[i];
            match self.state {
                ChunkState::Done => return Ok((i, true)),
                ChunkState::Data => {
                    let take = (self.left.min((data.len() - i) as u64)) as usize;
                    if self.keep > 0 {
                        let k = take.min(self.keep);
                        self.kept.extend_from_slice(&data[i..i + k]);
                        self.keep -= k;
                    }
                    self.left -= take as u64;
                    self.data += take as u64;
                    i += take;
                    self.framing = 0;
                    if self.left == 0 {
                        self.state = ChunkState::DataCr;
                    }
                    continue;
                }
                ChunkState::Size => {
                    if b == b'\r' {
                        self.state = ChunkState::SizeLf;
                    } else if self.in_ext {
                        if is_ctl(b) {
                            return Err("bad chunk extension");
                        }
                    } else if b == b';' {
                        self.in_ext = true;
                    } else if let Some(d) = (b as char).to_digit(16) {
                        let v = self.size.unwrap_or(0);
                        if v > (u64::MAX >> 8) {
                            return Err("chunk size too large");
                        }
                        self.size = Some(v * 16 + d as u64);
                    } else if b != b' ' && b != b'\t' {
                        return Err("bad chunk size");
                    }
                }
                ChunkState::SizeLf => {
                    if b != b'\n' {
                        return Err("bad chunk size line");
                    }
                    let size = self.size.take().ok_or("missing chunk size")?;
                    self.in_ext = false;
                    if size == 0 {
                        self.state = ChunkState::Trailer;
                        self.line_len = 0;
                    } else {
                        self.left = size;
                        self.state = ChunkState::Data;
                    }
                }
                ChunkState::DataCr => {
                    if b != b'\r' {
                        return Err("chunk data too long");
                    }
                    self.state = ChunkState::DataLf;
                }
                ChunkState::DataLf => {
                    if b != b'\n' {
                        return Err("chunk data too long");
                    }
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailer => {
                    if b == b'\r' {
                        if self.line_len > 0 && !self.colon {
                            return Err("bad trailer line");
                        }
                        self.state = ChunkState::TrailerLf;
                    } else if is_ctl(b) || (self.line_len == 0 && (b == b' ' || b == b'\t')) {
                        return Err("bad trailer line"); // a bare LF, a control, a folded line
                    } else {
                        if b == b':' && self.line_len > 0 {
                            self.colon = true;
                        }
                        self.line_len += 1;
                    }
                }
                ChunkState::TrailerLf => {
                    if b != b'\n' {
                        return Err("bad trailer line");
                    }
                    if self.line_len == 0 {
                        self.state = ChunkState::Done;
                        return Ok((i + 1, true));
                    }
                    self.line_len = 0;
                    self.colon = false;
                    self.state = ChunkState::Trailer;
                }
            }
            self.framing += 1;
            if self.framing > MAX_FRAMING_BYTES {
                return Err("too much chunk framing");
            }
            i += 1;
        }
        Ok((i, self.state == ChunkState::Done))
    }
}

/// `data`'s first bytes appended to `kept` until it holds `limit` (a body's copy for the
/// inspector; 0: none kept).
pub fn keep(kept: &mut Vec<u8>, limit: usize, data: &[u8]) {
    let room = limit.saturating_sub(kept.len());
    if room > 0 {
        kept.extend_from_slice(&data[..room.min(data.len())]);
    }
}

/// A control character a chunk extension or a trailer line may not hold (a bare LF among
/// them: a peer that took it for a line's end would read another message than ours).
fn is_ctl(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

/// `data` as one chunk of a chunked body (a body delimited by its end, to an HTTP/1.1 client).
pub fn chunk(data: &[u8], out: &mut Vec<u8>) {
    if !data.is_empty() {
        out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
}

/// The proxy stream's header (edge/protocol.py proxy_header): type 3, the length (i64 LE),
/// the JSON the agents read (json.dumps' spacing).
pub fn proxy_header(tunnel_id: &str, client_addr: &str, proto: &str, edge_type: &str) -> Vec<u8> {
    let json = format!(
        "{{\"Id\": {}, \"ClientAddr\": {}, \"Proto\": {}, \"EdgeType\": {}, \"PassthroughTLS\": false}}",
        json_str(tunnel_id),
        json_str(client_addr),
        json_str(proto),
        json_str(edge_type)
    );
    let mut out = Vec::with_capacity(12 + json.len());
    out.extend_from_slice(&3u32.to_be_bytes());
    out.extend_from_slice(&(json.len() as i64).to_le_bytes());
    out.extend_from_slice(json.as_bytes());
    out
}

/// A JSON string as Python's json.dumps writes it (ensure_ascii).
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{:04x}", u));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
