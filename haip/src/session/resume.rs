//! Resumption (docs/protocol.md §11.3): what a session checks before another
//! connection takes it over, and how it greets the client afterwards.

use serde_json::{Value, json};

use super::flow::Amount;
use super::{ResumeRefused, Session};
use crate::context::LogLevel;
use crate::protocol::payload::Hai;
use crate::protocol::{Channel, ErrorCode, EventType, Outgoing, Prepared};
use crate::schema::SchemaProfile;
use crate::stats::Door;

/// A client `HAI` asking to resume another session, as the first envelope
/// on its connection.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResumeRequest {
    /// The session to resume (the envelope `session`).
    pub(crate) session: String,
    /// `payload.last_rx_seq`, when it is an integer.
    pub(crate) last_rx_seq: Option<u64>,
    /// The `HAI`'s envelope id, for `related_id`.
    pub(crate) related_id: Option<String>,
    /// The `HAI`; its settings apply to whichever session the connection
    /// ends up on.
    pub(crate) hai: Hai,
    /// The `HAI` envelope as received, filled in by the driver: what is
    /// relayed to the instance running the session when that is another.
    pub(crate) text: Option<String>,
}

impl Session {
    /// Applies a client `HAI`'s settings (docs/protocol.md §3.2); `related_id` is
    /// the `HAI`'s id, for the error about an unknown schema profile.
    pub(super) fn apply_hai_settings(&mut self, hai: &Hai, related_id: Option<&str>) {
        if let Some(capabilities) = &hai.capabilities {
            if let Some(tool_input) = capabilities.tool_input {
                self.tool_input = tool_input;
            }
            if let Some(level) = capabilities.log_level.as_deref().and_then(LogLevel::parse) {
                self.log_level = level;
            }
            if let Some(name) = &capabilities.schema_profile {
                match name.parse::<SchemaProfile>() {
                    Ok(profile) => self.schema_profile = Some(profile),
                    Err(_) => self.unknown_profile(name, related_id),
                }
            }
        }
        if let Some(flow) = hai.capabilities.as_ref().and_then(|c| c.flow_control) {
            self.client_flow_control = true;
            if let (Some(messages), Some(bytes)) =
                (flow.initial_credit_messages, flow.initial_credit_bytes)
            {
                self.gate.advertise(Amount { messages, bytes });
            }
        }
        if let Some(events) = &hai.accept_events {
            self.accept_events = Some(
                events
                    .iter()
                    .filter_map(|name| EventType::parse(name))
                    .collect(),
            );
        }
    }

    /// Whether a client that saw everything up to `last_rx_seq` can resume:
    /// it must not claim more than was sent, and everything after it must
    /// still be kept.
    pub(crate) fn can_resume_from(&self, last_rx_seq: u64) -> Result<(), ResumeRefused> {
        let newest = self.next_seq - 1;
        if last_rx_seq > newest {
            return Err(ResumeRefused::InvalidLastRxSeq);
        }
        match self.window.range(last_rx_seq + 1, None, self.next_seq) {
            Ok(_) => Ok(()),
            Err(_) => Err(ResumeRefused::WindowExceeded),
        }
    }

    /// The resumption the client's `HAI` asked for is refused (`reason`): the
    /// connection stays on this (fresh) session, `RESUME_FAILED`, and the
    /// `HAI` is otherwise processed as usual.
    pub(crate) fn handle_resume_refused(
        &mut self,
        reason: ResumeRefused,
        related_id: Option<&str>,
        hai: &Hai,
    ) {
        self.error(
            ErrorCode::RESUME_FAILED,
            "Session cannot be resumed",
            related_id,
            Some(json!({ "reason": reason.reason() })),
        );
        self.apply_hai_settings(hai, related_id);
    }

    /// This session was just taken over by a new connection whose client saw
    /// everything up to `last_rx_seq`: re-send what it missed, unchanged and in
    /// order, then commit a `HAI` confirming the resumption, as `door` (the new
    /// connection's) shows it.
    pub(crate) fn handle_resume(&mut self, last_rx_seq: u64, hai: &Hai, door: Door) {
        self.door = door;
        self.apply_hai_settings(hai, None);
        let missed = self
            .window
            .range(last_rx_seq + 1, None, self.next_seq)
            .unwrap_or_default();
        let mut payload = self.hai_payload();
        payload["last_rx_seq"] = Value::String(self.last_rx_seq.to_string());
        // Ahead of anything still uncommitted (held by a paused channel, say):
        // the missed envelopes, then the confirming HAI.
        let confirm = Prepared::new(&Outgoing::new(Channel::System, EventType::Hai, payload));
        self.count_new(confirm.len(), true);
        self.outbox.push_front(super::Pending::New {
            env: confirm,
            progress_of: None,
        });
        self.push_replay(missed, true);
    }
}
