//! SSE (`GET /haip/sse`) and HTTP streaming (`/haip/stream`): a session whose
//! server→client envelopes are the lines (NDJSON) or `data:` events (SSE) of one
//! long response, and whose client→server envelopes arrive as upstream POSTs or,
//! for `POST /haip/stream`, as NDJSON lines of the request body itself.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http_body_util::BodyExt;
use hyper::body::Frame as BodyFrame;

use super::body::RequestBody;
use tokio::sync::mpsc;

#[cfg(test)]
use super::frame::Writer;
use super::frame::{Frame, Unit, WriteMeter};
use super::queue::FrameReceiver;
#[cfg(test)]
use crate::session::Shared;

/// How envelopes are framed in the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `text/event-stream`: `data: <json>\n\n`; keep-alive comments; with
    /// `done_marker`, `data: [DONE]` after the last envelope.
    Sse { done_marker: bool },
    /// `application/x-ndjson`: one envelope per line.
    Ndjson,
}

impl Framing {
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Framing::Sse { .. } => "text/event-stream",
            Framing::Ndjson => "application/x-ndjson",
        }
    }
}

/// Inbound units queued per stream session (upstream POSTs and NDJSON lines
/// wait beyond this). Each may be up to `max_message_bytes`, so few.
pub(crate) const INBOUND_QUEUE: usize = 4;

/// The response body: frames from the session, formatted for `framing`. An
/// envelope counts as written (`meter`) once hyper has taken it.
pub(crate) fn body(
    frames: FrameReceiver,
    framing: Framing,
    meter: Arc<WriteMeter>,
) -> impl futures_util::Stream<Item = Result<BodyFrame<Bytes>, Infallible>> + Send + 'static {
    futures_util::stream::unfold(Some(frames), move |state| {
        let meter = Arc::clone(&meter);
        async move {
            let mut frames = state?;
            loop {
                let frame = frames.recv().await?;
                if let Frame::Envelope(text) = &frame {
                    meter.written(text.len());
                }
                let bytes = match (frame, framing) {
                    (Frame::Envelope(text), Framing::Sse { .. }) => sse_data(&text),
                    (Frame::Envelope(text), Framing::Ndjson) => {
                        let mut line = BytesMut::with_capacity(text.len() + 1);
                        line.extend_from_slice(&text);
                        line.extend_from_slice(b"\n");
                        line.freeze()
                    }
                    (Frame::KeepAlive, Framing::Sse { .. }) => Bytes::from_static(b": ping\n\n"),
                    (Frame::KeepAlive, Framing::Ndjson) => continue,
                    (Frame::Close { .. }, Framing::Sse { done_marker: true }) => {
                        return Some((
                            Ok(BodyFrame::data(Bytes::from_static(b"data: [DONE]\n\n"))),
                            None,
                        ));
                    }
                    (Frame::Close { .. }, _) => return None,
                };
                return Some((Ok(BodyFrame::data(bytes)), Some(frames)));
            }
        }
    })
}

fn sse_data(text: &[u8]) -> Bytes {
    let mut event = BytesMut::with_capacity(text.len() + 8);
    event.extend_from_slice(b"data: ");
    event.extend_from_slice(text);
    event.extend_from_slice(b"\n\n");
    event.freeze()
}

/// Reads a request body as NDJSON envelopes into the session, one line at a
/// time, as it arrives. Blank lines are skipped; a line over `max_line` bytes is
/// reported (`MESSAGE_TOO_LARGE`) and ends reading. The body's end does not end
/// the session.
pub(crate) async fn read_ndjson(body: RequestBody, max_line: usize, inbound: mpsc::Sender<Unit>) {
    let mut body = body.into_data_stream();
    let mut buffer = BytesMut::new();
    loop {
        // Stop when the session has ended, even if the client keeps its request open.
        let chunk = tokio::select! {
            chunk = body.next() => chunk,
            () = inbound.closed() => return,
        };
        let chunk = match chunk {
            Some(Ok(chunk)) => chunk,
            None => break,
            // The client's side of the request broke off: the connection is
            // lost (unlike a clean end of the body, which keeps the session).
            Some(Err(_)) => {
                let _ = inbound.send(Unit::Lost).await;
                return;
            }
        };
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            let line = buffer.split_to(end + 1);
            if !send_line(&line[..end], max_line, &inbound).await {
                return;
            }
        }
        if buffer.len() > max_line {
            let _ = inbound.send(Unit::TooLarge).await;
            return;
        }
    }
    // A last line without its newline still counts.
    let _ = send_line(&buffer, max_line, &inbound).await;
}

/// Sends one line; false when reading must stop.
async fn send_line(line: &[u8], max_line: usize, inbound: &mpsc::Sender<Unit>) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return true;
    }
    if line.len() > max_line {
        let _ = inbound.send(Unit::TooLarge).await;
        return false;
    }
    let text = String::from_utf8_lossy(line).into_owned();
    inbound.send(Unit::Text(text)).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::queue::frame_queue;

    #[tokio::test]
    async fn frames_are_formatted_per_framing() {
        for (framing, expected) in [
            (Framing::Ndjson, vec!["{\"a\":1}\n"]),
            (
                Framing::Sse { done_marker: false },
                vec!["data: {\"a\":1}\n\n", ": ping\n\n"],
            ),
            (
                Framing::Sse { done_marker: true },
                vec!["data: {\"a\":1}\n\n", ": ping\n\n", "data: [DONE]\n\n"],
            ),
        ] {
            let (frames, rx) = frame_queue();
            let meter = WriteMeter::new(Shared::for_tests(Default::default()));
            let writer = Writer {
                frames,
                meter: Arc::clone(&meter),
            };
            assert!(writer.send(Frame::Envelope(Bytes::from_static(b"{\"a\":1}"))));
            assert_eq!(meter.bytes(), 7);
            writer.send(Frame::KeepAlive);
            writer.send(Frame::Close {
                code: 1001,
                reason: "server shutdown",
            });
            writer.send(Frame::Envelope("after close".into()));
            let chunks: Vec<String> = body(rx, framing, Arc::clone(&meter))
                .map(|f| String::from_utf8(f.unwrap().into_data().unwrap().to_vec()).unwrap())
                .collect()
                .await;
            assert_eq!(chunks, expected, "{framing:?}");
            assert_eq!(
                meter.bytes(),
                "after close".len(),
                "written once taken by the body"
            );
        }
    }
}
