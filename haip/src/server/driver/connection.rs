//! The loop that runs a session over its connection, turn by turn: carry out
//! what the session asked for, hand the writer the committed envelopes it has
//! room for (once a shared store has recorded them), close when a close is
//! decided and everything has gone out; then wait for whatever comes next
//! (input, call events, the session's deadlines, the writer draining,
//! shutdown, a takeover) and act on it. Input pauses while the client has too
//! much waiting for it (docs/protocol.md §18.1).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::time::{Instant, Sleep};

use crate::protocol::{DecodeError, ErrorCode};
use crate::session::{
    Attached, Control, LARGE_PARAMS, Overflow, ResumeRequest, Session, Shared, Takeover,
    decode_unit, next_event,
};
use crate::stats::Throttle;
use crate::transport::frame::{Batch, Element, Frame, Unit, WRITER_BUDGET, Writer};

use super::actions::{Alarm, perform};
use super::resume::resume_into;
use super::{ConnectionEnd, Options};

/// How long the last frames may take once shutdown has cancelled the calls.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A close decided: its code and reason, and whether the session outlives
/// the connection.
type Closing = (u16, &'static str, bool);

/// What one wait of the loop brought that the loop itself acts on.
enum Woke {
    /// Nothing more: the session has taken in what came.
    Nothing,
    /// The connection ended.
    ConnectionEnd(ConnectionEnd),
    /// Another connection, or another instance, asks for the session.
    Takeover(Box<Takeover>),
    /// The client asks to resume another session.
    Resume(Box<ResumeRequest>),
}

/// Committed envelopes waiting for their records to reach a shared session
/// store (Redis) before the client may see them, with their tickets; always
/// empty with the in-memory store.
struct Unrecorded {
    envelopes: VecDeque<(u64, Bytes)>,
    /// The bytes of `envelopes`.
    bytes: usize,
    /// Whether the store records envelopes at all.
    gated: bool,
}

/// What one turn of the loop waits for.
struct Waits {
    /// Neither closing nor shutting down.
    open: bool,
    /// Input is taken.
    input: bool,
    /// The writer's progress is waited for.
    writer: bool,
    /// The ticket of the first envelope waiting for the shared store.
    awaiting: Option<u64>,
    shutting_down: bool,
    /// A close is under way: the client gets a bounded time.
    closing: bool,
    /// An upstream POST is being handled.
    posting: bool,
}

/// What the loop keeps from one turn to the next, besides the session.
struct Driving<'a> {
    writer: &'a Writer,
    shared: &'a Shared,
    shutting_down: bool,
    close: Option<Closing>,
    /// Once a close is decided, the client gets a bounded time to take what
    /// is still queued for it.
    closing_armed: bool,
    unrecorded: Unrecorded,
    /// The upstream POST being handled, envelope by envelope.
    batch: Option<Batch>,
}

/// Runs the session until its connection ends; gives it back unless another
/// connection took it over.
pub(super) async fn drive<S>(
    mut attached: Attached,
    inbound: S,
    writer: &Writer,
    shared: &Shared,
    options: &mut Options,
) -> (ConnectionEnd, Option<Attached>)
where
    S: Stream<Item = Unit>,
{
    tokio::pin!(inbound);
    // The session's deadlines: heartbeat, idle, binary frame, its calls'.
    let timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(timer);
    let mut alarm = Alarm { at: None };
    // Shutdown is bounded even for a client that stops reading: calls get
    // their grace period, the last frames a little more.
    let give_up = tokio::time::sleep(Duration::from_secs(86_400));
    tokio::pin!(give_up);
    let mut driving = Driving::new(writer, shared);
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
        match driving.before_wait(session, give_up.as_mut()) {
            // Dropping the session cancels its calls.
            Some(ConnectionEnd::HandedOver) => return (ConnectionEnd::HandedOver, None),
            Some(ended) => return (ended, Some(attached)),
            None => {}
        }
        alarm.arm(session, timer.as_mut());
        let waits = driving.waits(session);
        let woke = tokio::select! {
            biased;
            () = &mut shutdown, if !waits.shutting_down => {
                driving.begin_shutdown(session, give_up.as_mut());
                Woke::Nothing
            }
            // The client is not taking its last envelopes: give up on it.
            () = &mut give_up, if waits.closing => Woke::ConnectionEnd(driving.abandoned()),
            Some(event) = next_event(&mut attached.events) => {
                session.handle_event(event);
                Woke::Nothing
            }
            () = wait_written(shared, waits.awaiting), if waits.awaiting.is_some() => Woke::Nothing,
            request = attached.takeovers.recv(), if !waits.shutting_down => Woke::Takeover(request),
            () = writer.meter.drained(), if waits.writer => Woke::Nothing,
            () = &mut closed => Woke::ConnectionEnd(ConnectionEnd::Gone),
            element = recv_batch(&mut driving.batch), if waits.input && waits.posting => {
                driving.on_element(session, element).await
            }
            unit = inbound.next(), if waits.input && !waits.posting => driving.on_unit(session, unit).await,
            // Changes are taken even before the client's `HAI` asks for
            // pushes, so that `HAI`'s own push is not followed by a stale one.
            Ok(()) = tool_changes.changed(), if shared.config.advertise_tools => {
                session.handle_tools_changed();
                Woke::Nothing
            }
            () = &mut timer, if alarm.at.is_some() => {
                alarm.fired();
                driving.on_timeout(session, waits.open);
                Woke::Nothing
            }
        };
        match woke {
            Woke::Nothing => {}
            Woke::ConnectionEnd(ended) => return (ended, Some(attached)),
            Woke::Takeover(request) => match hand_over(attached, *request, writer) {
                Some(kept) => attached = kept,
                None => return (ConnectionEnd::HandedOver, None),
            },
            Woke::Resume(request) => {
                // The rest of a POST that asked to resume goes to the resumed
                // session. Boxed: a rare wait, kept out of every session's
                // loop state.
                match Box::pin(resume_into(attached, *request, shared, writer, options)).await {
                    Ok(next) => attached = next,
                    Err(link) => {
                        options.relay = Some((link, driving.batch.take()));
                        return (ConnectionEnd::Relayed, None);
                    }
                }
            }
        }
    }
}

