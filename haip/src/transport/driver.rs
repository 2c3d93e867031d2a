//! The loop every transport runs: inbound units and call events into the
//! session, committed envelopes out to the transport's writer, heartbeat,
//! idle timeout and graceful shutdown. Transports only adapt their framing.

use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, MissedTickBehavior};

use crate::exec::CallEvent;
use std::sync::Arc;

use crate::session::{Attached, Control, ResumeRequest, Session, Shared, Takeover, park};

/// One inbound unit, already framed by the transport.
pub(crate) enum Unit {
    /// One envelope's text (a WebSocket text message, an NDJSON line, ...).
    Text(String),
    /// Envelopes of one upstream POST, handled in order; the sender learns when
    /// they have been handled.
    Batch(Vec<String>, oneshot::Sender<()>),
    /// A unit over `max_message_bytes`: reported, then the connection closes.
    TooLarge,
    /// The client's side of the connection failed (a request body that broke
    /// off): the connection is lost.
    Lost,
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
    /// A `Close` frame with this code was handed to the writer.
    Closed(u16),
    /// The client went away (or the writer did).
    Gone,
    /// The client stopped reading and the outbound queue overflowed: nothing
    /// more can reach it.
    Overflowed,
    /// Another connection resumed the session.
    HandedOver,
}

impl Ended {
    /// Whether the session outlives its connection, resumable (HAIP.md §11.3):
    /// not after shutdown or a version mismatch.
    pub(crate) fn keeps_session(self) -> bool {
        !matches!(self, Ended::Closed(1001 | 1002) | Ended::HandedOver)
    }
}

/// Called with the session id after the connection resumed another session.
pub(crate) type OnResumed = Box<dyn FnMut(&str) + Send>;

/// Per-transport settings of the loop.
pub(crate) struct Options {
    /// Interval of heartbeat `PING`s (`None`: off).
    pub(crate) heartbeat: Option<Duration>,
    /// Send [`Frame::KeepAlive`] when the client filters heartbeat `PING`s.
    pub(crate) keep_alive_frames: bool,
    /// Told the session id after the connection resumed another session.
    pub(crate) on_resumed: Option<OnResumed>,
}

/// Messages handed to a writer at once; beyond this the session's outbox holds
/// envelopes uncommitted, where progress can still be merged.
pub(crate) const WRITE_QUEUE: usize = 32;

/// How long the last frame may wait for room in the writer's queue.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a resumption waits for the session's current owner.
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(5);

/// Puts a new session on a connection: registers it for resumption.
pub(crate) fn attach(
    session: Session,
    events: mpsc::UnboundedReceiver<CallEvent>,
    shared: &Shared,
) -> Attached {
    let takeovers = shared.store.register(session.id());
    Attached {
        session: Box::new(session),
        events,
        takeovers,
    }
}

/// After the connection: parks the session for resumption, or forgets it.
pub(crate) fn detach(ended: Ended, attached: Option<Attached>, shared: &Shared) {
    let Some(attached) = attached else { return };
    // Detached sessions are bounded like connected ones: beyond
    // `max_sessions` a lost session is not kept.
    let room = shared
        .stats
        .detached_sessions
        .load(std::sync::atomic::Ordering::Relaxed)
        < shared.config.max_sessions as u64;
    if ended.keeps_session() && room && !shared.shutdown.is_cancelled() {
        park(attached, Arc::clone(&shared.store), shared);
    } else {
        shared.store.remove(attached.session.id());
    }
}

