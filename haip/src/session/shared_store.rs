//! A session and a store shared by several instances (Redis, feature
//! `redis`): what the store keeps of it ([`Record`]s of its changes, the
//! [`Snapshot`] made of them), and the sessions that come from another
//! instance: one restored here from what was recorded of it
//! ([`Session::restore`]), and the fresh session of a connection another
//! instance greeted, then relayed here ([`Session::relayed`]). Only such a
//! store restores a session or relays a connection; without the feature
//! there is none of this.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::{ResumeRefused, Session, Shared};
use crate::context::Caller;
use crate::exec::admit::CallBook;
use crate::otel::CallSpan;
use crate::protocol::payload;
use crate::protocol::{Channel, ErrorCode, EventType, Outgoing};
use crate::stats::Door;

/// Why [`SessionStore::restore`](super::SessionStore::restore) gave no snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotRestored {
    /// The `RESUME_FAILED` reason.
    Refused(ResumeRefused),
    /// The live instance with this id runs the session: relay to it.
    Elsewhere(String),
}

/// A change to a session, for a store that can restore it elsewhere.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Record<'a> {
    /// The session began, on behalf of `subject` (`None`: authentication off).
    Opened { subject: Option<&'a str> },
    /// The session, begun on another instance (which greeted its client,
    /// then relayed the connection here), runs here from now on.
    Adopted { subject: Option<&'a str> },
    /// Envelope `seq` was committed; `last_rx_seq` is the highest inbound
    /// `seq` seen so far.
    Committed {
        seq: u64,
        envelope: &'a bytes::Bytes,
        last_rx_seq: u64,
    },
    /// A call was accepted: it is owed a `TOOL_DONE`. `last_rx_seq` is the
    /// highest inbound `seq` seen then (its `TOOL_CALL`'s, if it had one): a
    /// session restored elsewhere owes the call, and must not ask for it
    /// again.
    CallOpened { call_id: &'a str, last_rx_seq: u64 },
    /// Its `TOOL_DONE` was issued.
    CallClosed { call_id: &'a str },
    /// The channels paused now (`PAUSE_CHANNEL`), comma-separated: pause
    /// state survives resumption (docs/protocol.md §12.2).
    Paused { channels: &'a str },
    /// The flow-control credit the client is owed (`InboundCredit::owed`):
    /// a session restored elsewhere returns it, as this one would have.
    Owed { owed: &'a str },
}

/// A session as a shared store last recorded it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Snapshot {
    /// Its subject.
    pub(crate) subject: Option<String>,
    /// Its committed envelopes still kept, with their `seq`s, oldest first.
    pub(crate) window: Vec<(u64, bytes::Bytes)>,
    /// The next `seq` it would have committed.
    pub(crate) next_seq: u64,
    /// The highest inbound `seq` it had seen.
    pub(crate) last_rx_seq: u64,
    /// Calls that were owed a `TOOL_DONE` when it was last recorded.
    pub(crate) open_calls: Vec<String>,
    /// The channels it had paused.
    pub(crate) paused: Vec<String>,
    /// The flow-control credit it owed its client (`InboundCredit::owed`).
    pub(crate) owed: String,
}

impl Session {
    /// A fresh session for a connection relayed from another instance,
    /// whose client was greeted there: its `HAI` is not sent (what comes
    /// next is the client's resumption of the session it is after). It is
    /// the session the client was greeted with (`greeted`: its id and next
    /// `seq`), so that a refused resumption leaves the client on a session
    /// it knows (docs/protocol.md §11.3).
    pub(crate) fn relayed(
        shared: Arc<Shared>,
        door: Door,
        caller: Option<Arc<Caller>>,
        greeted: Option<(String, u64)>,
    ) -> Session {
        let mut session = Session::new(shared, door, caller);
        session.forget_greeting();
        if let Some((id, next_seq)) = greeted {
            let made = std::mem::replace(&mut session.id, Arc::from(id));
            session.next_seq = next_seq.max(1);
            if session.shared.store.records() {
                // Recorded as it was made: it is the greeted one instead.
                session.shared.store.remove(&made);
                let subject = session.subject.clone();
                session.shared.store.record(
                    &session.id,
                    Record::Adopted {
                        subject: subject.as_deref(),
                    },
                );
            }
        }
        session
    }

    /// Drops what a new session committed of itself (its `HAI`, not yet
    /// sent): its bytes leave the server's count of unsent ones.
    fn forget_greeting(&mut self) {
        self.outbox.clear();
        self.new_envelopes = 0;
        let unsent = std::mem::take(&mut self.new_bytes);
        let stats = &self.shared.stats;
        stats.outbound_bytes.fetch_sub(unsent as u64, Relaxed);
    }

    /// The `seq` the next committed envelope gets.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// A session another instance held, rebuilt from what a shared store
    /// recorded of it ([`Snapshot`]), on a connection from now on, its
    /// outbox empty. Its window holds the recorded envelopes; the calls it
    /// owed a `TOOL_DONE` died with that instance: [`Session::handle_resume`] is
    /// to follow, then [`Session::handle_lost_calls`].
    pub(crate) fn restore(
        shared: Arc<Shared>,
        door: Door,
        id: &str,
        snapshot: Snapshot,
    ) -> (Session, Vec<String>) {
        let mut session = Session::new(Arc::clone(&shared), door, None);
        // The fresh id and its HAI go: this is the recorded session.
        session.forget_greeting();
        session.id = Arc::from(id);
        session.subject = snapshot.subject.map(Arc::from);
        session.next_seq = snapshot.next_seq.max(1);
        session.last_rx_seq = snapshot.last_rx_seq;
        for channel in &snapshot.paused {
            session.gate.pause(channel);
        }
        session.inbound_credit.restore_owed(&snapshot.owed);
        let now = shared.clock.now();
        for (seq, text) in snapshot.window {
            session.window.keep(seq, text, now, &shared.replay);
        }
        session.record_opened();
        session.record_paused();
        (session, snapshot.open_calls)
    }

    /// Ends calls that died with the instance that ran them: each gets its
    /// one `TOOL_DONE`, `ERROR` `INTERNAL_ERROR` "instance lost".
    pub(crate) fn handle_lost_calls(&mut self, call_ids: Vec<String>) {
        for call_id in call_ids {
            // Which tool it ran died with its instance.
            let now = self.shared.clock.now();
            let book = CallBook::open(&self.shared.stats, None, now, CallSpan::default());
            let failure = payload::ToolFailure::new(
                ErrorCode::INTERNAL_ERROR,
                "instance lost: the server running this call stopped",
            );
            let done = payload::ToolDone::failed(call_id.clone(), failure);
            self.push(Outgoing::new(
                Channel::Agent,
                EventType::ToolDone,
                done.into_value(),
            ));
            self.record_call_closed(&call_id);
            book.finish_untimed(crate::stats::Ended::failed(&ErrorCode::INTERNAL_ERROR));
        }
    }
}
