//! Splitting an upstream POST body into envelope texts as its bytes arrive
//! (docs/protocol.md §15.4, §18.1): one JSON value, a JSON array of them, or NDJSON.
//! Each envelope goes to the session as soon as its last byte is here, so a
//! large batch is never held whole. Also the type every request body is
//! read as, whoever accepted the connection ([`RequestBody`]).

use bytes::{Buf, Bytes};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;

/// An error a request body broke off with.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request's body as the routes read it: hyper's own when haip accepted
/// the connection, or any `http_body::Body` a host application hands to the
/// service, its data taken as `Bytes` (free for `Bytes`, a copy otherwise).
pub(crate) type RequestBody = UnsyncBoxBody<Bytes, BoxError>;

/// `body` as a [`RequestBody`].
pub(crate) fn request_body<B>(body: B) -> RequestBody
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    body.map_frame(|frame| frame.map_data(|mut data| data.copy_to_bytes(data.remaining())))
        .map_err(Into::into)
        .boxed_unsync()
}

/// Where the splitter is in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Nothing but whitespace yet.
    Start,
    /// Inside a top-level array: its elements are the envelopes.
    Array,
    /// Values one after another (one value, NDJSON, or what follows an array).
    Values,
}

/// An incremental splitter. Feed it chunks with [`Splitter::push`]; it hands
/// back every complete element; [`Splitter::finish`] hands back the rest.
///
/// It tracks strings and nesting only, never validates: malformed input goes
/// through as text, and the session reports it as it would any malformed
/// envelope.
#[derive(Debug)]
pub(crate) struct Splitter {
    buf: Vec<u8>,
    mode: Mode,
    /// Nesting depth at `scan` (the top-level array counts as 1).
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// Where the current element starts in `buf`.
    start: usize,
    /// How far `buf` has been scanned.
    scan: usize,
}

impl Default for Splitter {
    fn default() -> Self {
        Splitter {
            buf: Vec::new(),
            mode: Mode::Start,
            depth: 0,
            in_string: false,
            escaped: false,
            start: 0,
            scan: 0,
        }
    }
}

impl Splitter {
    /// Bytes held that are not yet part of a complete element.
    #[cfg(test)]
    fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Takes one more chunk; appends the elements it completes to `out`.
    pub(crate) fn push(&mut self, chunk: &[u8], out: &mut Vec<String>) {
        self.buf.extend_from_slice(chunk);
        while self.scan < self.buf.len() {
            let byte = self.buf[self.scan];
            self.scan += 1;
            if self.in_string {
                match byte {
                    _ if self.escaped => self.escaped = false,
                    b'\\' => self.escaped = true,
                    b'"' => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match self.mode {
                Mode::Start => match byte {
                    b'[' => {
                        self.mode = Mode::Array;
                        self.depth = 1;
                        self.start = self.scan;
                    }
                    _ if byte.is_ascii_whitespace() => self.start = self.scan,
                    _ => {
                        self.mode = Mode::Values;
                        self.scan -= 1; // look at it again as a value
                    }
                },
                Mode::Array => match byte {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' if self.depth > 1 => self.depth -= 1,
                    b']' => {
                        // The top-level array ends; anything after it is values.
                        self.emit(self.scan - 1, out);
                        self.start = self.scan;
                        self.depth = 0;
                        self.mode = Mode::Values;
                    }
                    b',' if self.depth == 1 => {
                        self.emit(self.scan - 1, out);
                        self.start = self.scan;
                    }
                    _ => {}
                },
                Mode::Values => match byte {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth = self.depth.saturating_sub(1);
                        if self.depth == 0 {
                            self.emit(self.scan, out);
                            self.start = self.scan;
                        }
                    }
                    b'\n' if self.depth == 0 => {
                        self.emit(self.scan, out);
                        self.start = self.scan;
                    }
                    _ => {}
                },
            }
        }
        self.compact();
    }

    /// The body has ended: appends what is left. A remainder that is not one
    /// JSON value but has several lines is split into lines (NDJSON with a
    /// malformed line: each line stands alone).
    pub(crate) fn finish(self, out: &mut Vec<String>) {
        let rest = &self.buf[self.start..];
        let text = String::from_utf8_lossy(rest);
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return;
        }
        if self.mode == Mode::Array || serde_json::from_str::<serde_json::Value>(trimmed).is_ok() {
            // An unclosed array's last element, or one value.
            self.emit(self.buf.len(), out);
            return;
        }
        out.extend(
            trimmed
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .map(str::to_owned),
        );
    }

