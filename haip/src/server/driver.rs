//! The connection driver, the one loop that runs every session: inbound units,
//! call events and the session's own deadlines (`poll_timeout`) into the
//! session, what it asks for (`poll_action`: calls to start on the call
//! runner, keep-alives) carried out, committed envelopes out to the
//! transport's writer, back-pressure and graceful shutdown; then detaching the
//! session, and running it parked until it is resumed or expires. The session
//! decides; this is the only place that awaits. Transports only frame
//! (`transport::{ws, stream}`).
//!
//! Back-pressure (docs/protocol.md §18.1): the writer is handed committed envelopes
//! only while it holds less than [`WRITER_BUDGET`] bytes, so a client that
//! stops reading leaves the rest uncommitted in the session's outbox, where
//! the bytes are counted. Above half of `max_outbound_bytes` the driver stops
//! taking input from the connection (TCP pushes back on the client; running
//! calls go on); when the outbox overflows, the connection is closed `too
//! slow` and the session kept for resumption.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use hyper::upgrade::Upgraded;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::exec::CallEvent;
use crate::protocol::{DecodeError, ErrorCode};
use crate::session::link::{Link, LinkMessage, LinkOpen, LinkPurpose, close_reason};
use crate::session::{
    Action, Attached, Control, LARGE_PARAMS, NotRestored, Overflow, ResumeRefused, ResumeRequest,
    Session, SessionStore, Shared, Takeover, TakeoverAddress, decode_unit, next_event,
};
use crate::stats::Throttle;
use crate::transport::frame::{Batch, Element, Frame, Unit, WRITER_BUDGET, WriteMeter, Writer};
use crate::transport::ws;

/// How the session's connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// A `Close` frame with this code was handed to the writer; `keep` says
    /// whether the session outlives the connection.
    Closed { code: u16, keep: bool },
    /// The client went away (or the writer did).
    Gone,
    /// The client did not read fast enough (the outbox overflowed): closed
    /// with 1008, though the close frame may never reach it.
    TooSlow,
    /// A close was decided, but the client did not take what was queued
    /// for it in time: nothing more can reach it. `keep` as for `Closed`.
    Abandoned { keep: bool },
    /// Another connection resumed the session.
    HandedOver,
    /// The connection resumed a session another instance runs: it is
    /// relayed there ([`Options::relay`]).
    Relayed,
}

impl Ended {
    /// Whether the session outlives its connection, resumable (docs/protocol.md §11.3):
    /// not after shutdown, a version mismatch or a takeover.
    pub(crate) fn keeps_session(self) -> bool {
        match self {
            Ended::Closed { keep, .. } | Ended::Abandoned { keep } => keep,
            Ended::Gone | Ended::TooSlow => true,
            Ended::HandedOver | Ended::Relayed => false,
        }
    }
}

/// Called with the session id after the connection resumed another session.
pub(crate) type OnResumed = Box<dyn FnMut(&str) + Send>;

/// Per-transport settings of the loop, and what it leaves behind.
pub(crate) struct Options {
    /// Told the session id after the connection resumed another session.
    pub(crate) on_resumed: Option<OnResumed>,
    /// Set when the loop ended [`Ended::Relayed`]: the link to the instance
    /// running the session, and the rest of the POST being handled.
    pub(crate) relay: Option<(Link, Option<Batch>)>,
}

/// How long a resumption waits for the session's current owner.
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a resuming client is held while the instance that ran its
/// session cannot be reached: longer than a shared store's lease lasts
/// after its instance's last refresh (6 s), within a client's patience.
const OWNER_WAIT: Duration = Duration::from_secs(9);

/// Past a lease's expiry before trying again (clocks of Redis and this
/// instance run apart a little).
const LEASE_SLACK: Duration = Duration::from_millis(20);

/// The shortest and the longest wait between two tries: an owner that only
/// lost its subscription for a moment is found again within a second.
const RETRY_MIN: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// How long to wait for an instance restoring the session to say it holds it.
const RETRY_BEING_RESUMED: Duration = Duration::from_millis(100);

/// How long the last frames may take once shutdown has cancelled the calls.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a relayed upstream POST waits for the running side to say its
/// session has handled it, before it is answered anyway.
const ACK_LIMIT: Duration = Duration::from_secs(10);

/// What an upgraded WebSocket connection does.
pub(crate) enum Admission {
    /// Run this session, keeping the guard (the connection's count) alive
    /// while it runs.
    Session(Box<Session>, super::hub::ConnectionGuard),
    /// Send one envelope (an auth failure's `ERROR`), then close.
    Refuse {
        envelope: String,
        code: u16,
        reason: &'static str,
    },
}

