//! Where sessions live beyond their connection (docs/protocol.md §11.3): the
//! [`SessionStore`] seam and an in-memory implementation. The task that keeps
//! a disconnected ("parked") session running is the driver's
//! (`server::driver`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, mpsc, oneshot};

#[cfg(feature = "redis")]
use super::shared_store::{NotRestored, Record, Snapshot};
use super::{ResumeRefused, Session};
use crate::exec::CallEvent;

/// A session with everything that keeps it running: the channel its calls
/// report on and the queue through which another connection may take it over.
pub(crate) struct Attached {
    pub(crate) session: Box<Session>,
    /// The channel the session's calls report on, opened with its first
    /// call (an idle session does without: about 1.3 KiB).
    pub(crate) events: Option<CallEvents>,
    pub(crate) takeovers: Takeovers,
}

/// Both ends of the channel a session's calls report on.
pub(crate) struct CallEvents {
    /// Given to the call runner with each call the session starts.
    pub(crate) tx: mpsc::UnboundedSender<CallEvent>,
    pub(crate) rx: mpsc::UnboundedReceiver<CallEvent>,
}

impl Attached {
    /// A session with no calls yet, and the queue for its takeovers.
    pub(crate) fn new(session: Session, takeovers: Takeovers) -> Attached {
        Attached {
            session: Box::new(session),
            events: None,
            takeovers,
        }
    }

    /// Where the session's calls report, the channel opened if need be.
    pub(crate) fn events_tx(&mut self) -> &mpsc::UnboundedSender<CallEvent> {
        let events = self.events.get_or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            CallEvents { tx, rx }
        });
        &events.tx
    }
}

/// The next event of a session's calls; never, while it has had none.
pub(crate) async fn next_event(events: &mut Option<CallEvents>) -> Option<CallEvent> {
    match events {
        Some(events) => events.rx.recv().await,
        None => std::future::pending().await,
    }
}

/// A request from a new connection to take a session over.
pub(crate) struct Takeover {
    /// The subject of the connection asking (must be the session's).
    pub(crate) subject: Option<Arc<str>>,
    /// The connection's caller, which the session takes on.
    pub(crate) caller: Option<Arc<crate::context::Caller>>,
    /// The client's `last_rx_seq`.
    pub(crate) last_rx_seq: u64,
    /// The session, or why it cannot be resumed (`detail.reason`).
    pub(crate) reply: oneshot::Sender<Result<Attached, ResumeRefused>>,
    /// Not a connection but the store asking: another instance restored the
    /// session ([`SessionStore::fenced`]), so it is handed over whatever the
    /// other fields say, to be ended.
    pub(crate) evict: bool,
}

impl Takeover {
    /// Answers the request for `attached`: hands it over when every condition
    /// holds, else gives it back with the reason.
    pub(crate) fn answer(self, mut attached: Attached) -> Option<Attached> {
        let check = if self.evict {
            Ok(())
        } else if self.subject.as_deref() != attached.session.subject.as_deref() {
            Err(ResumeRefused::SubjectMismatch)
        } else {
            attached.session.can_resume_from(self.last_rx_seq)
        };
        let previous = attached.session.caller().cloned();
        if check.is_ok() {
            attached.session.set_caller(self.caller);
        }
        match check {
            Ok(()) => match self.reply.send(Ok(attached)) {
                Ok(()) => None,
                // The asking connection gave up meanwhile: keep the session
                // (and its caller).
                Err(Ok(mut attached)) => {
                    attached.session.set_caller(previous);
                    Some(attached)
                }
                Err(Err(_)) => None,
            },
            Err(reason) => {
                let _ = self.reply.send(Err(reason));
                Some(attached)
            }
        }
    }
}

/// Where takeover requests for one session arrive, one at a time: the
/// session's end ([`Takeovers`]) and the store's ([`TakeoverAddress`]). A
/// mutex and two notifications, about a tenth of a channel's memory: every
/// session, idle or not, has one.
#[derive(Default)]
struct Mailbox {
    state: Mutex<MailboxState>,
    /// A request was put in.
    arrived: Notify,
    /// The request was taken out, or the session ended.
    freed: Notify,
}

#[derive(Default)]
struct MailboxState {
    request: Option<Box<Takeover>>,
    /// The session ended: nothing will be taken out again.
    closed: bool,
}

