//! WebSocket: the glue between a tungstenite connection and a [`Session`].

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};

use crate::exec::CallEvent;
use crate::protocol::is_binary_envelope;
use crate::session::{Control, Session, Shared};

type Ws = WebSocketStream<TokioIo<Upgraded>>;

/// Messages handed to the writer task at once; beyond this the session's own
/// outbox holds envelopes uncommitted, where progress can still be merged.
const WRITE_QUEUE: usize = 32;
/// How long a closing connection may take to write its last frames.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The tungstenite settings for one connection: a small read buffer (the
/// default 128 KiB would dominate an idle session's memory) and the message cap.
pub(crate) fn config(max_message_bytes: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4096)
        .max_write_buffer_size(max_message_bytes.saturating_mul(2).max(256 * 1024))
        .max_message_size(Some(max_message_bytes))
        .max_frame_size(Some(max_message_bytes))
}

/// Accepts the upgraded connection and runs the session on it until it closes.
pub(crate) async fn serve(
    upgraded: Upgraded,
    shared: Arc<Shared>,
    session: Option<(Session, mpsc::UnboundedReceiver<CallEvent>)>,
) {
    let config = config(shared.config.max_message_bytes);
    let ws =
        WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
    match session {
        Some((session, events)) => run(ws, session, events, &shared).await,
        None => {
            // Over `max_sessions`: the upgrade completed, no HAI, close 1013.
            let (mut sink, _) = ws.split();
            let frame = close_frame(1013, "too many sessions");
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, sink.send(frame)).await;
        }
    }
}

fn close_frame(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: reason.into(),
    }))
}

async fn run(
    ws: Ws,
    mut session: Session,
    mut events: mpsc::UnboundedReceiver<CallEvent>,
    shared: &Shared,
) {
    let span = tracing::debug_span!("session", id = %session.id());
    let _enter = span.enter();
    let (sink, mut stream) = ws.split();
    let (out, out_rx) = mpsc::channel::<Message>(WRITE_QUEUE);
    let mut writer = tokio::spawn(write_loop(sink, out_rx));

    let heartbeat_period = shared.config.heartbeat_interval;
    let mut heartbeat = tokio::time::interval_at(
        Instant::now() + heartbeat_period.unwrap_or(Duration::from_secs(3600)),
        heartbeat_period.unwrap_or(Duration::from_secs(3600)),
    );
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let idle_timeout = shared.config.idle_timeout;
    let idle = tokio::time::sleep(idle_timeout.unwrap_or(Duration::from_secs(86_400 * 365)));
    tokio::pin!(idle);

    let mut shutting_down = false;
    let mut close: Option<(u16, &'static str)> = None;
    let overflowed = loop {
        if session.overflowed() {
            break true;
        }
        if shutting_down && close.is_none() && session.is_idle() {
            close = Some((1001, "server shutdown"));
        }
        if let Some((code, reason)) = close
            && !session.has_outbound()
        {
            let _ = out.send(close_frame(code, reason)).await;
            break false;
        }
        let reading = close.is_none() && !shutting_down;
        tokio::select! {
            biased;
            () = shared.shutdown.cancelled(), if !shutting_down => {
                shutting_down = true;
                session.begin_shutdown();
            }
            Some(event) = events.recv() => session.handle_event(event),
            permit = out.reserve(), if session.has_outbound() => {
                let Ok(permit) = permit else { break false }; // writer gone
                if let Some(text) = session.commit_next() {
                    permit.send(Message::text(text));
                }
                // Hand over as much as fits without waiting.
                while session.has_outbound() {
                    let Ok(permit) = out.try_reserve() else { break };
                    if let Some(text) = session.commit_next() {
                        permit.send(Message::text(text));
                    }
                }
            }
            incoming = stream.next(), if reading => {
                if let Some(limit) = idle_timeout {
                    idle.as_mut().reset(Instant::now() + limit);
                }
                let control = match incoming {
                    Some(Ok(Message::Text(text))) => session.handle_text(text.as_str()),
                    // A binary message holding a JSON envelope is handled like
                    // text; other binary data has no consumer yet (§13).
                    Some(Ok(Message::Binary(bytes))) => match std::str::from_utf8(&bytes) {
                        Ok(text) if is_binary_envelope(&bytes) => session.handle_text(text),
                        _ => Control::Continue,
                    },
                    Some(Ok(Message::Close(_))) | None => break false,
                    Some(Ok(_)) => Control::Continue, // ping/pong frames: tungstenite answers pings
                    Some(Err(WsError::Capacity(CapacityError::MessageTooLong { .. }))) => session.message_too_large(),
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "websocket read failed");
                        break false;
                    }
                };
                if let Control::Close { code, reason } = control {
                    close = Some((code, reason));
                }
            }
            _ = heartbeat.tick(), if heartbeat_period.is_some() => session.heartbeat(),
            () = &mut idle, if idle_timeout.is_some() && close.is_none() => {
                close = Some((1000, "idle timeout"));
            }
        }
    };
    drop(out);
    if overflowed {
        // The client stopped reading: nothing more can reach it, not even a close frame.
        tracing::warn!(
            queued = session.outbound_len(),
            "outbound queue overflow; dropping the connection"
        );
        writer.abort();
    } else if tokio::time::timeout(CLOSE_TIMEOUT, &mut writer)
        .await
        .is_err()
    {
        writer.abort();
    }
    shared.stats.active_connections.fetch_sub(1, Relaxed);
}

async fn write_loop(
    mut sink: futures_util::stream::SplitSink<Ws, Message>,
    mut rx: mpsc::Receiver<Message>,
) {
    while let Some(msg) = rx.recv().await {
        let mut closing = matches!(msg, Message::Close(_));
        if sink.feed(msg).await.is_err() {
            return;
        }
        // Batch whatever else is ready into one flush.
        while !closing && let Ok(more) = rx.try_recv() {
            closing = matches!(more, Message::Close(_));
            if sink.feed(more).await.is_err() {
                return;
            }
        }
        if sink.flush().await.is_err() || closing {
            return;
        }
    }
}
