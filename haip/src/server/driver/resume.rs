//! Resuming another session from a connection (docs/protocol.md §11.3): taking
//! it over from its owner on this instance (a parked task or another
//! connection). With a store shared by several instances (feature `redis`,
//! `restore.rs`), also restoring one no live instance holds from what the
//! store recorded of it, or finding the live instance that runs it, to which
//! the connection is then relayed (`relay.rs`).

#[cfg(feature = "redis")]
mod restore;

use std::time::Duration;

use tokio::sync::oneshot;

use crate::session::link::Link;
use crate::session::{Attached, ResumeRefused, ResumeRequest, Shared, Takeover, TakeoverAddress};
use crate::transport::frame::Writer;

use super::Options;
#[cfg(feature = "redis")]
use restore::take_over;

/// How long a resumption waits for the session's current owner.
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a resumed session runs.
enum Resumed {
    /// On this connection.
    Here(Attached),
    /// On the live instance at the other end of the link.
    #[cfg(feature = "redis")]
    There(Link),
}

/// Takes the requested session over from its owner (a parked task or another
/// connection), or reports why not; returns the session this connection is
/// on, or the link to relay it to when another instance runs it.
pub(super) async fn resume_into(
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
        #[cfg(feature = "redis")]
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
            // The confirming HAI describes this connection's door.
            let door = fresh.session.door();
            resumed
                .session
                .handle_resume(request.last_rx_seq.unwrap_or(0), &request.hai, door);
            resumed.session.handle_connect(shared.clock.now());
            tracing::debug!(session = %resumed.session.id(), "session resumed");
            if let Some(on_resumed) = options.on_resumed.as_mut() {
                on_resumed(resumed.session.id());
            }
            Ok(resumed)
        }
        // Not refused: this instance stops before it could say. The
        // connection closes with the others (1001), and its client resumes
        // on another instance.
        #[cfg(feature = "redis")]
        Err(ResumeRefused::ShuttingDown) => Ok(fresh),
        Err(reason) => {
            let mut fresh = fresh;
            fresh.session.handle_resume_refused(
                reason,
                request.related_id.as_deref(),
                &request.hai,
            );
            Ok(fresh)
        }
    }
}

/// Takes session `id` over from its owner on this instance ([`ask`]).
/// Without a store shared by several instances, a session this instance
/// does not hold is held nowhere: `unknown session`. (`text` and `writer`
/// serve a shared store: to relay the connection, and to keep the client
/// alive while it waits.)
#[cfg(not(feature = "redis"))]
async fn take_over(
    id: &str,
    last_rx_seq: u64,
    _text: Option<&str>,
    fresh: &Attached,
    shared: &Shared,
    _writer: &Writer,
) -> Result<Resumed, ResumeRefused> {
    match shared.store.find(id) {
        Some(owner) => ask(&owner, last_rx_seq, fresh).await,
        None => Err(ResumeRefused::UnknownSession),
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
