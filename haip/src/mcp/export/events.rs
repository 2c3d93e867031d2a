//! The SSE streams of an MCP session (`session.rs`): each request's answer
//! stream and the session's `GET` stream. Every event is numbered
//! (`id: <index>/<stream>`), and the last [`WINDOW`] are kept, so that a
//! client whose connection broke picks the stream up again with
//! `Last-Event-ID` (a `GET`) where it left off; a stream opens with a
//! priming event (an id, `retry:` and no data) so that it can.
//!
//! Bounded: a stream keeps at most [`WINDOW`] events and [`WINDOW_BYTES`]
//! bytes of them (one larger event alone). While a reader is attached, a
//! writer waits for it to take what it has not taken yet before adding more
//! (a client that reads slowly slows its call, and its connection's write
//! deadline ends a client that does not read at all); with none attached,
//! the oldest are let go.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::Frame;
use hyper::header::{self, HeaderValue};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The response body `/mcp` answers with.
pub(crate) type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>;

/// Events a stream keeps for a reader that comes back.
pub(super) const WINDOW: usize = 32;
/// Bytes of events a stream keeps, at most (one larger event alone).
pub(super) const WINDOW_BYTES: usize = 1 << 20;
/// How long a client waits before it reconnects a broken stream (`retry:`).
const RETRY_MS: u64 = 3000;
/// An SSE comment on a stream this long silent: proxies keep it open, and a
/// client that went away is noticed.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One numbered SSE stream of a session.
pub(super) struct Stream {
    /// Its number in its session (`0`: the session's `GET` stream).
    number: u64,
    state: Mutex<State>,
    /// Wakes the reader: an event, the end, or its replacement.
    to_reader: Notify,
    /// Wakes writers waiting for the reader to take what it has.
    to_writers: Notify,
}

struct State {
    /// The events kept, oldest first, with their indexes.
    events: VecDeque<(u64, Bytes)>,
    /// Their bytes.
    bytes: usize,
    /// The index of the next event (the priming event is `0`).
    next: u64,
    /// The attached reader's next index, if one is attached.
    cursor: Option<u64>,
    /// When it ended, if it has.
    ended: Option<Instant>,
    /// Which reader is attached: a new one replaces the one before.
    reader: u64,
    /// No more events will come.
    done: bool,
}

impl Stream {
    pub(super) fn new(number: u64) -> Arc<Stream> {
        Arc::new(Stream {
            number,
            state: Mutex::new(State {
                events: VecDeque::new(),
                bytes: 0,
                next: 1,
                cursor: None,
                ended: None,
                reader: 0,
                done: false,
            }),
            to_reader: Notify::new(),
            to_writers: Notify::new(),
        })
    }

    /// Its number in its session.
    pub(super) fn number(&self) -> u64 {
        self.number
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change is whole; a panic cannot leave one half-done.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `message` (one JSON-RPC message), waiting while the attached
    /// reader has [`WINDOW`] events it has not taken; `last`: the stream
    /// ends after it. `false` when the stream had ended already.
    pub(super) async fn send(&self, message: Bytes, last: bool) -> bool {
        loop {
            let room = self.to_writers.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut state = self.lock();
                if state.done {
                    return false;
                }
                if !state.full_for(message.len()) {
                    state.push(message);
                    if last {
                        state.end();
                    }
                    drop(state);
                    self.to_reader.notify_waiters();
                    return true;
                }
            }
            room.await;
        }
    }

    /// Adds `message` at once, letting the oldest event go when the
    /// window is full (a notification nobody waits on).
    pub(super) fn push(&self, message: Bytes) {
        let mut state = self.lock();
        if !state.done {
            state.push(message);
            drop(state);
            self.to_reader.notify_waiters();
        }
    }

    /// Ends the stream: its reader gets what is kept, then its end.
    pub(super) fn end(&self) {
        self.lock().end();
        self.to_reader.notify_waiters();
        self.to_writers.notify_waiters();
    }

    /// When it ended, if it has. (Whether its client got its events, only
    /// the client knows: a reader that took them may have written them to
    /// a connection that was gone.)
    pub(super) fn ended(&self) -> Option<Instant> {
        self.lock().ended
    }

    /// A reader is attached.
    pub(super) fn attached(&self) -> bool {
        self.lock().cursor.is_some()
    }

    /// The stream as an SSE response from the event after `after` (`None`:
    /// from its start, with a priming event first). It replaces any reader
    /// attached before; it ends with the stream, or on `shutdown`.
    /// `relay`: watched while it is read, each change adding `on_change`
    /// (the `GET` stream's `notifications/tools/list_changed`).
    pub(super) fn respond(
        self: &Arc<Stream>,
        after: Option<u64>,
        shutdown: CancellationToken,
        relay: Option<(tokio::sync::watch::Receiver<u64>, Bytes)>,
    ) -> Response<Body> {
        let (reader, from) = {
            let mut state = self.lock();
            state.reader += 1;
            let from = after.map_or(1, |after| after + 1);
            state.cursor = Some(from);
            (state.reader, from)
        };
        // The reader before this one ends; writers it held back go on.
        self.to_reader.notify_waiters();
        self.to_writers.notify_waiters();
        let mut priming = None;
        if after.is_none() {
            priming = Some(Bytes::from(format!(
                "id: 0/{}\nretry: {RETRY_MS}\ndata: \n\n",
                self.number
            )));
        }
        let reading = Reading {
            stream: Arc::clone(self),
            reader,
            cursor: from,
            priming,
            shutdown,
            relay,
            lines: false,
        };
        let events = futures_util::stream::unfold(reading, |mut reading| async move {
            let frame = reading.next().await?;
            Some((Ok::<_, Infallible>(Frame::data(frame)), reading))
        });
        sse(StreamBody::new(events).boxed_unsync())
    }
}