    /// Appends `buf[start..end]`, trimmed, unless it is empty.
    fn emit(&self, end: usize, out: &mut Vec<String>) {
        let text = String::from_utf8_lossy(&self.buf[self.start..end]);
        let trimmed = text.trim();
        if !trimmed.is_empty() {
            out.push(trimmed.to_owned());
        }
    }

    /// Drops the bytes of elements already handed out.
    fn compact(&mut self) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.scan -= self.start;
            self.start = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits `body`, fed `chunk` bytes at a time.
    fn split(body: &[u8], chunk: usize) -> Vec<String> {
        let mut splitter = Splitter::default();
        let mut out = Vec::new();
        for piece in body.chunks(chunk.max(1)) {
            splitter.push(piece, &mut out);
        }
        splitter.finish(&mut out);
        out
    }

    #[test]
    fn bodies_split_into_envelopes_whatever_the_chunking() {
        let ping = r#"{"type":"PING","payload":{}}"#;
        let cases: Vec<(String, Vec<String>)> = vec![
            (ping.to_owned(), vec![ping.to_owned()]),
            (
                "{\n  \"type\": \"PING\",\n  \"payload\": {}\n}".to_owned(),
                vec!["{\n  \"type\": \"PING\",\n  \"payload\": {}\n}".to_owned()],
            ),
            (
                format!("[{ping}, {ping} ,\n{ping}]"),
                vec![ping.to_owned(), ping.to_owned(), ping.to_owned()],
            ),
            (
                format!("{ping}\n\n{ping}\r\n"),
                vec![ping.to_owned(), ping.to_owned()],
            ),
            (
                r#"{"type":"PING","payload":{"nonce":"a}],\"b"}}"#.to_owned(),
                vec![r#"{"type":"PING","payload":{"nonce":"a}],\"b"}}"#.to_owned()],
            ),
            (
                format!("{ping}\n\n{{not json\n"),
                vec![ping.to_owned(), "{not json".to_owned()],
            ),
            (
                format!("{{not json\n{ping}\n"),
                vec!["{not json".to_owned(), ping.to_owned()],
            ),
            (
                "[1, [2, 3], \"x,y\"]".to_owned(),
                vec!["1".to_owned(), "[2, 3]".to_owned(), "\"x,y\"".to_owned()],
            ),
            ("garbage\n".to_owned(), vec!["garbage".to_owned()]),
            ("  \n ".to_owned(), vec![]),
            ("[]".to_owned(), vec![]),
        ];
        for (body, expected) in cases {
            for chunk in [1, 2, 3, 7, body.len()] {
                assert_eq!(
                    split(body.as_bytes(), chunk),
                    expected,
                    "{body:?} by {chunk}"
                );
            }
        }
    }

    #[test]
    fn handed_out_elements_are_not_kept() {
        let mut splitter = Splitter::default();
        let mut out = Vec::new();
        for _ in 0..1000 {
            splitter.push(b"{\"type\":\"PING\",\"payload\":{}}\n", &mut out);
        }
        assert_eq!(out.len(), 1000);
        assert_eq!(splitter.buffered(), 0);
        splitter.push(b"{\"type\":", &mut out);
        assert_eq!(splitter.buffered(), 8);
    }
}
