//! Resuming another session from a connection (docs/protocol.md §11.3): taking
//! it over from its owner on this instance (a parked task or another
//! connection), restoring one no live instance holds from what the shared
//! store recorded of it, or finding the live instance that runs it, to which
//! the connection is then relayed (`relay.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::session::link::{Link, LinkOpen, LinkPurpose};
use crate::session::{
    Attached, NotRestored, ResumeRefused, ResumeRequest, Session, Shared, Takeover, TakeoverAddress,
};
use crate::transport::frame::{Frame, Writer};

use super::Options;

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
            transport: fresh.session.transport(),
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
