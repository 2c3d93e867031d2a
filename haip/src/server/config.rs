use std::time::Duration;

use super::metrics::MetricsConfig;
use crate::Error;
use crate::session::{SessionConfig, invalid};

/// Every setting of docs/protocol.md §18 this server implements, with its default.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) addr: String,
    /// What every session reads.
    pub(crate) session: SessionConfig,
    pub(crate) max_body_bytes: usize,
    pub(crate) allow_unauthenticated: bool,
    #[cfg(feature = "jwt")]
    pub(crate) jwt_issuer: Option<String>,
    #[cfg(feature = "jwt")]
    pub(crate) jwt_audience: Option<String>,
    pub(crate) max_inflight_body_bytes: usize,
    pub(crate) body_read_timeout: Duration,
    pub(crate) max_inflight_answer_bytes: usize,
    pub(crate) write_timeout: Duration,
    /// The key `/mcp`'s `requestState` is signed with (at least 32 bytes);
    /// a random one per process when `None`.
    pub(crate) request_state_key: Option<Vec<u8>>,
    pub(crate) request_state_ttl: Duration,
    /// How long an ended MCP task is kept for `tasks/get`.
    pub(crate) task_ttl: Duration,
    /// Runs of a re-runnable MCP task at most (`Limits::task_attempts`).
    pub(crate) task_attempts: u32,
    /// The bytes of MCP task records one instance keeps.
    pub(crate) max_task_bytes: usize,
    /// MCP tasks one caller may have running on one instance.
    pub(crate) max_tasks_per_client: usize,
    /// The bytes of MCP task records (running and ended, until they expire)
    /// one caller may hold on one instance.
    pub(crate) max_task_bytes_per_client: usize,
    /// Of each pool shared by all callers (HAIP sessions, MCP sessions, MCP
    /// requests in flight, listen streams), what one caller may hold.
    pub(crate) max_sessions_per_caller: usize,
    /// `Host` names the server answers to, beside loopback names when it
    /// is bound to loopback; empty: any host when bound elsewhere.
    pub(crate) allowed_hosts: Vec<String>,
    /// Where the routes are on the host (`path_prefix`; empty at the root).
    pub(crate) path_prefix: String,
    pub(crate) handshake_timeout: Duration,
    pub(crate) max_connections_per_peer: Option<usize>,
    pub(crate) limit_loopback_peers: bool,
    /// Serve the browser inspector at `/inspector` (feature `inspector`:
    /// without it, nothing turns this on).
    pub(crate) inspector: bool,
    /// Where `/metrics` is served (feature `metrics`).
    pub(crate) metrics_addr: MetricsConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            addr: "127.0.0.1:8080".to_owned(),
            session: SessionConfig::default(),
            max_body_bytes: 10 * 1024 * 1024,
            allow_unauthenticated: false,
            #[cfg(feature = "jwt")]
            jwt_issuer: None,
            #[cfg(feature = "jwt")]
            jwt_audience: None,
            max_inflight_body_bytes: 128 * 1024 * 1024,
            body_read_timeout: Duration::from_secs(30),
            max_inflight_answer_bytes: 128 * 1024 * 1024,
            write_timeout: Duration::from_secs(30),
            request_state_key: None,
            request_state_ttl: Duration::from_secs(600),
            task_ttl: Duration::from_secs(30 * 60),
            task_attempts: 3,
            max_task_bytes: 64 * 1024 * 1024,
            max_tasks_per_client: 100,
            max_task_bytes_per_client: 8 * 1024 * 1024,
            max_sessions_per_caller: 1000,
            allowed_hosts: Vec::new(),
            path_prefix: String::new(),
            handshake_timeout: Duration::from_secs(10),
            max_connections_per_peer: Some(1024),
            limit_loopback_peers: false,
            inspector: false,
            metrics_addr: Default::default(),
        }
    }
}

impl Config {
    /// Rejects nonsensical settings, naming the first bad one (docs/protocol.md §18):
    /// the sessions' first, then the server's own.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        self.session.validate()?;
        let prefix = &self.path_prefix;
        if !prefix.is_empty()
            && (!prefix.starts_with('/')
                || prefix.ends_with('/')
                || prefix.contains(['?', '#', ' ', '*', '{', '}']))
        {
            return Err(Error::InvalidConfig {
                setting: "path_prefix",
                reason: format!(
                    "{prefix:?} is not a path prefix: it starts with '/', does not end with one, \
                     and holds no query, fragment or pattern (e.g. \"/agent\"; \"\" for the root)"
                ),
            });
        }
        let positive: [(&'static str, u64); 13] = [
            (
                "max_task_bytes_per_client",
                self.max_task_bytes_per_client as u64,
            ),
            (
                "max_sessions_per_caller",
                self.max_sessions_per_caller as u64,
            ),
            ("task_ttl", self.task_ttl.as_millis() as u64),
            ("task_attempts", u64::from(self.task_attempts)),
            ("max_task_bytes", self.max_task_bytes as u64),
            ("max_tasks_per_client", self.max_tasks_per_client as u64),
            ("max_body_bytes", self.max_body_bytes as u64),
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
            (
                "max_inflight_answer_bytes",
                self.max_inflight_answer_bytes as u64,
            ),
            ("write_timeout", self.write_timeout.as_millis() as u64),
            (
                "request_state_ttl",
                self.request_state_ttl.as_millis() as u64,
            ),
        ];
        for (setting, value) in positive {
            if value == 0 {
                return Err(invalid(setting, "must be greater than zero"));
            }
        }
        if let Some(key) = &self.request_state_key
            && key.len() < 32
        {
            return Err(invalid(
                "request_state_key",
                &format!("must be at least 32 bytes (got {})", key.len()),
            ));
        }
        if self.max_connections_per_peer == Some(0) {
            return Err(invalid(
                "max_connections_per_peer",
                "must be greater than zero (None for no limit)",
            ));
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
        assert_eq!(
            zero(|c| c.session.max_outbound_bytes = 0),
            "max_outbound_bytes"
        );
        assert_eq!(
            zero(|c| c.session.replay_budget_bytes = 0),
            "replay_budget_bytes"
        );
        assert_eq!(zero(|c| c.session.max_violations = 0), "max_violations");
        assert_eq!(zero(|c| c.session.max_queued_bytes = 0), "max_queued_bytes");
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
            zero(|c| c.max_inflight_answer_bytes = 0),
            "max_inflight_answer_bytes"
        );
        assert_eq!(zero(|c| c.write_timeout = Duration::ZERO), "write_timeout");
        assert_eq!(
            zero(|c| c.max_connections_per_peer = Some(0)),
            "max_connections_per_peer"
        );
        assert_eq!(
            zero(|c| c.session.max_outbound_bytes = 100),
            "max_outbound_bytes"
        );
        // Replies to a message can repeat what it carried: they must fit.
        assert_eq!(
            zero(|c| c.session.max_outbound_message_bytes = 3 * 1024 * 1024 - 1),
            "max_outbound_message_bytes"
        );
        let mut config = Config::default();
        config.session.max_message_bytes = 4096;
        config.session.max_outbound_message_bytes = 3 * 4096;
        assert!(config.validate().is_ok());
        config.max_connections_per_peer = None;
        assert!(config.validate().is_ok(), "no per-peer limit is a choice");
    }
}