impl Stream {
    /// Sends every message of the stream, each on a line of its own, to
    /// `outbox` (the one stream of a stdio session), until the stream ends,
    /// `outbox` closes or `shutdown`.
    pub(super) async fn forward(
        self: Arc<Stream>,
        outbox: tokio::sync::mpsc::Sender<Bytes>,
        shutdown: CancellationToken,
    ) {
        let reader = {
            let mut state = self.lock();
            state.reader += 1;
            state.cursor = Some(1);
            state.reader
        };
        let mut reading = Reading {
            stream: self,
            reader,
            cursor: 1,
            priming: None,
            shutdown,
            relay: None,
            lines: true,
        };
        while let Some(lines) = reading.next().await {
            if outbox.send(lines).await.is_err() {
                return;
            }
        }
    }
}

impl State {
    fn end(&mut self) {
        if !self.done {
            self.done = true;
            self.ended = Some(Instant::now());
        }
    }

    fn push(&mut self, message: Bytes) {
        let index = self.next;
        self.next += 1;
        self.bytes += message.len();
        self.events.push_back((index, message));
        while self.events.len() > WINDOW || (self.bytes > WINDOW_BYTES && self.events.len() > 1) {
            if let Some((_, gone)) = self.events.pop_front() {
                self.bytes -= gone.len();
            }
        }
    }

    /// With one more event of `len` bytes, the attached reader would have
    /// more than a window it has not taken (in events or in bytes): a writer
    /// waits. (An event alone always fits.)
    fn full_for(&self, len: usize) -> bool {
        let Some(cursor) = self.cursor else {
            return false;
        };
        let unread = self.events.iter().filter(|(i, _)| *i >= cursor);
        let (count, bytes) = unread.fold((0, 0), |(n, b), (_, m)| (n + 1, b + m.len()));
        count >= WINDOW || (count > 0 && bytes + len > WINDOW_BYTES)
    }
}

/// An attached reader of a [`Stream`].
struct Reading {
    stream: Arc<Stream>,
    reader: u64,
    cursor: u64,
    priming: Option<Bytes>,
    shutdown: CancellationToken,
    relay: Option<(tokio::sync::watch::Receiver<u64>, Bytes)>,
    /// Each message on a line of its own (stdio), not as SSE events.
    lines: bool,
}

impl Reading {
    /// The next frame: every event not taken yet, in one; `None` at the
    /// stream's end, when another reader replaced this one, or on shutdown.
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            let woken = self.stream.to_reader.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            {
                let mut state = self.stream.lock();
                if state.reader != self.reader {
                    return None;
                }
                let mut frame = BytesMut::new();
                if let Some(priming) = self.priming.take() {
                    frame.extend_from_slice(&priming);
                }
                let from = self.cursor;
                for (index, message) in state.events.iter().filter(|(i, _)| *i >= from) {
                    if self.lines {
                        frame.extend_from_slice(message);
                        frame.extend_from_slice(b"\n");
                    } else {
                        let _ = write!(
                            Writer(&mut frame),
                            "id: {index}/{}\ndata: ",
                            self.stream.number
                        );
                        frame.extend_from_slice(message);
                        frame.extend_from_slice(b"\n\n");
                    }
                    self.cursor = index + 1;
                }
                state.cursor = Some(self.cursor);
                if !frame.is_empty() {
                    drop(state);
                    self.stream.to_writers.notify_waiters();
                    return Some(frame.freeze());
                }
                if state.done {
                    return None;
                }
            }
            let changed = async {
                match &mut self.relay {
                    Some((changes, _)) => changes.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut woken => {}
                () = self.shutdown.cancelled() => return None,
                more = changed => match (more, &self.relay) {
                    (true, Some((_, note))) => self.stream.push(note.clone()),
                    // The registry is gone: nothing more to relay.
                    _ => self.relay = None,
                },
                () = tokio::time::sleep(KEEP_ALIVE), if !self.lines => {
                    return Some(Bytes::from_static(b":\n\n"));
                }
            }
        }
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        let mut state = self.stream.lock();
        if state.reader == self.reader {
            state.cursor = None;
            drop(state);
            // Writers it held back go on, into the window.
            self.stream.to_writers.notify_waiters();
        }
    }
}

/// `fmt::Write` into a `BytesMut`.
struct Writer<'a>(&'a mut BytesMut);

