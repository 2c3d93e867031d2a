//! The settings a session needs, taken from the server's configuration once.

use std::time::Duration;

use crate::Error;
use crate::schema::SchemaProfile;

/// The smallest outbound budget that still fits the envelopes the server
/// writes itself.
const MIN_OUTBOUND_BYTES: usize = 4096;

/// The per-session and per-connection settings of docs/protocol.md §18 and §18.1: what
/// the session core, the connection driver and the MCP export read. The server
/// builds one from its own configuration (which adds the listener, HTTP and
/// authentication settings) and shares it with every session.
#[derive(Debug, Clone)]
pub(crate) struct SessionConfig {
    pub(crate) max_message_bytes: usize,
    pub(crate) max_sessions: usize,
    pub(crate) max_inflight_calls: usize,
    pub(crate) max_queued_calls: usize,
    pub(crate) tool_timeout: Option<Duration>,
    pub(crate) cancel_grace: Duration,
    pub(crate) heartbeat_interval: Option<Duration>,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) max_concurrent_runs: usize,
    pub(crate) initial_credit_messages: u64,
    pub(crate) initial_credit_bytes: u64,
    pub(crate) max_outbound_queue: usize,
    pub(crate) announce_running: bool,
    pub(crate) tool_schema_legacy_field: bool,
    pub(crate) advertise_tools: bool,
    pub(crate) strict_output_validation: bool,
    pub(crate) debug_errors: bool,
    pub(crate) credit_return_messages: u64,
    pub(crate) credit_return_bytes: u64,
    pub(crate) strict_flow_control: bool,
    pub(crate) strict_envelope: bool,
    pub(crate) replay_window_messages: usize,
    pub(crate) replay_window_time: Duration,
    pub(crate) replay_window_bytes: usize,
    pub(crate) max_outbound_bytes: usize,
    pub(crate) max_outbound_message_bytes: usize,
    pub(crate) replay_budget_bytes: usize,
    pub(crate) max_violations: usize,
    pub(crate) max_queued_bytes: usize,
    /// The schema profile tools are advertised in unless a client asks for
    /// another (docs/protocol.md §6.14).
    pub(crate) schema_profile: SchemaProfile,
    /// Scopes every tool requires, beside its own (docs/protocol.md §17.1).
    pub(crate) required_scopes: Vec<String>,
    /// Whether a caller sees only the tools its scopes allow.
    pub(crate) hide_forbidden_tools: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            max_message_bytes: 1024 * 1024,
            max_sessions: 10_000,
            max_inflight_calls: 64,
            max_queued_calls: 256,
            tool_timeout: None,
            cancel_grace: Duration::from_secs(5),
            heartbeat_interval: Some(Duration::from_secs(30)),
            idle_timeout: Some(Duration::from_secs(300)),
            max_concurrent_runs: 10,
            initial_credit_messages: 1000,
            initial_credit_bytes: 1024 * 1024,
            max_outbound_queue: 4096,
            announce_running: false,
            tool_schema_legacy_field: false,
            advertise_tools: false,
            strict_output_validation: false,
            debug_errors: false,
            credit_return_messages: 5,
            credit_return_bytes: 262_144,
            strict_flow_control: false,
            strict_envelope: false,
            replay_window_messages: 1000,
            replay_window_time: Duration::from_secs(300),
            replay_window_bytes: 1024 * 1024,
            max_outbound_bytes: 8 * 1024 * 1024,
            max_outbound_message_bytes: 16 * 1024 * 1024,
            replay_budget_bytes: 256 * 1024 * 1024,
            max_violations: 20,
            max_queued_bytes: 16 * 1024 * 1024,
            schema_profile: SchemaProfile::Portable,
            required_scopes: Vec::new(),
            hide_forbidden_tools: true,
        }
    }
}