impl Mailbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, MailboxState> {
        // The state is whole values: a panic elsewhere cannot leave it half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The session's end of its takeover mailbox. Dropping it (the session
/// ended) refuses any request still waiting, and every later one.
pub(crate) struct Takeovers(Arc<Mailbox>);

impl Takeovers {
    /// The next takeover request for the session.
    pub(crate) async fn recv(&self) -> Box<Takeover> {
        loop {
            let arrived = self.0.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            if let Some(request) = self.0.lock().request.take() {
                self.0.freed.notify_one();
                return request;
            }
            arrived.await;
        }
    }
}

impl Drop for Takeovers {
    fn drop(&mut self) {
        let waiting = {
            let mut state = self.0.lock();
            state.closed = true;
            state.request.take()
        };
        // Its reply channel closes with it: the asker hears at once.
        drop(waiting);
        self.0.freed.notify_waiters();
    }
}

/// Where takeover requests for a session are sent (what the store keeps).
#[derive(Clone)]
pub(crate) struct TakeoverAddress(Arc<Mailbox>);

impl TakeoverAddress {
    /// A new mailbox: the address and the session's end.
    pub(crate) fn new() -> (TakeoverAddress, Takeovers) {
        let mailbox = Arc::new(Mailbox::default());
        (TakeoverAddress(Arc::clone(&mailbox)), Takeovers(mailbox))
    }

    /// Puts a request in once the mailbox is free; gives it back if the
    /// session ended.
    pub(crate) async fn send(&self, request: Box<Takeover>) -> Result<(), Box<Takeover>> {
        let mut request = Some(request);
        loop {
            let freed = self.0.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut state = self.0.lock();
                if state.closed {
                    return Err(request.take().expect("kept until sent"));
                }
                if state.request.is_none() {
                    state.request = request.take();
                    drop(state);
                    self.0.arrived.notify_one();
                    return Ok(());
                }
            }
            freed.await;
        }
    }

    /// Whether the session ended.
    pub(crate) fn is_closed(&self) -> bool {
        self.0.lock().closed
    }

