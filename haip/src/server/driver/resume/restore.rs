//! Resuming a session no instance holds here, through a store shared by
//! several instances (feature `redis`; docs/protocol.md §11.3): restored
//! from what the store recorded of it, or relayed to the live instance that
//! runs it; the client held meanwhile while that instance cannot be
//! reached. Only such a store restores a session or knows the instance
//! that runs it.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::session::link::{Link, LinkOpen, LinkPurpose};
use crate::session::{Attached, NotRestored, ResumeRefused, Session, Shared};
use crate::transport::frame::{Frame, Writer};

use super::{Resumed, TAKEOVER_TIMEOUT, ask};

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

/// Takes session `id` over: from its owner on this instance ([`ask`]), or,
/// when no instance alive holds it, rebuilt from what the shared store
/// recorded of it (the in-memory store knows none: `unknown session`). The
/// calls of a rebuilt session died with their instance: each ends with
/// `TOOL_DONE ERROR`, after the replay and the confirming `HAI`.
///
/// An instance that dies holds its sessions until its lease expires (a few
/// seconds): clients reconnect at once, and find it unreachable meanwhile.
/// That is no reason to refuse them: the client is held, kept alive, until
/// the owner answers again or its lease expires and the session is restored
/// here, for at most [`OWNER_WAIT`].
pub(super) async fn take_over(
    id: &str,
    last_rx_seq: u64,
    text: Option<&str>,
    fresh: &Attached,
    shared: &Shared,
    writer: &Writer,
) -> Result<Resumed, ResumeRefused> {
    let held_until = Instant::now() + OWNER_WAIT;
    let snapshot = loop {
        // Held here: from the start, or restored here meanwhile (by another
        // connection, or a relayed one while this one waited for the
        // restoring to be done).
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
            Ok(Err(NotRestored::Refused(ResumeRefused::BeingResumed))) => {
                (ResumeRefused::BeingResumed, None)
            }
            Ok(Err(NotRestored::Refused(reason))) => return Err(reason),
            Ok(Err(NotRestored::Elsewhere(owner))) => {
                // Its calls run there: the client is relayed to them.
                let hai = text.ok_or(ResumeRefused::HeldByLiveInstance)?;
                match link_to(&owner, hai, fresh, shared).await {
                    Ok(link) => return Ok(Resumed::There(link)),
                    Err(ResumeRefused::Unreachable) => (ResumeRefused::Unreachable, Some(owner)),
                    Err(reason) => return Err(reason),
                }
            }
            Err(_) => return Err(ResumeRefused::StoreTimedOut),
        };
        let wait = retry_wait(owner, shared).await?;
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
        fresh.session.door(),
        id,
        snapshot,
    );
    if let Err(reason) = session.can_resume_from(last_rx_seq) {
        return refuse(reason);
    }
    session.set_caller(fresh.session.caller().cloned());
    session.handle_lost_calls(lost);
    tracing::info!(session = id, "session restored from the shared store");
    let takeovers = shared.store.register(id);
    Ok(Resumed::Here(Attached::new(session, takeovers)))
}

/// Opens a link to the instance `owner`, which runs the session: the
/// connection of `fresh` (whose client sent `hai`) is relayed there.
async fn link_to(
    owner: &str,
    hai: &str,
    fresh: &Attached,
    shared: &Shared,
) -> Result<Link, ResumeRefused> {
    let open = LinkOpen {
        subject: fresh.session.subject().map(|s| s.to_string()),
        caller: fresh.session.caller().cloned(),
        purpose: LinkPurpose::Connection {
            door: fresh.session.door(),
            hai: hai.to_owned(),
        },
        greeted: Some((fresh.session.id().to_owned(), fresh.session.next_seq())),
    };
    tokio::time::timeout(TAKEOVER_TIMEOUT, shared.store.link(owner, open))
        .await
        .unwrap_or(Err(ResumeRefused::StoreTimedOut))
}

/// How long to wait before trying to restore the session again: until the
/// lease of `owner` (the instance that cannot be reached) runs out, or
/// sooner, as it may be back; with no owner, until the instance restoring
/// it has said it holds it.
async fn retry_wait(owner: Option<String>, shared: &Shared) -> Result<Duration, ResumeRefused> {
    let wait = match owner {
        Some(owner) => match shared.store.lease_left(&owner).await {
            Ok(Some(left)) => left + LEASE_SLACK,
            Ok(None) => Duration::ZERO,
            Err(reason) => return Err(reason),
        },
        None => RETRY_BEING_RESUMED,
    };
    Ok(wait.clamp(RETRY_MIN, RETRY_MAX))
}
