//! The loop every transport runs: inbound units and call events into the
//! session, committed envelopes out to the transport's writer, heartbeat,
//! idle timeout and graceful shutdown. Transports only adapt their framing.

use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, MissedTickBehavior};

use crate::exec::CallEvent;
use crate::session::{Control, Session, Shared};

/// One inbound unit, already framed by the transport.
pub(crate) enum Unit {
    /// One envelope's text (a WebSocket text message, an NDJSON line, ...).
    Text(String),
    /// Envelopes of one upstream POST, handled in order; the sender learns when
    /// they have been handled.
    Batch(Vec<String>, oneshot::Sender<()>),
    /// A unit over `max_message_bytes`: reported, then the connection closes.
    TooLarge,
}

/// One outbound frame for the transport's writer.
#[derive(Debug)]
pub(crate) enum Frame {
    /// A committed envelope's JSON text (UTF-8).
    Envelope(Bytes),
    /// A keep-alive with no envelope (an SSE comment), for clients that filter `PING`.
    KeepAlive,
    /// The last frame: close with this code and reason (WebSocket) or end the stream.
    Close { code: u16, reason: &'static str },
}

/// How the session's connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// A `Close` frame was handed to the writer.
    Closed,
    /// The client went away (or the writer did).
    Gone,
    /// The client stopped reading and the outbound queue overflowed: nothing
    /// more can reach it.
    Overflowed,
}

/// Per-transport settings of the loop.
pub(crate) struct Options {
    /// Interval of heartbeat `PING`s (`None`: off).
    pub(crate) heartbeat: Option<Duration>,
    /// Send [`Frame::KeepAlive`] when the client filters heartbeat `PING`s.
    pub(crate) keep_alive_frames: bool,
}

/// Messages handed to a writer at once; beyond this the session's outbox holds
/// envelopes uncommitted, where progress can still be merged.
pub(crate) const WRITE_QUEUE: usize = 32;

/// Runs `session` until its connection ends.
pub(crate) async fn drive<S>(
    session: &mut Session,
    events: &mut mpsc::UnboundedReceiver<CallEvent>,
    inbound: S,
    out: &mpsc::Sender<Frame>,
    shared: &Shared,
    options: Options,
) -> Ended
where
    S: Stream<Item = Unit>,
{
    tokio::pin!(inbound);
    // `interval` needs a period even when the heartbeat is off; it never fires then.
    let period = options.heartbeat.unwrap_or(Duration::from_secs(3600));
    let mut heartbeat = tokio::time::interval_at(Instant::now() + period, period);
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let idle_timeout = shared.config.idle_timeout;
    let idle = tokio::time::sleep(idle_timeout.unwrap_or(Duration::from_secs(86_400)));
    tokio::pin!(idle);

    let mut shutting_down = false;
    let mut close: Option<(u16, &'static str)> = None;
    loop {
        if session.overflowed() {
            return Ended::Overflowed;
        }
        if shutting_down && close.is_none() && session.is_idle() {
            close = Some((1001, "server shutdown"));
        }
        if let Some((code, reason)) = close
            && !session.has_outbound()
        {
            return match out.send(Frame::Close { code, reason }).await {
                Ok(()) => Ended::Closed,
                Err(_) => Ended::Gone,
            };
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
                let Ok(permit) = permit else { return Ended::Gone };
                if let Some(text) = session.commit_next() {
                    permit.send(Frame::Envelope(text));
                }
                // Hand over as much as fits without waiting.
                while session.has_outbound() {
                    let Ok(permit) = out.try_reserve() else { break };
                    if let Some(text) = session.commit_next() {
                        permit.send(Frame::Envelope(text));
                    }
                }
            }
            () = out.closed() => return Ended::Gone,
            unit = inbound.next(), if reading => {
                let Some(unit) = unit else { return Ended::Gone };
                if let Some(limit) = idle_timeout {
                    idle.as_mut().reset(Instant::now() + limit);
                }
                let control = match unit {
                    Unit::Text(text) => session.handle_text(&text),
                    Unit::Batch(texts, done) => {
                        let mut control = Control::Continue;
                        for text in &texts {
                            control = session.handle_text(text);
                            if control != Control::Continue {
                                break;
                            }
                        }
                        let _ = done.send(());
                        control
                    }
                    Unit::TooLarge => session.message_too_large(),
                };
                if let Control::Close { code, reason } = control {
                    close = Some((code, reason));
                }
            }
            _ = heartbeat.tick(), if options.heartbeat.is_some() => {
                if !session.heartbeat() && options.keep_alive_frames {
                    // Best effort: a full writer queue means traffic is flowing anyway.
                    let _ = out.try_send(Frame::KeepAlive);
                }
            }
            () = &mut idle, if idle_timeout.is_some() && close.is_none() => {
                close = Some((1000, "idle timeout"));
            }
        }
    }
}