/// Runs an upgraded WebSocket connection until it closes: attach, drive,
/// detach (park or forget), then close the connection.
pub(crate) async fn serve_ws(upgraded: Upgraded, shared: Arc<Shared>, admission: Admission) {
    let (session, _counted) = match admission {
        Admission::Session(session, guard) => (session, guard),
        Admission::Refuse {
            envelope,
            code,
            reason,
        } => {
            let limit = shared.config.max_message_bytes;
            ws::refuse(upgraded, limit, Some(envelope), code, reason).await;
            return;
        }
    };
    let span = tracing::debug_span!("session", id = %session.id());
    let _enter = span.enter();
    let meter = WriteMeter::new(Arc::clone(&shared));
    let mut conn = ws::Connection::accept(
        upgraded,
        shared.config.max_message_bytes,
        shared.config.max_outbound_message_bytes,
        meter,
    )
    .await;
    let attached = attach(*session, &shared);
    let mut options = Options {
        on_resumed: None,
        relay: None,
    };
    let (ended, attached) = drive(
        attached,
        &mut conn.inbound,
        &conn.out,
        &shared,
        &mut options,
    )
    .await;
    detach(ended, attached, &shared);
    if let Some((link, batch)) = options.relay.take() {
        relay(link, batch, &mut conn.inbound, &conn.out, &shared).await;
    }
    conn.finish(matches!(ended, Ended::Abandoned { .. })).await;
}

/// Runs a stream session until the client goes away (the body is dropped),
/// shutdown, or the connection must close; then parks it for resumption.
/// `on_resumed` learns the session id if the client resumes another session.
pub(crate) async fn run_stream(
    session: Session,
    mut inbound: mpsc::Receiver<Unit>,
    out: Writer,
    shared: &Shared,
    on_resumed: OnResumed,
) {
    let mut options = Options {
        on_resumed: Some(on_resumed),
        relay: None,
    };
    let mut inbound = futures_util::stream::poll_fn(move |cx| inbound.poll_recv(cx));
    let attached = attach(session, shared);
    let (ended, attached) = drive(attached, &mut inbound, &out, shared, &mut options).await;
    tracing::debug!(?ended, "stream session ended");
    detach(ended, attached, shared);
    if let Some((link, batch)) = options.relay.take() {
        relay(link, batch, &mut inbound, &out, shared).await;
    }
}

/// Puts a new session on a connection: registers it for resumption.
pub(crate) fn attach(session: Session, shared: &Shared) -> Attached {
    let takeovers = shared.store.register(session.id());
    Attached::new(session, takeovers)
}

/// Carries out what the session asked for: its calls and validations go to
/// the call runner; a keep-alive frame goes out when nothing else is flowing
/// (`writer` is `None` for a parked session).
fn perform(attached: &mut Attached, shared: &Shared, writer: Option<&Writer>) {
    while let Some(action) = attached.session.poll_action() {
        match action {
            Action::Start(start) => {
                // A call that finished on its first poll ends here and now.
                if let Some((key, outcome)) = shared.runner.start(*start, attached.events_tx()) {
                    attached
                        .session
                        .handle_event(CallEvent::Finished(key, outcome));
                }
            }
            Action::Validate(validate) => shared
                .runner
                .start_validation(*validate, attached.events_tx()),
            Action::KeepAlive => {
                if let Some(writer) = writer
                    && writer.meter.bytes() == 0
                {
                    writer.send(Frame::KeepAlive);
                }
            }
        }
    }
}

/// A sleep until the session's next deadline, re-armed only when it moves.
struct Alarm {
    at: Option<std::time::Instant>,
}

impl Alarm {
    /// Arms `sleep` for the session's next deadline, if that changed.
    fn arm(&mut self, session: &Session, sleep: std::pin::Pin<&mut tokio::time::Sleep>) {
        let next = session.poll_timeout();
        if next != self.at {
            self.at = next;
            if let Some(at) = next {
                sleep.reset(Instant::from_std(at));
            }
        }
    }

    /// The sleep fired: re-arm on the next turn even if the deadline is the same.
    fn fired(&mut self) {
        self.at = None;
    }
}

struct DetachedGuard(Arc<Shared>);

impl Drop for DetachedGuard {
    fn drop(&mut self) {
        self.0.stats.detached_sessions.fetch_sub(1, Relaxed);
    }
}