impl std::fmt::Write for Writer<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// An SSE response with `body`.
pub(super) fn sse(body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// A `Last-Event-ID` of this module's streams: the stream and the index of
/// the last event the client took.
pub(super) fn last_event(id: &str) -> Option<(u64, u64)> {
    let (index, stream) = id.trim().split_once('/')?;
    Some((stream.parse().ok()?, index.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(response: Response<Body>) -> String {
        let body = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    fn message(n: u64) -> Bytes {
        Bytes::from(format!("{{\"n\":{n}}}"))
    }

    #[tokio::test]
    async fn a_stream_opens_primed_and_numbers_its_events() {
        let stream = Stream::new(3);
        assert!(stream.send(message(1), false).await);
        assert!(stream.send(message(2), true).await);
        assert!(!stream.send(message(3), false).await, "ended");
        let body = body_of(stream.respond(None, CancellationToken::new(), None)).await;
        assert_eq!(
            body,
            "id: 0/3\nretry: 3000\ndata: \n\nid: 1/3\ndata: {\"n\":1}\n\nid: 2/3\ndata: {\"n\":2}\n\n"
        );
        assert!(stream.ended().is_some());
    }

    #[tokio::test]
    async fn a_reader_that_comes_back_gets_what_followed_its_last_event() {
        let stream = Stream::new(1);
        for n in 1..=3 {
            stream.push(message(n));
        }
        stream.end();
        let body = body_of(stream.respond(Some(1), CancellationToken::new(), None)).await;
        assert_eq!(
            body,
            "id: 2/1\ndata: {\"n\":2}\n\nid: 3/1\ndata: {\"n\":3}\n\n"
        );
        assert_eq!(last_event("3/1"), Some((1, 3)));
        assert_eq!(last_event("3"), None);
    }

    #[tokio::test]
    async fn a_reader_that_left_early_comes_back_for_the_rest() {
        let stream = Stream::new(4);
        let response = stream.respond(None, CancellationToken::new(), None);
        stream.push(message(1));
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(String::from_utf8_lossy(&first).contains("id: 1/4"));
        drop(body);
        stream.push(message(2));
        stream.end();
        let rest = body_of(stream.respond(Some(1), CancellationToken::new(), None)).await;
        assert_eq!(rest, "id: 2/4\ndata: {\"n\":2}\n\n");
    }

    #[tokio::test]
    async fn with_no_reader_only_the_window_is_kept() {
        let stream = Stream::new(0);
        for n in 1..=(WINDOW as u64 + 10) {
            stream.push(message(n));
        }
        stream.end();
        let body = body_of(stream.respond(Some(0), CancellationToken::new(), None)).await;
        assert_eq!(body.matches("data: ").count(), WINDOW);
        assert!(body.starts_with("id: 11/0\n"), "{body}");
    }

    #[tokio::test]
    async fn a_writer_waits_for_an_attached_reader_to_take_its_window() {
        let stream = Stream::new(2);
        let response = stream.respond(None, CancellationToken::new(), None);
        for n in 1..=WINDOW as u64 {
            assert!(stream.send(message(n), false).await);
        }
        let blocked = stream.send(message(99), true);
        tokio::pin!(blocked);
        assert!(
            futures_util::poll!(blocked.as_mut()).is_pending(),
            "the window is full"
        );
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&first).matches("data: {").count(),
            WINDOW
        );
        assert!(blocked.await, "taken: room again");
        let rest = body.collect().await.unwrap().to_bytes();
        assert_eq!(rest, Bytes::from("id: 33/2\ndata: {\"n\":99}\n\n"));
    }

    #[tokio::test]
    async fn the_window_is_bounded_in_bytes_too() {
        let stream = Stream::new(5);
        let big = Bytes::from(vec![b'x'; WINDOW_BYTES / 2 + 1]);
        for _ in 0..3 {
            stream.push(big.clone());
        }
        stream.end();
        let body = body_of(stream.respond(Some(0), CancellationToken::new(), None)).await;
        assert_eq!(body.matches("data: ").count(), 1, "only the newest fits");
        assert!(body.starts_with("id: 3/5\n"));
        // A writer waits for a reader with a window's bytes unread.
        let stream = Stream::new(6);
        let response = stream.respond(None, CancellationToken::new(), None);
        assert!(stream.send(big.clone(), false).await);
        let blocked = stream.send(big.clone(), true);
        tokio::pin!(blocked);
        assert!(futures_util::poll!(blocked.as_mut()).is_pending());
        let mut body = response.into_body();
        let _ = body.frame().await;
        assert!(blocked.await, "taken: room again");
    }

    #[tokio::test]
    async fn a_new_reader_replaces_the_one_before() {
        let stream = Stream::new(0);
        let first = stream.respond(None, CancellationToken::new(), None);
        let second = stream.respond(Some(0), CancellationToken::new(), None);
        stream.push(message(1));
        assert_eq!(body_of(first).await, "", "replaced before it was read");
        stream.end();
        assert_eq!(body_of(second).await, "id: 1/0\ndata: {\"n\":1}\n\n");
    }
}
