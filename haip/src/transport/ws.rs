//! WebSocket framing: a tungstenite connection as inbound units and a writer
//! task for outbound frames. The driver (`server::driver`) runs the session.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, Stream, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;

use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use super::frame::{Frame, Unit, WRITER_BUDGET, WriteMeter, Writer};
use super::queue::{FrameReceiver, frame_queue};

type Ws = WebSocketStream<TokioIo<Upgraded>>;

/// How long a closing connection may take to write its last frames.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The tungstenite settings for one connection: a small read buffer (the
/// default 128 KiB would dominate an idle session's memory), the inbound
/// message cap, and a write buffer that takes any frame up to
/// `max_outbound_message_bytes` (docs/protocol.md §18.1).
pub(crate) fn config(
    max_message_bytes: usize,
    max_outbound_message_bytes: usize,
) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(2048)
        .max_write_buffer_size(
            max_outbound_message_bytes
                .saturating_add(WRITER_BUDGET)
                .saturating_add(64 * 1024),
        )
        .max_message_size(Some(max_message_bytes))
        .max_frame_size(Some(max_message_bytes))
}

/// The `Sec-WebSocket-Accept` value for a client's `Sec-WebSocket-Key`.
pub(crate) fn accept_key(key: &[u8]) -> String {
    tokio_tungstenite::tungstenite::handshake::derive_accept_key(key)
}

/// Refuses an upgraded connection: sends `envelope` (an auth failure's
/// `ERROR`), if any, then closes with `code` and `reason`.
pub(crate) async fn refuse(
    upgraded: Upgraded,
    max_message_bytes: usize,
    envelope: Option<String>,
    code: u16,
    reason: &'static str,
) {
    let config = config(max_message_bytes, 4096);
    let ws =
        WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
    let (mut sink, _) = ws.split();
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
        if let Some(envelope) = envelope {
            sink.feed(Message::text(envelope)).await?;
        }
        sink.send(close_frame(code, reason)).await
    })
    .await;
}

fn close_frame(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: reason.into(),
    }))
}

/// An upgraded WebSocket connection, framed for the driver: inbound units in,
/// frames out through a writer task.
pub(crate) struct Connection {
    /// Text, binary, ping/pong activity and protocol errors, until the client's
    /// close or a broken read.
    pub(crate) inbound: Pin<Box<dyn Stream<Item = Unit> + Send>>,
    /// Where the driver hands frames to the writer task.
    pub(crate) out: Writer,
    writer: JoinHandle<()>,
}

impl Connection {
    /// Frames `upgraded` (docs/protocol.md §18.1 sizes from the settings); `meter` counts
    /// what the writer holds.
    pub(crate) async fn accept(
        upgraded: Upgraded,
        max_message_bytes: usize,
        max_outbound_message_bytes: usize,
        meter: Arc<WriteMeter>,
    ) -> Connection {
        let config = config(max_message_bytes, max_outbound_message_bytes);
        let ws =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config))
                .await;
        let (sink, stream) = ws.split();
        let (frames, frames_rx) = frame_queue();
        let writer = tokio::spawn(write_loop(sink, frames_rx, Arc::clone(&meter)));
        let inbound = Box::pin(
            stream
                .take_while(|msg| std::future::ready(!matches!(msg, Ok(Message::Close(_)))))
                .filter_map(|msg| std::future::ready(unit_of(msg)))
                // A read error other than an oversized message ends the connection.
                .take_while(|unit| std::future::ready(unit.is_some()))
                .filter_map(std::future::ready),
        );
        Connection {
            inbound,
            out: Writer { frames, meter },
            writer,
        }
    }

    /// Ends the connection once the driver is done with it. `abandon`: the
    /// client had its time to read what was left, so the writer stops at once.
    /// Otherwise a lingering close: the writer gets [`CLOSE_TIMEOUT`] to write
    /// what it holds and the close frame, while the client's input is read and
    /// discarded until its own close, so that the socket is not reset with
    /// unread data (which would lose what was written).
    pub(crate) async fn finish(self, abandon: bool) {
        let Connection {
            mut inbound,
            out,
            mut writer,
        } = self;
        drop(out);
        if abandon {
            writer.abort();
            return;
        }
        let drain = async { while inbound.next().await.is_some() {} };
        let finished = tokio::time::timeout(CLOSE_TIMEOUT, async {
            let (written, ()) = tokio::join!(&mut writer, drain);
            written
        })
        .await;
        if finished.is_err() {
            writer.abort();
        }
    }
}

/// Maps one read result: `None` = skip it, `Some(None)` = the connection is broken.
fn unit_of(msg: Result<Message, WsError>) -> Option<Option<Unit>> {
    match msg {
        Ok(Message::Text(text)) => Some(Some(Unit::Text(text.as_str().to_owned()))),
        // A two-frame body, an envelope sent as binary, or data (docs/protocol.md §13).
        Ok(Message::Binary(bytes)) => Some(Some(Unit::Binary(bytes))),
        // Tungstenite answers pings itself; both show the client is there.
        Ok(Message::Ping(_) | Message::Pong(_)) => Some(Some(Unit::Activity)),
        Ok(Message::Close(_) | Message::Frame(_)) => None,
        Err(WsError::Capacity(CapacityError::MessageTooLong { .. })) => Some(Some(Unit::TooLarge)),
        // docs/protocol.md §18.1: invalid UTF-8 in a text frame closes with 1007, any
        // other breach of the WebSocket protocol with 1002.
        Err(WsError::Utf8(e)) => {
            tracing::debug!(error = %e, "invalid UTF-8 in a text message");
            Some(Some(Unit::ProtocolError {
                code: 1007,
                reason: "invalid utf-8",
            }))
        }
        Err(WsError::Protocol(e)) => {
            tracing::debug!(error = %e, "websocket protocol error");
            Some(Some(Unit::ProtocolError {
                code: 1002,
                reason: "protocol error",
            }))
        }
        Err(e) => {
            tracing::debug!(error = %e, "websocket read failed");
            Some(None)
        }
    }
}

async fn write_loop(
    mut sink: futures_util::stream::SplitSink<Ws, Message>,
    mut rx: FrameReceiver,
    meter: Arc<WriteMeter>,
) {
    while let Some(frame) = rx.recv().await {
        let mut closing = false;
        let mut next = Some(frame);
        // Bytes fed since the last flush, counted out once flushed.
        let mut fed = 0;
        // Batch whatever is ready into one flush.
        while let Some(frame) = next.take() {
            let msg = match frame {
                // Committed envelopes are serde_json output: always UTF-8.
                Frame::Envelope(text) => {
                    fed += text.len();
                    match Utf8Bytes::try_from(text) {
                        Ok(text) => Message::Text(text),
                        Err(_) => {
                            next = rx.try_recv();
                            continue;
                        }
                    }
                }
                Frame::KeepAlive => {
                    next = rx.try_recv();
                    continue;
                }
                Frame::Close { code, reason } => {
                    closing = true;
                    close_frame(code, reason)
                }
            };
            if sink.feed(msg).await.is_err() {
                return;
            }
            if !closing {
                next = rx.try_recv();
            }
        }
        let flushed = sink.flush().await;
        meter.written(fed);
        if flushed.is_err() || closing {
            return;
        }
    }
}
