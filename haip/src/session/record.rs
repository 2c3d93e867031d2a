//! What a session tells a store that records it: a store shared by several
//! instances (Redis, feature `redis`), which keeps what resuming the session
//! on another instance takes (`Record`). Without the feature no store
//! records sessions, and there is nothing to tell.

use bytes::Bytes;

use super::Session;
#[cfg(feature = "redis")]
use super::shared_store::Record;

#[cfg(feature = "redis")]
impl Session {
    /// The session began here, or was restored here, on behalf of its
    /// subject.
    pub(super) fn record_opened(&self) {
        if self.shared.store.records() {
            let subject = self.subject.as_deref();
            self.shared
                .store
                .record(&self.id, Record::Opened { subject });
        }
    }

    /// Envelope `seq` was committed.
    pub(super) fn record_committed(&self, seq: u64, envelope: &Bytes) {
        if self.shared.store.records() {
            let last_rx_seq = self.last_rx_seq;
            let record = Record::Committed {
                seq,
                envelope,
                last_rx_seq,
            };
            self.shared.store.record(&self.id, record);
        }
    }

    /// A call was accepted: it is owed a `TOOL_DONE`.
    pub(super) fn record_call_opened(&self, call_id: &str) {
        if self.shared.store.records() {
            let last_rx_seq = self.last_rx_seq;
            let record = Record::CallOpened {
                call_id,
                last_rx_seq,
            };
            self.shared.store.record(&self.id, record);
        }
    }

    /// A call's `TOOL_DONE` was issued.
    pub(super) fn record_call_closed(&self, call_id: &str) {
        if self.shared.store.records() {
            let record = Record::CallClosed { call_id };
            self.shared.store.record(&self.id, record);
        }
    }

    /// Which channels are paused now.
    pub(super) fn record_paused(&self) {
        if self.shared.store.records() {
            let channels = self.gate.paused_names();
            let record = Record::Paused {
                channels: &channels,
            };
            self.shared.store.record(&self.id, record);
        }
    }

    /// The flow-control credit the client is owed now.
    pub(super) fn record_owed(&self) {
        if self.shared.store.records() {
            let owed = self.inbound_credit.owed();
            self.shared
                .store
                .record(&self.id, Record::Owed { owed: &owed });
        }
    }
}

/// Without the `redis` feature no store records sessions.
#[cfg(not(feature = "redis"))]
impl Session {
    pub(super) fn record_opened(&self) {}

    pub(super) fn record_committed(&self, _seq: u64, _envelope: &Bytes) {}

    pub(super) fn record_call_opened(&self, _call_id: &str) {}

    pub(super) fn record_call_closed(&self, _call_id: &str) {}

    pub(super) fn record_paused(&self) {}

    pub(super) fn record_owed(&self) {}
}
