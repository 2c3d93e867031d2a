use std::time::Duration;

use crate::Error;

/// The smallest outbound budget that still fits the envelopes the server
/// writes itself.
const MIN_OUTBOUND_BYTES: usize = 4096;

/// Every setting of HAIP.md §18 this server implements, with its default.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) addr: String,
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
    pub(crate) max_body_bytes: usize,
    pub(crate) credit_return_messages: u64,
    pub(crate) credit_return_bytes: u64,
    pub(crate) strict_flow_control: bool,
    pub(crate) strict_envelope: bool,
    pub(crate) replay_window_messages: usize,
    pub(crate) replay_window_time: Duration,
    pub(crate) replay_window_bytes: usize,
    pub(crate) allow_unauthenticated: bool,
    pub(crate) jwt_issuer: Option<String>,
    pub(crate) jwt_audience: Option<String>,
    // HAIP.md §18.1: resource budgets.
    pub(crate) max_outbound_bytes: usize,
    pub(crate) max_outbound_message_bytes: usize,
    pub(crate) replay_budget_bytes: usize,
    pub(crate) max_violations: usize,
    pub(crate) max_queued_bytes: usize,
    pub(crate) max_inflight_body_bytes: usize,
    pub(crate) body_read_timeout: Duration,
    pub(crate) handshake_timeout: Duration,
    pub(crate) max_connections_per_peer: Option<usize>,
    pub(crate) limit_loopback_peers: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            addr: "127.0.0.1:8080".to_owned(),
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
            max_body_bytes: 10 * 1024 * 1024,
            credit_return_messages: 5,
            credit_return_bytes: 262_144,
            strict_flow_control: false,
            strict_envelope: false,
            replay_window_messages: 1000,
            replay_window_time: Duration::from_secs(300),
            replay_window_bytes: 1024 * 1024,
            allow_unauthenticated: false,
            jwt_issuer: None,
            jwt_audience: None,
            max_outbound_bytes: 8 * 1024 * 1024,
            max_outbound_message_bytes: 16 * 1024 * 1024,
            replay_budget_bytes: 256 * 1024 * 1024,
            max_violations: 20,
            max_queued_bytes: 16 * 1024 * 1024,
            max_inflight_body_bytes: 128 * 1024 * 1024,
            body_read_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            max_connections_per_peer: Some(1024),
            limit_loopback_peers: false,
        }
    }
}

impl Config {
    /// Rejects nonsensical settings, naming the first bad one (HAIP.md §18).
    pub(crate) fn validate(&self) -> Result<(), Error> {
        let bad = |setting: &'static str, reason: &str| {
            Err(Error::InvalidConfig {
                setting,
                reason: reason.to_owned(),
            })
        };
        let positive: [(&'static str, u64); 22] = [
            ("credit_return_messages", self.credit_return_messages),
            ("credit_return_bytes", self.credit_return_bytes),
            ("replay_window_messages", self.replay_window_messages as u64),
            (
                "replay_window_time",
                self.replay_window_time.as_millis() as u64,
            ),
            ("replay_window_bytes", self.replay_window_bytes as u64),
            ("max_message_bytes", self.max_message_bytes as u64),
            ("max_body_bytes", self.max_body_bytes as u64),
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
            (
                "max_inflight_body_bytes",
                self.max_inflight_body_bytes as u64,
            ),
            (
                "body_read_timeout",
                self.body_read_timeout.as_millis() as u64,
            ),
            (
                "handshake_timeout",
                self.handshake_timeout.as_millis() as u64,
            ),
        ];
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
        if self.max_connections_per_peer == Some(0) {
            return bad(
                "max_connections_per_peer",
                "must be greater than zero (None for no limit)",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(config: Config) -> &'static str {
        match config.validate() {
            Err(Error::InvalidConfig { setting, .. }) => setting,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid_and_nonsense_names_its_setting() {
        assert!(Config::default().validate().is_ok());
        let zero = |f: fn(&mut Config)| {
            let mut config = Config::default();
            f(&mut config);
            rejected(config)
        };
        assert_eq!(zero(|c| c.max_outbound_bytes = 0), "max_outbound_bytes");
        assert_eq!(zero(|c| c.replay_budget_bytes = 0), "replay_budget_bytes");
        assert_eq!(zero(|c| c.max_violations = 0), "max_violations");
        assert_eq!(zero(|c| c.max_queued_bytes = 0), "max_queued_bytes");
        assert_eq!(
            zero(|c| c.max_inflight_body_bytes = 0),
            "max_inflight_body_bytes"
        );
        assert_eq!(
            zero(|c| c.body_read_timeout = Duration::ZERO),
            "body_read_timeout"
        );
        assert_eq!(
            zero(|c| c.handshake_timeout = Duration::ZERO),
            "handshake_timeout"
        );
        assert_eq!(
            zero(|c| c.max_connections_per_peer = Some(0)),
            "max_connections_per_peer"
        );
        assert_eq!(zero(|c| c.max_outbound_bytes = 100), "max_outbound_bytes");
        // Replies to a message can repeat what it carried: they must fit.
        assert_eq!(
            zero(|c| c.max_outbound_message_bytes = 3 * 1024 * 1024 - 1),
            "max_outbound_message_bytes"
        );
        let mut config = Config {
            max_message_bytes: 4096,
            max_outbound_message_bytes: 3 * 4096,
            ..Config::default()
        };
        assert!(config.validate().is_ok());
        config.max_connections_per_peer = None;
        assert!(config.validate().is_ok(), "no per-peer limit is a choice");
    }
}