/// The client is not reading: when the session's outbox overflowed, the
/// connection closes `too slow` (the session is kept for resumption).
fn overflowed(session: &Session, writer: &Writer, shared: &Shared) -> Option<ConnectionEnd> {
    let reason = match session.overflow()? {
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
    Some(ConnectionEnd::TooSlow)
}

impl<'a> Driving<'a> {
    fn new(writer: &'a Writer, shared: &'a Shared) -> Self {
        Driving {
            writer,
            shared,
            shutting_down: false,
            close: None,
            closing_armed: false,
            unrecorded: Unrecorded {
                envelopes: VecDeque::new(),
                bytes: 0,
                gated: shared.store.records(),
            },
            batch: None,
        }
    }

    /// What each turn does before it waits: the connection closes `too
    /// slow` if the outbox overflowed; the writer is handed what it has room
    /// for; a close decided happens once everything has gone out. Says how
    /// the connection ended, if it did.
    fn before_wait(
        &mut self,
        session: &mut Session,
        give_up: Pin<&mut Sleep>,
    ) -> Option<ConnectionEnd> {
        if let Some(ended) = overflowed(session, self.writer, self.shared) {
            return Some(ended);
        }
        self.close_when_idle(session);
        if let Some(ended) = self.hand_out(session) {
            return Some(ended);
        }
        self.finish_closing(session, give_up)
    }

    /// What this turn waits for.
    fn waits(&self, session: &Session) -> Waits {
        let open = self.close.is_none() && !self.shutting_down;
        let input = open && backlog_allows_input(session, self.writer, self.shared);
        Waits {
            open,
            input,
            // Wait for the writer when it holds envelopes the driver cannot
            // hand over yet, or when its progress is what reopens input.
            writer: session.has_outbound() || (open && !input),
            awaiting: self.unrecorded.envelopes.front().map(|(ticket, _)| *ticket),
            shutting_down: self.shutting_down,
            closing: self.shutting_down || self.closing_armed,
            posting: self.batch.is_some(),
        }
    }

    /// Shutting down, the connection closes once the session's calls are done.
    fn close_when_idle(&mut self, session: &Session) {
        if self.shutting_down && self.close.is_none() && session.is_idle() {
            self.close = Some((1001, "server shutdown", false));
        }
    }

    /// Hands the writer what it has room for, then what the shared store has
    /// recorded; says how the connection ended if it did meanwhile.
    fn hand_out(&mut self, session: &mut Session) -> Option<ConnectionEnd> {
        // (Envelopes waiting for the store count against the writer's room.)
        while session.has_outbound()
            && self.writer.meter.bytes() + self.unrecorded.bytes < WRITER_BUDGET
        {
            let Some(text) = session.poll_transmit() else {
                break;
            };
            if self.unrecorded.gated {
                self.unrecorded.bytes += text.len();
                let ticket = self.shared.store.recorded();
                self.unrecorded.envelopes.push_back((ticket, text));
                continue;
            }
            if !self.writer.send(Frame::Envelope(text)) {
                return Some(ConnectionEnd::Gone);
            }
        }
        self.hand_out_recorded(session)
    }

    /// Hands the writer the envelopes whose records the shared store has
    /// written; ends the connection ([`ConnectionEnd::HandedOver`]) when another
    /// instance restored the session meanwhile.
    fn hand_out_recorded(&mut self, session: &Session) -> Option<ConnectionEnd> {
        if self.unrecorded.envelopes.is_empty() {
            return None;
        }
        let written = self.shared.store.written();
        if self.shared.store.fenced(session.id()) {
            // Another instance restored the session: what was made here
            // was refused there, and must not reach the client.
            self.shared.store.hand_off(session.id());
            self.writer.send(moved());
            return Some(ConnectionEnd::HandedOver);
        }
        while self
            .unrecorded
            .envelopes
            .front()
            .is_some_and(|(ticket, _)| *ticket <= written)
        {
            let (_, text) = self.unrecorded.envelopes.pop_front().expect("checked");
            self.unrecorded.bytes -= text.len();
            if !self.writer.send(Frame::Envelope(text)) {
                return Some(ConnectionEnd::Gone);
            }
        }
        None
    }

    /// A close is decided: closes once everything has gone out, or gives the
    /// client [`CLOSE_TIMEOUT`] to take it (`give_up`).
    fn finish_closing(
        &mut self,
        session: &Session,
        give_up: Pin<&mut Sleep>,
    ) -> Option<ConnectionEnd> {
        let (code, reason, keep) = self.close?;
        if !session.has_outbound() && self.unrecorded.envelopes.is_empty() {
            self.writer.send(Frame::Close { code, reason });
            return Some(ConnectionEnd::Closed { code, keep });
        }
        if !self.closing_armed && !self.shutting_down {
            self.closing_armed = true;
            give_up.reset(Instant::now() + CLOSE_TIMEOUT);
        }
        None
    }

    /// The server shuts down: the session's calls get their grace period,
    /// the last frames a little more (`give_up`).
    fn begin_shutdown(&mut self, session: &mut Session, give_up: Pin<&mut Sleep>) {
        self.shutting_down = true;
        session.handle_shutdown();
        give_up.reset(Instant::now() + self.shared.config.cancel_grace + CLOSE_TIMEOUT);
    }

    /// How the connection ends when the client did not take its last
    /// envelopes in time.
    fn abandoned(&self) -> ConnectionEnd {
        let keep = self.close.is_none_or(|(_, _, keep)| keep);
        ConnectionEnd::Abandoned { keep }
    }

    /// The next envelope of the POST being handled, or its end (`None`).
    async fn on_element(&mut self, session: &mut Session, element: Option<Element>) -> Woke {
        match element {
            Some(Element::TooLarge) => session.handle_oversized_envelope(),
            Some(Element::Envelope(text)) => match handle_text(session, text, self.shared).await {
                Control::Continue => {}
                Control::Close {
                    code,
                    reason,
                    keep_session,
                } => {
                    // The POST was handled up to the envelope that
                    // closed the connection; the rest goes nowhere.
                    self.answer_post();
                    self.close = Some((code, reason, keep_session));
                }
                Control::Resume(request) => return Woke::Resume(request),
            },
            // Every envelope of the POST handled: it may answer now.
            None => self.answer_post(),
        }
        Woke::Nothing
    }

    /// Lets the POST being handled answer.
    fn answer_post(&mut self) {
        if let Some(done) = self.batch.take() {
            let _ = done.done.send(());
        }
    }

    /// A unit from the connection (`None`: it has ended).
    async fn on_unit(&mut self, session: &mut Session, unit: Option<Unit>) -> Woke {
        let Some(unit) = unit else {
            return Woke::ConnectionEnd(ConnectionEnd::Gone);
        };
        session.handle_traffic(self.shared.clock.now());
        let control = match unit {
            Unit::Text(text) => handle_text(session, text, self.shared).await,
            Unit::Batch(next) => {
                self.batch = Some(next);
                Control::Continue
            }
            Unit::TooLarge => session.handle_oversized_message(),
            Unit::Binary(bytes) => session.handle_binary(&bytes),
            Unit::Activity => Control::Continue,
            Unit::ProtocolError { code, reason } => Control::Close {
                code,
                reason,
                keep_session: true,
            },
            Unit::Lost => return Woke::ConnectionEnd(ConnectionEnd::Gone),
        };
        match control {
            Control::Continue => Woke::Nothing,
            Control::Close {
                code,
                reason,
                keep_session,
            } => {
                self.close = Some((code, reason, keep_session));
                Woke::Nothing
            }
            Control::Resume(request) => Woke::Resume(request),
        }
    }

    /// The session's next deadline has come (`open`: the connection was
    /// neither closing nor shutting down).
    fn on_timeout(&mut self, session: &mut Session, open: bool) {
        // Only the idle timeout closes, and only an open connection.
        if let Control::Close {
            code,
            reason,
            keep_session,
        } = session.handle_timeout(self.shared.clock.now())
            && open
        {
            self.close = Some((code, reason, keep_session));
        }
    }
}

/// Another connection resumes this session: hands it over and closes. Or
/// another instance restored it: it ends here, and the client, resuming
/// again, is relayed there. Gives the session back if it stays here.
fn hand_over(attached: Attached, request: Takeover, writer: &Writer) -> Option<Attached> {
    let close = if request.evict {
        moved()
    } else {
        Frame::Close {
            code: 1000,
            reason: "session resumed elsewhere",
        }
    };
    let kept = request.answer(attached);
    if kept.is_none() {
        writer.send(close);
    }
    kept
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
pub(super) async fn recv_batch(batch: &mut Option<Batch>) -> Option<Element> {
    match batch {
        Some(batch) => batch.envelopes.recv().await,
        None => std::future::pending().await,
    }
}
