//! Where sessions live beyond their connection (HAIP.md §11.3): the
//! [`SessionStore`] seam and an in-memory implementation. The task that keeps
//! a disconnected ("parked") session running is the driver's
//! (`server::driver`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use super::Session;
use crate::exec::CallEvent;

/// A session with everything that keeps it running: the channel its calls
/// report on and the queue through which another connection may take it over.
pub(crate) struct Attached {
    pub(crate) session: Box<Session>,
    /// Given to the call runner with each call the session starts.
    pub(crate) events_tx: mpsc::UnboundedSender<CallEvent>,
    pub(crate) events: mpsc::UnboundedReceiver<CallEvent>,
    pub(crate) takeovers: mpsc::Receiver<Box<Takeover>>,
}

/// A request from a new connection to take a session over.
pub(crate) struct Takeover {
    /// The subject of the connection asking (must be the session's).
    pub(crate) subject: Option<Arc<str>>,
    /// The client's `last_rx_seq`.
    pub(crate) last_rx_seq: u64,
    /// The session, or why it cannot be resumed (`detail.reason`).
    pub(crate) reply: oneshot::Sender<Result<Attached, &'static str>>,
}

impl Takeover {
    /// Answers the request for `attached`: hands it over when every condition
    /// holds, else gives it back with the reason.
    pub(crate) fn answer(self, attached: Attached) -> Option<Attached> {
        let check = if self.subject.as_deref() != attached.session.subject.as_deref() {
            Err("subject mismatch")
        } else {
            attached.session.can_resume_from(self.last_rx_seq)
        };
        match check {
            Ok(()) => match self.reply.send(Ok(attached)) {
                Ok(()) => None,
                // The asking connection gave up meanwhile: keep the session.
                Err(Ok(attached)) => Some(attached),
                Err(Err(_)) => None,
            },
            Err(reason) => {
                let _ = self.reply.send(Err(reason));
                Some(attached)
            }
        }
    }
}

/// The session table behind resumption. In memory by default; the seam is
/// where a store shared by several servers would plug in.
pub(crate) trait SessionStore: Send + Sync + 'static {
    /// Registers a session; returns the queue its owner watches for takeovers.
    fn register(&self, id: &str) -> mpsc::Receiver<Box<Takeover>>;
    /// Where to send a takeover request for `id`, if the session is known.
    fn find(&self, id: &str) -> Option<mpsc::Sender<Box<Takeover>>>;
    /// Forgets a session (it ended or expired).
    fn remove(&self, id: &str);
}

/// The default [`SessionStore`]: a map in this process.
#[derive(Default)]
pub(crate) struct InMemorySessionStore {
    sessions: Mutex<HashMap<String, mpsc::Sender<Box<Takeover>>>>,
}

impl InMemorySessionStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::Sender<Box<Takeover>>>> {
        // Entries are whole values: a panic elsewhere cannot leave one half-written.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl SessionStore for InMemorySessionStore {
    fn register(&self, id: &str) -> mpsc::Receiver<Box<Takeover>> {
        // One pending request is plenty: a second asker waits or times out.
        let (tx, rx) = mpsc::channel(1);
        self.lock().insert(id.to_owned(), tx);
        rx
    }

    fn find(&self, id: &str) -> Option<mpsc::Sender<Box<Takeover>>> {
        self.lock().get(id).filter(|tx| !tx.is_closed()).cloned()
    }

    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }
}