/// Keeps a disconnected session running for `keep`: its calls run on and
/// their envelopes are committed to it (kept in the replay window), until a
/// new connection takes it over or it expires. On expiry its calls are
/// cancelled with nothing sent (and counted as cancelled).
fn park(mut attached: Attached, store: Arc<dyn SessionStore>, shared: &Shared) {
    let keep = shared.config.replay_window_time;
    attached.session.disconnected();
    let shutdown = shared.shutdown.clone();
    let shared = Arc::clone(attached.session.shared());
    shared.stats.detached_sessions.fetch_add(1, Relaxed);
    let tasks = shared.runner.tasks().clone();
    tasks.spawn(async move {
        // Uncounted however the task ends.
        let _counted = DetachedGuard(Arc::clone(&shared));
        // First to go when the server's replay windows hold too much.
        let evict = CancellationToken::new();
        let ticket = shared
            .replay
            .detach(attached.session.window_cost(), evict.clone());
        let expiry = tokio::time::sleep(keep);
        tokio::pin!(expiry);
        // The session's own deadlines: its calls' timeouts and grace periods.
        let timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timer);
        let mut alarm = Alarm { at: None };
        loop {
            perform(&mut attached, &shared, None);
            // Commit whatever is due, so it is kept for replay.
            while attached.session.commit_next().is_some() {}
            alarm.arm(&attached.session, timer.as_mut());
            tokio::select! {
                request = attached.takeovers.recv() => match (*request).answer(attached) {
                    Some(kept) => attached = kept,
                    None => {
                        ticket.close();
                        return;
                    }
                },
                Some(event) = next_event(&mut attached.events) => attached.session.handle_event(event),
                () = &mut timer, if alarm.at.is_some() => {
                    alarm.fired();
                    // A parked session has no connection to close.
                    let _ = attached.session.handle_timeout(shared.clock.now());
                }
                () = &mut expiry => break,
                () = evict.cancelled() => {
                    tracing::debug!(session = %attached.session.id(), "parked session evicted (replay budget)");
                    break;
                }
                () = shutdown.cancelled() => break,
            }
        }
        store.remove(attached.session.id());
        tracing::debug!(session = %attached.session.id(), "parked session ended");
        // Dropping the session cancels its calls and releases its window.
        drop(attached);
        ticket.close();
    });
}

/// After the connection: parks the session for resumption, or forgets it.
pub(crate) fn detach(ended: Ended, attached: Option<Attached>, shared: &Shared) {
    let Some(attached) = attached else { return };
    // Detached sessions are bounded like connected ones: beyond
    // `max_sessions` a lost session is not kept.
    let room = shared.stats.detached_sessions.load(Relaxed) < shared.config.max_sessions as u64;
    if ended.keeps_session() && room && !shared.shutdown.is_cancelled() {
        park(attached, Arc::clone(&shared.store), shared);
    } else {
        shared.store.remove(attached.session.id());
    }
}

/// Whether the driver takes more input: not while the client has this much
/// waiting for it (docs/protocol.md §18.1: above half of `max_outbound_bytes`, or of
/// `max_outbound_queue`).
fn backlog_allows_input(session: &Session, writer: &Writer, shared: &Shared) -> bool {
    let backlog = session.backlog();
    let config = &shared.config;
    backlog.bytes.saturating_add(writer.meter.bytes()) <= config.max_outbound_bytes / 2
        && backlog.envelopes <= config.max_outbound_queue / 2
}

