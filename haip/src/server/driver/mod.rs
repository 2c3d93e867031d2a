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
//!
//! Here: what a transport calls (a WebSocket connection, a stream session),
//! attaching and detaching a session, and how a connection ended. The rest,
//! by concern:
//!
//! - `connection.rs`: the loop that runs a session over its connection;
//! - `actions.rs`: what the session asks for, carried out, and the alarm of
//!   its deadlines (both loops: connected and parked);
//! - `park.rs`: a session whose connection is gone, kept running until it
//!   is resumed or expires;
//! - `resume.rs`: resuming another session from a connection: taking it over
//!   on this instance; with a shared store (feature `redis`,
//!   `resume/restore.rs`), restoring one no live instance holds, or finding
//!   the instance that runs it;
//! - `relay.rs`: a connection relayed to the instance running its session.
//!
//! [`WRITER_BUDGET`]: crate::transport::frame::WRITER_BUDGET

mod actions;
mod connection;
mod park;
mod relay;
mod resume;

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use hyper::upgrade::Upgraded;
use tokio::sync::mpsc;

use crate::session::link::Link;
use crate::session::{Attached, Session, Shared};
use crate::transport::frame::{Batch, Unit, WriteMeter, Writer};
use crate::transport::ws;

use connection::drive;
use park::park;
use relay::relay;

/// How the session's connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnectionEnd {
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

impl ConnectionEnd {
    /// Whether the session outlives its connection, resumable (docs/protocol.md §11.3):
    /// not after shutdown, a version mismatch or a takeover.
    pub(crate) fn keeps_session(self) -> bool {
        match self {
            ConnectionEnd::Closed { keep, .. } | ConnectionEnd::Abandoned { keep } => keep,
            ConnectionEnd::Gone | ConnectionEnd::TooSlow => true,
            ConnectionEnd::HandedOver | ConnectionEnd::Relayed => false,
        }
    }
}

/// Called with the session id after the connection resumed another session.
pub(crate) type OnResumed = Box<dyn FnMut(&str) + Send>;

/// Per-transport settings of the loop, and what it leaves behind.
pub(crate) struct Options {
    /// Told the session id after the connection resumed another session.
    pub(crate) on_resumed: Option<OnResumed>,
    /// Set when the loop ended [`ConnectionEnd::Relayed`]: the link to the instance
    /// running the session, and the rest of the POST being handled.
    pub(crate) relay: Option<(Link, Option<Batch>)>,
}

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
    conn.finish(matches!(ended, ConnectionEnd::Abandoned { .. }))
        .await;
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

/// After the connection: parks the session for resumption, or forgets it.
pub(crate) fn detach(ended: ConnectionEnd, attached: Option<Attached>, shared: &Shared) {
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