/// Runs the session until its connection ends; gives it back unless another
/// connection took it over.
pub(crate) async fn drive<S>(
    mut attached: Attached,
    inbound: S,
    out: &mpsc::Sender<Frame>,
    shared: &Shared,
    mut options: Options,
) -> (Ended, Option<Attached>)
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
    // Shutdown is bounded even for a client that stops reading: calls get
    // their grace period, the last frames a little more.
    let give_up = tokio::time::sleep(Duration::from_secs(86_400));
    tokio::pin!(give_up);
    let mut close: Option<(u16, &'static str)> = None;
    // Made once, not per turn of the loop: each of these registers a waiter
    // (behind a lock) when first polled and unregisters it when dropped.
    let shutdown = shared.shutdown.clone().cancelled_owned();
    tokio::pin!(shutdown);
    let closed = out.closed();
    tokio::pin!(closed);
    let mut tool_changes = shared.registry.subscribe();
    loop {
        let session = &mut attached.session;
        if session.overflowed() {
            return (Ended::Overflowed, Some(attached));
        }
        if shutting_down && close.is_none() && session.is_idle() {
            close = Some((1001, "server shutdown"));
        }
        if let Some((code, reason)) = close
            && !session.has_outbound()
        {
            // A client that stopped reading must not hold the close (and so
            // graceful shutdown) up for ever.
            return match tokio::time::timeout(
                CLOSE_TIMEOUT,
                out.send(Frame::Close { code, reason }),
            )
            .await
            {
                Ok(Ok(())) => (Ended::Closed(code), Some(attached)),
                Ok(Err(_)) => (Ended::Gone, Some(attached)),
                Err(_) => (Ended::Overflowed, Some(attached)),
            };
        }
        let reading = close.is_none() && !shutting_down;
        let mut takeover = None;
        let mut resume = None;
        let mut after_resume = None;
        tokio::select! {
            biased;
            () = &mut shutdown, if !shutting_down => {
                shutting_down = true;
                session.begin_shutdown();
                give_up.as_mut().reset(Instant::now() + shared.config.cancel_grace + CLOSE_TIMEOUT);
            }
            // The client is not taking its last envelopes: drop it like an overflow.
            () = &mut give_up, if shutting_down => return (Ended::Overflowed, Some(attached)),
            Some(event) = attached.events.recv() => session.handle_event(event),
            Some(request) = attached.takeovers.recv(), if !shutting_down => takeover = Some(request),
            permit = out.reserve(), if session.has_outbound() => {
                let Ok(permit) = permit else { return (Ended::Gone, Some(attached)) };
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
            () = &mut closed => return (Ended::Gone, Some(attached)),
            unit = inbound.next(), if reading => {
                let Some(unit) = unit else { return (Ended::Gone, Some(attached)) };
                if let Some(limit) = idle_timeout {
                    idle.as_mut().reset(Instant::now() + limit);
                }
                let control = match unit {
                    Unit::Text(text) => session.handle_text(&text),
                    Unit::Batch(texts, done) => {
                        let (control, rest) = handle_batch(session, texts);
                        if let (Control::Resume(_), Some(rest)) = (&control, rest) {
                            // The rest of the body belongs to the resumed session.
                            after_resume = Some((rest, done));
                        } else {
                            let _ = done.send(());
                        }
                        control
                    }
                    Unit::TooLarge => session.message_too_large(),
                    Unit::Lost => return (Ended::Gone, Some(attached)),
                };
                match control {
                    Control::Continue => {}
                    Control::Close { code, reason } => close = Some((code, reason)),
                    Control::Resume(request) => resume = Some(request),
                }
            }
            // Changes are taken even before the client's `HAI` asks for
            // pushes, so that `HAI`'s own push is not followed by a stale one.
            Ok(()) = tool_changes.changed(), if shared.config.advertise_tools => {
                if session.wants_tool_push() {
                    session.push_tool_list();
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
        if let Some(request) = takeover {
            // Another connection resumes this session: hand it over and close.
            match (*request).answer(attached) {
                Some(kept) => attached = kept,
                None => {
                    let close = Frame::Close {
                        code: 1000,
                        reason: "session resumed elsewhere",
                    };
                    let _ = tokio::time::timeout(CLOSE_TIMEOUT, out.send(close)).await;
                    return (Ended::HandedOver, None);
                }
            }
        }
        if let Some(request) = resume {
            attached = resume_into(attached, *request, shared, &mut options).await;
        }
        if let Some((rest, done)) = after_resume {
            let (control, _) = handle_batch(&mut attached.session, rest);
            let _ = done.send(());
            if let Control::Close { code, reason } = control {
                close = Some((code, reason));
            }
        }
    }
}

/// Handles an upstream POST's envelopes in order until one asks the
/// connection to close or to resume; returns that control and, for a
/// resumption, the envelopes after it.
fn handle_batch(session: &mut Session, texts: Vec<String>) -> (Control, Option<Vec<String>>) {
    let mut texts = texts.into_iter();
    while let Some(text) = texts.next() {
        match session.handle_text(&text) {
            Control::Continue => {}
            resume @ Control::Resume(_) => return (resume, Some(texts.collect())),
            close => return (close, None),
        }
    }
    (Control::Continue, None)
}

/// Takes the requested session over from its owner (a parked task or another
/// connection), or reports why not; returns the session this connection is on.
async fn resume_into(
    fresh: Attached,
    request: ResumeRequest,
    shared: &Shared,
    options: &mut Options,
) -> Attached {
    let outcome = match request.last_rx_seq {
        None => Err("invalid last_rx_seq"),
        Some(last_rx_seq) => take_over(&request.session, last_rx_seq, &fresh, shared).await,
    };
    match outcome {
        Ok(mut resumed) => {
            shared.store.remove(fresh.session.id());
            // `resumed` carries the seq it was at; the fresh session (only its
            // HAI was sent) ends here.
            // The confirming HAI describes this connection's transport.
            let transport = fresh.session.transport();
            resumed
                .session
                .resumed(request.last_rx_seq.unwrap_or(0), &request.hai, transport);
            tracing::debug!(session = %resumed.session.id(), "session resumed");
            if let Some(on_resumed) = options.on_resumed.as_mut() {
                on_resumed(resumed.session.id());
            }
            resumed
        }
        Err(reason) => {
            let mut fresh = fresh;
            fresh
                .session
                .resume_failed(reason, request.related_id.as_deref(), &request.hai);
            fresh
        }
    }
}

async fn take_over(
    id: &str,
    last_rx_seq: u64,
    fresh: &Attached,
    shared: &Shared,
) -> Result<Attached, &'static str> {
    let owner = shared.store.find(id).ok_or("unknown session")?;
    let (reply, answer) = oneshot::channel();
    let request = Box::new(Takeover {
        subject: fresh.session.subject().cloned(),
        last_rx_seq,
        reply,
    });
    let asked = tokio::time::timeout(TAKEOVER_TIMEOUT, async {
        owner.send(request).await.map_err(|_| "unknown session")?;
        answer.await.map_err(|_| "unknown session")?
    });
    asked.await.unwrap_or(Err("unknown session"))
}