    /// Whether both are the address of one session.
    #[cfg(feature = "redis")]
    pub(crate) fn same(&self, other: &TakeoverAddress) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// The session table behind resumption. In memory by default; a store
/// shared by several servers (Redis, feature `redis`) also keeps a copy of
/// what resuming a session on another instance takes ([`Record`]s), and
/// gives it back ([`SessionStore::restore`]) when the instance that held the
/// session is gone.
pub(crate) trait SessionStore: Send + Sync + 'static {
    /// Registers a session; returns the mailbox its owner watches for takeovers.
    fn register(&self, id: &str) -> Takeovers;
    /// Where to send a takeover request for `id`, if the session is known
    /// here.
    fn find(&self, id: &str) -> Option<TakeoverAddress>;
    /// Forgets a session (it ended or expired).
    fn remove(&self, id: &str);
    /// Forgets session `id` here, because another instance runs it from now
    /// on (or, restored here, it was refused after all): what a shared store
    /// recorded of it is left as it is.
    fn hand_off(&self, id: &str) {
        self.remove(id);
    }
    /// Notes a change to session `id` that resuming it elsewhere needs.
    /// Never blocks (a shared store queues it).
    #[cfg(feature = "redis")]
    fn record(&self, _id: &str, _record: Record<'_>) {}
    /// Whether [`SessionStore::record`] keeps anything (the session core
    /// skips building records otherwise).
    fn records(&self) -> bool {
        false
    }
    /// Records handed to the store so far (a ticket: [`SessionStore::wait_written`]).
    fn recorded(&self) -> u64 {
        0
    }
    /// Records written (or given up on) so far: an envelope whose record's
    /// ticket is at most this may reach its client. A client must never see
    /// an envelope that another instance restoring its session would not
    /// know of.
    fn written(&self) -> u64 {
        u64::MAX
    }
    /// Completes once [`SessionStore::written`] reaches `ticket`.
    fn wait_written(&self, _ticket: u64) -> StoreFuture<()> {
        Box::pin(std::future::ready(()))
    }
    /// Whether another instance has restored session `id` since this one
    /// recorded it: what it made here must not reach its client, and it
    /// ends here.
    fn fenced(&self, _id: &str) -> bool {
        false
    }
    /// Session `id`, known to no instance alive, as last recorded, for a
    /// client of `subject`; or why not, which may be that a live instance
    /// runs it. Restoring claims it: this instance runs it from then on, and
    /// what any other instance still records of it is refused
    /// ([`SessionStore::fenced`]).
    #[cfg(feature = "redis")]
    fn restore(
        &self,
        _id: &str,
        _subject: Option<&str>,
    ) -> StoreFuture<Result<Snapshot, NotRestored>> {
        Box::pin(std::future::ready(Err(NotRestored::Refused(
            ResumeRefused::UnknownSession,
        ))))
    }
    /// Opens a link to the live instance `owner` (a store shared by several
    /// instances); `Err` says why it cannot be reached.
    #[cfg(feature = "redis")]
    fn link(
        &self,
        _owner: &str,
        _open: crate::session::link::LinkOpen,
    ) -> StoreFuture<Result<crate::session::link::Link, ResumeRefused>> {
        Box::pin(std::future::ready(Err(ResumeRefused::HeldElsewhere)))
    }
    /// How long the lease of instance `owner` lasts unless refreshed; `None`
    /// once it has expired (the instance is taken for dead: its sessions may
    /// be restored). `Err` when the store cannot say.
    #[cfg(feature = "redis")]
    fn lease_left(
        &self,
        _owner: &str,
    ) -> StoreFuture<Result<Option<std::time::Duration>, ResumeRefused>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}

/// A boxed future of a [`SessionStore`].
pub(crate) type StoreFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// The default [`SessionStore`]: a map in this process.
#[derive(Default)]
pub(crate) struct InMemorySessionStore {
    sessions: Mutex<HashMap<String, TakeoverAddress>>,
}

// The Redis store keeps the sessions of its instance in one (feature `redis`).
#[cfg(feature = "redis")]
impl InMemorySessionStore {
    /// Whether no session is registered.
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Forgets session `id` if `address` is still where it is found (not a
    /// session registered under its id since).
    pub(crate) fn remove_if(&self, id: &str, address: &TakeoverAddress) {
        let mut sessions = self.lock();
        if sessions.get(id).is_some_and(|found| found.same(address)) {
            sessions.remove(id);
        }
    }
}

impl InMemorySessionStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, TakeoverAddress>> {
        // Entries are whole values: a panic elsewhere cannot leave one half-written.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl SessionStore for InMemorySessionStore {
    fn register(&self, id: &str) -> Takeovers {
        // One pending request is plenty: a second asker waits or times out.
        let (address, takeovers) = TakeoverAddress::new();
        self.lock().insert(id.to_owned(), address);
        takeovers
    }

    fn find(&self, id: &str) -> Option<TakeoverAddress> {
        self.lock().get(id).filter(|to| !to.is_closed()).cloned()
    }

    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn request() -> (
        Box<Takeover>,
        oneshot::Receiver<Result<Attached, ResumeRefused>>,
    ) {
        let (reply, answer) = oneshot::channel();
        let request = Box::new(Takeover {
            subject: None,
            caller: None,
            last_rx_seq: 0,
            reply,
            evict: false,
        });
        (request, answer)
    }

    #[tokio::test]
    async fn takeover_requests_arrive_one_at_a_time_and_end_with_the_session() {
        let store = InMemorySessionStore::default();
        let takeovers = store.register("s");
        let address = store.find("s").expect("registered");
        assert!(store.find("other").is_none());
        // The first request goes in; a second waits until it is taken out.
        let (first, _first_answer) = request();
        address.send(first).await.map_err(|_| ()).expect("room");
        let (second, mut second_answer) = request();
        let waiting = tokio::spawn({
            let address = address.clone();
            async move { address.send(second).await.is_ok() }
        });
        let taken = tokio::time::timeout(Duration::from_secs(5), takeovers.recv())
            .await
            .expect("the first request");
        assert_eq!(taken.last_rx_seq, 0);
        let sent = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the second request goes in once the first is out")
            .unwrap();
        assert!(sent);
        // The session ends with the second request unanswered: its asker
        // hears at once, and the session is no longer found.
        drop(takeovers);
        assert!(matches!(
            second_answer.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        assert!(store.find("s").is_none());
        let (third, _) = request();
        assert!(address.send(third).await.is_err(), "refused, not queued");
    }
}