/// Runs the session until its connection ends; gives it back unless another
/// connection took it over.
pub(crate) async fn drive<S>(
    mut attached: Attached,
    inbound: S,
    writer: &Writer,
    shared: &Shared,
    options: &mut Options,
) -> (Ended, Option<Attached>)
where
    S: Stream<Item = Unit>,
{
    tokio::pin!(inbound);
    // The session's deadlines: heartbeat, idle, binary frame, its calls'.
    let timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(timer);
    let mut alarm = Alarm { at: None };

    let mut shutting_down = false;
    // Shutdown is bounded even for a client that stops reading: calls get
    // their grace period, the last frames a little more.
    let give_up = tokio::time::sleep(Duration::from_secs(86_400));
    tokio::pin!(give_up);
    let mut close: Option<(u16, &'static str, bool)> = None;
    // Committed envelopes waiting for their records to reach a shared
    // session store (Redis) before the client may see them, with their
    // tickets; always empty with the in-memory store.
    let mut unwritten: VecDeque<(u64, Bytes)> = VecDeque::new();
    let mut unwritten_bytes = 0usize;
    let gated = shared.store.records();
    // Once a close is decided, the client gets a bounded time to take what
    // is still queued for it.
    let mut closing_armed = false;
    // The upstream POST being handled, envelope by envelope.
    let mut batch: Option<Batch> = None;
    // Made once, not per turn of the loop: each of these registers a waiter
    // (behind a lock) when first polled and unregisters it when dropped.
    let shutdown = shared.shutdown.clone().cancelled_owned();
    tokio::pin!(shutdown);
    let closed = writer.frames.closed();
    tokio::pin!(closed);
    let mut tool_changes = shared.registry.subscribe();
    loop {
        perform(&mut attached, shared, Some(writer));
        let session = &mut attached.session;
        if let Some(overflow) = session.overflow() {
            let reason = match overflow {
                Overflow::Queue => "outbound queue overflow",
                Overflow::Bytes => "too slow",
            };
            static NOT_READING: Throttle = Throttle::new();
            if let Some(suppressed) = NOT_READING.allow() {
                tracing::warn!(
                    reason,
                    suppressed,
                    "client not reading; closing the connection"
                );
            }
            shared.stats.closed_too_slow.fetch_add(1, Relaxed);
            // Best effort: a client that starts reading again sees why.
            writer.send(Frame::Close { code: 1008, reason });
            return (Ended::TooSlow, Some(attached));
        }
        if shutting_down && close.is_none() && session.is_idle() {
            close = Some((1001, "server shutdown", false));
        }
        // Hand the writer what it has room for.
        // (Envelopes waiting for the store count against the writer's room.)
        while session.has_outbound() && writer.meter.bytes() + unwritten_bytes < WRITER_BUDGET {
            let Some(text) = session.commit_next() else {
                break;
            };
            if gated {
                unwritten_bytes += text.len();
                unwritten.push_back((shared.store.recorded(), text));
                continue;
            }
            if !writer.send(Frame::Envelope(text)) {
                return (Ended::Gone, Some(attached));
            }
        }
        // Then what the shared store has recorded.
        if !unwritten.is_empty() {
            let written = shared.store.written();
            if shared.store.fenced(session.id()) {
                // Another instance restored the session: what was made here
                // was refused there, and must not reach the client.
                shared.store.hand_off(session.id());
                writer.send(moved());
                // Dropping the session cancels its calls.
                return (Ended::HandedOver, None);
            }
            while unwritten
                .front()
                .is_some_and(|(ticket, _)| *ticket <= written)
            {
                let (_, text) = unwritten.pop_front().expect("checked");
                unwritten_bytes -= text.len();
                if !writer.send(Frame::Envelope(text)) {
                    return (Ended::Gone, Some(attached));
                }
            }
        }
        let awaiting = unwritten.front().map(|(ticket, _)| *ticket);
        if let Some((code, reason, keep)) = close {
            if !session.has_outbound() && unwritten.is_empty() {
                writer.send(Frame::Close { code, reason });
                return (Ended::Closed { code, keep }, Some(attached));
            }
            if !closing_armed && !shutting_down {
                closing_armed = true;
                give_up.as_mut().reset(Instant::now() + CLOSE_TIMEOUT);
            }
        }
        alarm.arm(session, timer.as_mut());
        let open = close.is_none() && !shutting_down;
        let input = open && backlog_allows_input(session, writer, shared);
        // Wait for the writer when it holds envelopes the driver cannot hand
        // over yet, or when its progress is what reopens input.
        let wait_writer = session.has_outbound() || (open && !input);
        let mut takeover = None;
        let mut resume = None;
        tokio::select! {
            biased;
            () = &mut shutdown, if !shutting_down => {
                shutting_down = true;
                session.begin_shutdown();
                give_up.as_mut().reset(Instant::now() + shared.config.cancel_grace + CLOSE_TIMEOUT);
            }
            // The client is not taking its last envelopes: give up on it.
            () = &mut give_up, if shutting_down || closing_armed => {
                let keep = close.is_none_or(|(_, _, keep)| keep);
                return (Ended::Abandoned { keep }, Some(attached));
            }
            Some(event) = next_event(&mut attached.events) => session.handle_event(event),
            () = wait_written(shared, awaiting), if awaiting.is_some() => {}
            request = attached.takeovers.recv(), if !shutting_down => takeover = Some(request),
            () = writer.meter.drained(), if wait_writer => {}
            () = &mut closed => return (Ended::Gone, Some(attached)),
            text = recv_batch(&mut batch), if input && batch.is_some() => {
                match text {
                    Some(Element::TooLarge) => session.envelope_too_large(),
                    Some(Element::Envelope(text)) => match handle_text(session, text, shared).await {
                        Control::Continue => {}
                        Control::Close { code, reason, keep_session } => {
                            // The POST was handled up to the envelope that
                            // closed the connection; the rest goes nowhere.
                            if let Some(done) = batch.take() {
                                let _ = done.done.send(());
                            }
                            close = Some((code, reason, keep_session));
                        }
                        Control::Resume(request) => resume = Some(request),
                    },
                    // Every envelope of the POST handled: it may answer now.
                    None => {
                        if let Some(done) = batch.take() {
                            let _ = done.done.send(());
                        }
                    }
                }
            }
            unit = inbound.next(), if input && batch.is_none() => {
                let Some(unit) = unit else { return (Ended::Gone, Some(attached)) };
                session.touch(shared.clock.now());
                let control = match unit {
                    Unit::Text(text) => handle_text(session, text, shared).await,
                    Unit::Batch(next) => {
                        batch = Some(next);
                        Control::Continue
                    }
                    Unit::TooLarge => session.message_too_large(),
                    Unit::Binary(bytes) => session.handle_binary(&bytes),
                    Unit::Activity => Control::Continue,
                    Unit::ProtocolError { code, reason } => Control::Close {
                        code,
                        reason,
                        keep_session: true,
                    },
                    Unit::Lost => return (Ended::Gone, Some(attached)),
                };
                match control {
                    Control::Continue => {}
                    Control::Close { code, reason, keep_session } => close = Some((code, reason, keep_session)),
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
            () = &mut timer, if alarm.at.is_some() => {
                alarm.fired();
                // Only the idle timeout closes, and only an open connection.
                if let Control::Close { code, reason, keep_session } = session.handle_timeout(shared.clock.now())
                    && open
                {
                    close = Some((code, reason, keep_session));
                }
            }
        }
        if let Some(request) = takeover {
            // Another connection resumes this session: hand it over and close.
            // Or another instance restored it: it ends here, and the client,
            // resuming again, is relayed there.
            let close = if request.evict {
                moved()
            } else {
                Frame::Close {
                    code: 1000,
                    reason: "session resumed elsewhere",
                }
            };
            match (*request).answer(attached) {
                Some(kept) => attached = kept,
                None => {
                    writer.send(close);
                    return (Ended::HandedOver, None);
                }
            }
        }
        if let Some(request) = resume {
            // The rest of a POST that asked to resume goes to the resumed session.
            // Boxed: a rare wait, kept out of every session's loop state.
            match Box::pin(resume_into(attached, *request, shared, writer, options)).await {
                Ok(next) => attached = next,
                Err(link) => {
                    options.relay = Some((link, batch.take()));
                    return (Ended::Relayed, None);
                }
            }
        }
    }
}

/// Handles one envelope's text. A large one is decoded on the blocking pool
/// (and dropped there), so its parsing holds up no other session on this
/// worker; this session waits for it, keeping its order.
async fn handle_text(session: &mut Session, text: String, shared: &Shared) -> Control {
    if text.len() <= LARGE_PARAMS {
        return match session.handle_text(&text) {
            // Kept in case the session runs on another instance.
            Control::Resume(mut request) => {
                request.text = Some(text);
                Control::Resume(request)
            }
            control => control,
        };
    }
    // Boxed: a rare wait, kept out of every session's loop state.
    Box::pin(handle_large_text(session, text, shared)).await
}

async fn handle_large_text(session: &mut Session, text: String, shared: &Shared) -> Control {
    let strict = shared.config.strict_envelope;
    let len = text.len();
    let decoded = tokio::task::spawn_blocking(move || decode_unit(&text, strict))
        .await
        .unwrap_or_else(|_| {
            Err(DecodeError {
                code: ErrorCode::INVALID_MESSAGE,
                message: "Invalid message format".to_owned(),
                related_id: None,
                detail: serde_json::json!({ "reason": "invalid JSON" }),
            })
        });
    session.handle_decoded(len, decoded)
}

/// How a connection ends when another instance has restored its session
/// (the records of it made here were refused there): the client resumes
/// again, and is relayed there.
fn moved() -> Frame {
    Frame::Close {
        code: 1011,
        reason: "session moved to another instance",
    }
}

/// Completes once the shared store has written the record of `ticket`.
async fn wait_written(shared: &Shared, ticket: Option<u64>) {
    if let Some(ticket) = ticket {
        shared.store.wait_written(ticket).await;
    }
}

/// The next envelope of the POST being handled (`None` once it has no more).
async fn recv_batch(batch: &mut Option<Batch>) -> Option<Element> {
    match batch {
        Some(batch) => batch.envelopes.recv().await,
        None => std::future::pending().await,
    }
}

/// Where a resumed session runs.
enum Resumed {
    /// On this connection.
    Here(Attached),
    /// On the live instance at the other end of the link.
    There(Link),
}

/// Takes the requested session over from its owner (a parked task or another
/// connection), or reports why not; returns the session this connection is
/// on, or the link to relay it to when another instance runs it.
async fn resume_into(
    fresh: Attached,
    request: ResumeRequest,
    shared: &Shared,
    writer: &Writer,
    options: &mut Options,
) -> Result<Attached, Link> {
    let outcome = match request.last_rx_seq {
        None => Err(ResumeRefused::InvalidLastRxSeq),
        Some(last_rx_seq) => {
            let text = request.text.as_deref();
            take_over(&request.session, last_rx_seq, text, &fresh, shared, writer).await
        }
    };
    match outcome {
        Ok(Resumed::There(link)) => {
            // The instance running the session runs this fresh one too, if
            // the resumption is refused there.
            shared.store.hand_off(fresh.session.id());
            tracing::debug!(session = %request.session, "session relayed to its instance");
            if let Some(on_resumed) = options.on_resumed.as_mut() {
                on_resumed(&request.session);
            }
            Err(link)
        }
        Ok(Resumed::Here(mut resumed)) => {
            shared.store.remove(fresh.session.id());
            // `resumed` carries the seq it was at; the fresh session (only its
            // HAI was sent) ends here.
            // The confirming HAI describes this connection's transport.
            let transport = fresh.session.transport();
            resumed
                .session
                .resumed(request.last_rx_seq.unwrap_or(0), &request.hai, transport);
            resumed.session.connected(shared.clock.now());
            tracing::debug!(session = %resumed.session.id(), "session resumed");
            if let Some(on_resumed) = options.on_resumed.as_mut() {
                on_resumed(resumed.session.id());
            }
            Ok(resumed)
        }
        // Not refused: this instance stops before it could say. The
        // connection closes with the others (1001), and its client resumes
        // on another instance.
        Err(ResumeRefused::ShuttingDown) => Ok(fresh),
        Err(reason) => {
            let mut fresh = fresh;
            fresh
                .session
                .resume_failed(reason, request.related_id.as_deref(), &request.hai);
            Ok(fresh)
        }
    }
}

/// Rebuilds a session no instance alive holds from what the shared store
/// recorded of it (the in-memory store knows none: `unknown session`). Its
/// calls died with their instance: each ends with `TOOL_DONE ERROR`, after
/// the replay and the confirming `HAI`.
///
/// An instance that dies holds its sessions until its lease expires (a few
/// seconds): clients reconnect at once, and find it unreachable meanwhile.
/// That is no reason to refuse them: the client is held, kept alive, until
/// the owner answers again or its lease expires and the session is restored
/// here, for at most [`OWNER_WAIT`].
async fn restore(
    id: &str,
    last_rx_seq: u64,
    text: Option<&str>,
    fresh: &Attached,
    shared: &Shared,
    writer: &Writer,
) -> Result<Resumed, ResumeRefused> {
    let held_until = Instant::now() + OWNER_WAIT;
    let snapshot = loop {
        // Restored here meanwhile (by another connection, or a relayed one
        // while this one waited for the restoring to be done).
        if let Some(owner) = shared.store.find(id) {
            return ask(&owner, last_rx_seq, fresh).await;
        }
        let restored = tokio::time::timeout(
            TAKEOVER_TIMEOUT,
            shared
                .store
                .restore(id, fresh.session.subject().map(|s| &**s)),
        )
        .await;
        let (reason, owner) = match restored {
            Ok(Ok(snapshot)) => break snapshot,
            #[cfg(feature = "redis")]
            Ok(Err(NotRestored::Refused(ResumeRefused::BeingResumed))) => {
                (ResumeRefused::BeingResumed, None)
            }
            Ok(Err(NotRestored::Refused(reason))) => return Err(reason),
            Ok(Err(NotRestored::Elsewhere(owner))) => {
                // Its calls run there: the client is relayed to them.
                let hai = text.ok_or(ResumeRefused::HeldByLiveInstance)?;
                let open = LinkOpen {
                    subject: fresh.session.subject().map(|s| s.to_string()),
                    caller: fresh.session.caller().cloned(),
                    purpose: LinkPurpose::Connection {
                        transport: fresh.session.transport(),
                        hai: hai.to_owned(),
                    },
                    greeted: Some((fresh.session.id().to_owned(), fresh.session.next_seq())),
                };
                let link = tokio::time::timeout(TAKEOVER_TIMEOUT, shared.store.link(&owner, open))
                    .await
                    .unwrap_or(Err(ResumeRefused::StoreTimedOut));
                match link {
                    Ok(link) => return Ok(Resumed::There(link)),
                    Err(ResumeRefused::Unreachable) => (ResumeRefused::Unreachable, Some(owner)),
                    Err(reason) => return Err(reason),
                }
            }
            Err(_) => return Err(ResumeRefused::StoreTimedOut),
        };
        // Try again when the owner's lease runs out (or sooner: it may be
        // back), or when the instance restoring it has said it holds it.
        let wait = match owner {
            Some(owner) => match shared.store.lease_left(&owner).await {
                Ok(Some(left)) => left + LEASE_SLACK,
                Ok(None) => Duration::ZERO,
                Err(reason) => return Err(reason),
            },
            None => RETRY_BEING_RESUMED,
        }
        .clamp(RETRY_MIN, RETRY_MAX);
        let now = Instant::now();
        if now + wait > held_until {
            return Err(reason);
        }
        // The client hears that the server is there while it waits.
        writer.send(Frame::KeepAlive);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shared.shutdown.cancelled() => return Err(ResumeRefused::ShuttingDown),
        }
    };
    // Refused after all: the session runs nowhere here, and is no longer
    // being restored here (another resumption need not wait for this one).
    let refuse = |reason| {
        shared.store.hand_off(id);
        Err(reason)
    };
    if snapshot.subject.as_deref() != fresh.session.subject().map(|s| &**s) {
        return refuse(ResumeRefused::SubjectMismatch);
    }
    let (mut session, lost) = Session::restore(
        Arc::clone(fresh.session.shared()),
        fresh.session.transport(),
        id,
        snapshot,
    );
    if let Err(reason) = session.can_resume_from(last_rx_seq) {
        return refuse(reason);
    }
    session.set_caller(fresh.session.caller().cloned());
    session.end_lost_calls(lost);
    tracing::info!(session = id, "session restored from the shared store");
    let takeovers = shared.store.register(id);
    Ok(Resumed::Here(Attached::new(session, takeovers)))
}

async fn take_over(
    id: &str,
    last_rx_seq: u64,
    text: Option<&str>,
    fresh: &Attached,
    shared: &Shared,
    writer: &Writer,
) -> Result<Resumed, ResumeRefused> {
    match shared.store.find(id) {
        Some(owner) => ask(&owner, last_rx_seq, fresh).await,
        None => restore(id, last_rx_seq, text, fresh, shared, writer).await,
    }
}

/// Asks the session at `owner` (a parked task or another connection, on
/// this instance) to hand itself over to the connection of `fresh`.
async fn ask(
    owner: &TakeoverAddress,
    last_rx_seq: u64,
    fresh: &Attached,
) -> Result<Resumed, ResumeRefused> {
    let (reply, answer) = oneshot::channel();
    let request = Box::new(Takeover {
        subject: fresh.session.subject().cloned(),
        caller: fresh.session.caller().cloned(),
        last_rx_seq,
        reply,
        evict: false,
    });
    let asked = tokio::time::timeout(TAKEOVER_TIMEOUT, async {
        owner
            .send(request)
            .await
            .map_err(|_| ResumeRefused::UnknownSession)?;
        answer.await.map_err(|_| ResumeRefused::UnknownSession)?
    });
    asked
        .await
        .unwrap_or(Err(ResumeRefused::UnknownSession))
        .map(Resumed::Here)
}

/// Relays a client connection to the instance running its session (which
/// the link reaches) until either ends: what the client sends goes over the
/// link, what comes back goes to the client. A link that goes silent (its
/// instance died) closes the connection 1011, so the client resumes again,
/// and then wherever the session can be restored. A client that does not
/// read closes it `too slow`, as any other.
pub(crate) async fn relay<S>(
    mut link: Link,
    mut batch: Option<Batch>,
    inbound: S,
    writer: &Writer,
    shared: &Shared,
) where
    S: Stream<Item = Unit>,
{
    tokio::pin!(inbound);
    let shutdown = shared.shutdown.clone().cancelled_owned();
    tokio::pin!(shutdown);
    let closed = writer.frames.closed();
    tokio::pin!(closed);
    let limit = shared.config.max_outbound_bytes;
    // The client is not reading (the session's own back-pressure runs on
    // the other instance, which cannot see this writer).
    let too_slow = |writer: &Writer| writer.meter.bytes() > limit;
    // An upstream POST whose envelopes are all on the link: it is answered
    // once the running side says the session has handled them (docs/protocol.md
    // §15.4), not when they leave here. Its client sends nothing more
    // meanwhile; an instance that never says so (an older haip) is taken
    // at its word after `ACK_LIMIT`.
    let mut posted: Option<oneshot::Sender<()>> = None;
    let ack_limit = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(ack_limit);
    loop {
        let to_send = tokio::select! {
            biased;
            () = &mut shutdown => {
                // The session goes on there, parked: the client resumes it.
                let _ = link.send(LinkMessage::Close { code: 1001, reason: "server shutdown".into() }).await;
                writer.send(Frame::Close { code: 1001, reason: "server shutdown" });
                return;
            }
            message = link.inbound.recv() => {
                match message {
                    Some(LinkMessage::Text(text)) => {
                        if !writer.send(Frame::Envelope(text)) {
                            return;
                        }
                        if too_slow(writer) {
                            shared.stats.closed_too_slow.fetch_add(1, Relaxed);
                            let _ = link.send(LinkMessage::Close { code: 0, reason: "too slow".into() }).await;
                            writer.send(Frame::Close { code: 1008, reason: "too slow" });
                            return;
                        }
                    }
                    Some(LinkMessage::KeepAlive) => {
                        writer.send(Frame::KeepAlive);
                    }
                    Some(LinkMessage::Close { code, reason }) => {
                        if let Some(done) = batch.take() {
                            let _ = done.done.send(());
                        }
                        if let Some(done) = posted.take() {
                            let _ = done.send(());
                        }
                        writer.send(Frame::Close { code, reason: close_reason(&reason) });
                        return;
                    }
                    // The session has handled the POST (a 404: it has gone,
                    // and the POST is answered so).
                    Some(LinkMessage::Done(status)) => {
                        if let Some(done) = posted.take()
                            && status == 200
                        {
                            let _ = done.send(());
                        }
                    }
                    Some(_) => {}
                    None => {
                        tracing::debug!("relay link lost");
                        writer.send(Frame::Close { code: 1011, reason: "instance lost" });
                        return;
                    }
                }
                None
            }
            () = &mut closed => Some(LinkMessage::Close { code: 0, reason: String::new() }),
            () = &mut ack_limit, if posted.is_some() => {
                if let Some(done) = posted.take() {
                    let _ = done.send(());
                }
                None
            }
            element = recv_batch(&mut batch), if batch.is_some() => match element {
                Some(Element::Envelope(text)) => Some(LinkMessage::Text(Bytes::from(text))),
                Some(Element::TooLarge) => Some(LinkMessage::TooLarge),
                None => {
                    // The body has ended: the running side answers `Done`.
                    posted = batch.take().map(|done| done.done);
                    ack_limit.as_mut().reset(Instant::now() + ACK_LIMIT);
                    Some(LinkMessage::Done(0))
                }
            },
            unit = inbound.next(), if batch.is_none() && posted.is_none() => match unit {
                Some(Unit::Text(text)) => Some(LinkMessage::Text(Bytes::from(text))),
                Some(Unit::Binary(bytes)) => Some(LinkMessage::Binary(bytes)),
                Some(Unit::TooLarge) => Some(LinkMessage::TooLarge),
                Some(Unit::Activity) => Some(LinkMessage::Activity),
                Some(Unit::Batch(next)) => {
                    batch = Some(next);
                    None
                }
                Some(Unit::ProtocolError { code, reason }) => {
                    writer.send(Frame::Close { code, reason });
                    Some(LinkMessage::Close { code: 0, reason: reason.into() })
                }
                Some(Unit::Lost) | None => Some(LinkMessage::Close { code: 0, reason: String::new() }),
            },
        };
        if let Some(message) = to_send {
            let last = matches!(message, LinkMessage::Close { .. });
            if !link.send(message).await || last {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionConfig;
    use crate::session::link::channel;
    use crate::tool::Registry;
    use crate::transport::queue::frame_queue;

    /// A relay with its link's other end, and the client's side of it.
    struct Relaying {
        /// What the relay sends to the running side.
        to_running: crate::session::link::LinkReceiver,
        /// What the running side sends to the relay.
        from_running: crate::session::link::LinkSender,
        /// The client's inbound units.
        client: mpsc::Sender<Unit>,
    }

    async fn with_relay(test: impl AsyncFnOnce(Relaying)) {
        let shared = Arc::new(Shared::new(
            SessionConfig::default(),
            Registry::default(),
            Default::default(),
        ));
        let (out, to_running) = channel();
        let (from_running, inbound) = channel();
        let link = Link { out, inbound };
        let (frames, _frames) = frame_queue();
        let writer = Writer {
            frames,
            meter: WriteMeter::new(Arc::clone(&shared)),
        };
        let (client, mut units) = mpsc::channel(4);
        let units = futures_util::stream::poll_fn(move |cx| units.poll_recv(cx));
        let relaying = Relaying {
            to_running,
            from_running,
            client,
        };
        tokio::select! {
            () = relay(link, None, units, &writer, &shared) => {}
            () = test(relaying) => {}
        }
    }

    /// A POST of one envelope through the relay; its `done`.
    async fn post(client: &mpsc::Sender<Unit>, text: &str) -> oneshot::Receiver<()> {
        let (batch, done) = {
            let (done_tx, done_rx) = oneshot::channel();
            let (envelopes, envelopes_rx) = mpsc::channel(4);
            let batch = Batch {
                envelopes: envelopes_rx,
                done: done_tx,
            };
            envelopes
                .send(Element::Envelope(text.to_owned()))
                .await
                .unwrap();
            (batch, done_rx)
        };
        client.send(Unit::Batch(batch)).await.unwrap();
        done
    }

    #[tokio::test(start_paused = true)]
    async fn a_relayed_post_is_answered_once_the_running_side_has_handled_it() {
        with_relay(async |mut r: Relaying| {
            let mut done = post(&r.client, "{}").await;
            assert_eq!(
                r.to_running.recv().await,
                Some(LinkMessage::Text(Bytes::from("{}")))
            );
            assert_eq!(r.to_running.recv().await, Some(LinkMessage::Done(0)));
            // Not answered while the running side has not said so.
            tokio::time::sleep(ACK_LIMIT / 2).await;
            assert!(done.try_recv().is_err());
            assert!(r.from_running.send(LinkMessage::Done(200)).await);
            tokio::time::timeout(Duration::from_secs(1), done)
                .await
                .expect("answered")
                .expect("handled");
            // A session gone there: the POST is not answered as handled.
            let done = post(&r.client, "{}").await;
            r.to_running.recv().await;
            r.to_running.recv().await;
            assert!(r.from_running.send(LinkMessage::Done(404)).await);
            assert!(done.await.is_err(), "answered 404");
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_instance_that_never_answers_a_relayed_post_is_taken_at_its_word() {
        with_relay(async |mut r: Relaying| {
            let done = post(&r.client, "{}").await;
            r.to_running.recv().await;
            assert_eq!(r.to_running.recv().await, Some(LinkMessage::Done(0)));
            // An older instance ignores `Done`: the POST is answered after
            // ACK_LIMIT all the same, and the next one goes through.
            tokio::time::timeout(ACK_LIMIT * 2, done)
                .await
                .expect("answered after the limit")
                .expect("as handled");
            let _next = post(&r.client, "[]").await;
            assert_eq!(
                r.to_running.recv().await,
                Some(LinkMessage::Text(Bytes::from("[]")))
            );
        })
        .await;
    }
}