impl SessionConfig {
    /// Rejects nonsensical settings, naming the first bad one (docs/protocol.md §18).
    pub(crate) fn validate(&self) -> Result<(), Error> {
        let bad = |setting, reason| Err(invalid(setting, reason));
        let positive: [(&'static str, u64); 18] = [
            ("credit_return_messages", self.credit_return_messages),
            ("credit_return_bytes", self.credit_return_bytes),
            ("replay_window_messages", self.replay_window_messages as u64),
            (
                "replay_window_time",
                self.replay_window_time.as_millis() as u64,
            ),
            ("replay_window_bytes", self.replay_window_bytes as u64),
            ("max_message_bytes", self.max_message_bytes as u64),
            ("max_sessions", self.max_sessions as u64),
            ("max_inflight_calls", self.max_inflight_calls as u64),
            ("max_outbound_queue", self.max_outbound_queue as u64),
            ("max_concurrent_runs", self.max_concurrent_runs as u64),
            ("initial_credit_messages", self.initial_credit_messages),
            ("initial_credit_bytes", self.initial_credit_bytes),
            ("cancel_grace", self.cancel_grace.as_millis() as u64),
            ("max_outbound_bytes", self.max_outbound_bytes as u64),
            (
                "max_outbound_message_bytes",
                self.max_outbound_message_bytes as u64,
            ),
            ("replay_budget_bytes", self.replay_budget_bytes as u64),
            ("max_violations", self.max_violations as u64),
            ("max_queued_bytes", self.max_queued_bytes as u64),
        ];
        if let Some(bad) = self
            .required_scopes
            .iter()
            .find(|s| !crate::tool::valid_scope(s))
        {
            return Err(invalid(
                "require_scopes",
                &format!(
                    "{bad:?} is not a valid OAuth scope: 1 to 128 printable ASCII characters \
                     other than space, `\"` and `\\` (RFC 6749 §3.3)"
                ),
            ));
        }
        for (setting, value) in positive {
            if value == 0 {
                return bad(setting, "must be greater than zero");
            }
        }
        if self.tool_timeout == Some(Duration::ZERO) {
            return bad(
                "tool_timeout",
                "must be greater than zero (leave it unset for none)",
            );
        }
        if self.replay_window_messages > 10_000 {
            return bad("replay_window_messages", "must be at most 10 000");
        }
        if self.max_outbound_queue < 16 {
            return bad("max_outbound_queue", "must be at least 16");
        }
        // Every envelope the server makes itself (an ERROR, a TOOL_DONE ERROR
        // saying a result was too large) must fit.
        if self.max_outbound_message_bytes < MIN_OUTBOUND_BYTES {
            return bad("max_outbound_message_bytes", "must be at least 4096");
        }
        // Any envelope the server builds from one inbound message must fit in
        // one outbound message: an ERROR echoing a tool name twice beside the
        // call id, say. Else such an envelope could not be sent, and a call
        // could end without its TOOL_DONE.
        if self.max_outbound_message_bytes < self.max_message_bytes.saturating_mul(3) {
            return bad(
                "max_outbound_message_bytes",
                "must be at least three times max_message_bytes (the envelopes that answer a \
                 message can repeat what it carried)",
            );
        }
        if self.max_outbound_bytes < MIN_OUTBOUND_BYTES {
            return bad("max_outbound_bytes", "must be at least 4096");
        }
        Ok(())
    }
}

/// A setting's value is nonsense.
pub(crate) fn invalid(setting: &'static str, reason: &str) -> Error {
    Error::InvalidConfig {
        setting,
        reason: reason.to_owned(),
    }
}

impl SessionConfig {
    /// Whether `caller` may call `tool`: `None` when it may (or when
    /// authentication is off: no caller), else the scopes it needs and the
    /// ones it lacks (docs/protocol.md §17.1).
    pub(crate) fn forbidden(
        &self,
        caller: Option<&crate::context::Caller>,
        tool: &crate::Tool,
    ) -> Option<crate::exec::admit::Forbidden> {
        crate::exec::admit::forbidden(&self.required_scopes, caller, tool)
    }

    /// Whether `caller` is shown `tool` in lists and schemas.
    pub(crate) fn shows(
        &self,
        caller: Option<&crate::context::Caller>,
        tool: &crate::Tool,
    ) -> bool {
        !self.hide_forbidden_tools || self.forbidden(caller, tool).is_none()
    }
}
