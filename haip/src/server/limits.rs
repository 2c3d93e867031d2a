//! [`Limits`]: every number the server holds itself to, in one value.

use std::time::Duration;

use super::Config;

/// Every limit, size and duration of the server (docs/protocol.md §18 and
/// §18.1), given to [`ServerBuilder::limits`](crate::ServerBuilder::limits)
/// in one value. Start from the defaults and change the fields you need:
///
/// ```
/// use std::time::Duration;
/// use haip::Limits;
///
/// let server = haip::Server::builder()
///     .limits(Limits {
///         max_inflight_calls: 16,
///         tool_timeout: Some(Duration::from_secs(30)),
///         max_outbound_bytes: 4 * 1024 * 1024,
///         ..Limits::default()
///     })
///     .build()?;
/// # drop(server);
///
/// // A nonsensical value is refused by `build`, naming its field.
/// let zero = haip::Server::builder()
///     .limits(Limits { max_inflight_calls: 0, ..Limits::default() })
///     .build();
/// assert!(zero.unwrap_err().to_string().contains("max_inflight_calls"));
/// # Ok::<(), haip::Error>(())
/// ```
///
/// Filling in a `Limits` never fails; [`build`](crate::ServerBuilder::build)
/// refuses nonsense with [`Error::InvalidConfig`](crate::Error::InvalidConfig)
/// naming the field: a zero for any limit other than
/// [`heartbeat_interval`](Self::heartbeat_interval),
/// [`idle_timeout`](Self::idle_timeout) and
/// [`max_queued_calls`](Self::max_queued_calls) (a zero
/// [`tool_timeout`](Self::tool_timeout) or
/// [`max_connections_per_peer`](Self::max_connections_per_peer) included),
/// [`replay_window_messages`](Self::replay_window_messages) over 10 000,
/// [`max_outbound_queue`](Self::max_outbound_queue) under 16,
/// [`max_outbound_bytes`](Self::max_outbound_bytes) under 4096, or
/// [`max_outbound_message_bytes`](Self::max_outbound_message_bytes) under
/// 4096 or under three times [`max_message_bytes`](Self::max_message_bytes).
///
/// The fields, by what they bound:
///
/// - **Sessions and connections**: [`max_sessions`](Self::max_sessions),
///   [`max_connections_per_peer`](Self::max_connections_per_peer),
///   [`handshake_timeout`](Self::handshake_timeout),
///   [`heartbeat_interval`](Self::heartbeat_interval),
///   [`idle_timeout`](Self::idle_timeout).
/// - **Per-caller shares**: [`max_sessions_per_caller`](Self::max_sessions_per_caller)
///   (and, for MCP tasks, [`max_tasks_per_client`](Self::max_tasks_per_client)
///   and [`max_task_bytes_per_client`](Self::max_task_bytes_per_client)).
/// - **Messages and call queues**: [`max_message_bytes`](Self::max_message_bytes),
///   [`max_inflight_calls`](Self::max_inflight_calls),
///   [`max_queued_calls`](Self::max_queued_calls),
///   [`max_queued_bytes`](Self::max_queued_bytes),
///   [`max_concurrent_runs`](Self::max_concurrent_runs),
///   [`max_violations`](Self::max_violations).
/// - **Tool calls' time**: [`tool_timeout`](Self::tool_timeout),
///   [`cancel_grace`](Self::cancel_grace).
/// - **What waits for a client**: [`max_outbound_queue`](Self::max_outbound_queue),
///   [`max_outbound_bytes`](Self::max_outbound_bytes),
///   [`max_outbound_message_bytes`](Self::max_outbound_message_bytes).
/// - **Flow control**: [`initial_credit_messages`](Self::initial_credit_messages),
///   [`initial_credit_bytes`](Self::initial_credit_bytes),
///   [`credit_return_messages`](Self::credit_return_messages),
///   [`credit_return_bytes`](Self::credit_return_bytes).
/// - **Replay and resumption**: [`replay_window_messages`](Self::replay_window_messages),
///   [`replay_window_time`](Self::replay_window_time),
///   [`replay_window_bytes`](Self::replay_window_bytes),
///   [`replay_budget_bytes`](Self::replay_budget_bytes).
/// - **HTTP bodies and `/mcp` answers**: [`max_body_bytes`](Self::max_body_bytes),
///   [`max_inflight_body_bytes`](Self::max_inflight_body_bytes),
///   [`body_read_timeout`](Self::body_read_timeout),
///   [`max_inflight_answer_bytes`](Self::max_inflight_answer_bytes),
///   [`write_timeout`](Self::write_timeout).
/// - **MCP tasks and request state** (used by `/mcp`, feature `mcp`):
///   [`max_tasks_per_client`](Self::max_tasks_per_client),
///   [`max_task_bytes`](Self::max_task_bytes),
///   [`max_task_bytes_per_client`](Self::max_task_bytes_per_client),
///   [`task_ttl`](Self::task_ttl),
///   [`task_attempts`](Self::task_attempts),
///   [`request_state_ttl`](Self::request_state_ttl).
///
/// The [guide's chapter on limits](crate::guide::limits) tells what each
/// budget protects against.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    // Sessions and connections.
    /// Most connected sessions (docs/protocol.md §18; default 10 000): beyond
    /// it a WebSocket closes with 1013 and an HTTP transport gets `503
    /// TOO_MANY_SESSIONS`. It is also the most disconnected sessions kept
    /// for resumption. On `/mcp` it bounds the MCP sessions, and apart the
    /// MCP requests being served at once.
    pub max_sessions: usize,
    /// Connections one peer IP address may hold at once (docs/protocol.md
    /// §18.1; default `Some(1024)`; `None` for no limit). Beyond it HTTP
    /// requests get `503 TOO_MANY_SESSIONS` (only `/health` is served) and
    /// WebSocket upgrades close with 1013. Loopback peers are exempt unless
    /// [`limit_loopback_peers`](crate::ServerBuilder::limit_loopback_peers)
    /// is on. `Some(0)` is refused.
    pub max_connections_per_peer: Option<usize>,
    /// Time a client may take to send its request headers, and to complete a
    /// WebSocket upgrade (docs/protocol.md §18.1; default 10 s); then the
    /// connection is closed.
    pub handshake_timeout: Duration,
    /// Interval of the server's heartbeat `PING` (docs/protocol.md §9;
    /// default 30 s; streams send one every `min(interval, 15 s)`).
    /// `Duration::ZERO` turns the heartbeat off.
    pub heartbeat_interval: Duration,
    /// Close connections with no inbound data (PONGs and WebSocket pongs
    /// count) for this long, with 1001 `idle`, keeping the session for
    /// resumption (docs/protocol.md §18.1; default 5 min); and end MCP
    /// sessions with no request, no running call and no open stream for
    /// this long. `Duration::ZERO` never closes or ends them.
    pub idle_timeout: Duration,

    // Per-caller shares.
    /// Of each pool the server shares among its callers, what one caller may
    /// hold at once (docs/protocol.md §18; default 1000): connected HAIP
    /// sessions (of [`max_sessions`](Self::max_sessions)), MCP sessions, MCP
    /// requests being served, and `subscriptions/listen` streams. A caller is
    /// its subject when authenticated, else its peer address (an IPv6 peer is
    /// its /64); unauthenticated loopback peers are not counted unless
    /// [`limit_loopback_peers`](crate::ServerBuilder::limit_loopback_peers)
    /// is on. Beyond its share a caller gets `503 TOO_MANY_SESSIONS`
    /// (WebSocket: close 1013) naming this setting, while other callers are
    /// served.
    pub max_sessions_per_caller: usize,

    // Messages and call queues.
    /// Largest message accepted, in bytes (docs/protocol.md §18; default
    /// 1 MiB): a WebSocket message (all its fragments), an NDJSON line, an
    /// envelope of an upstream POST, an `/mcp` request. A larger WebSocket
    /// message gets `MESSAGE_TOO_LARGE` and close 1009; a larger `/mcp`
    /// request `413`.
    pub max_message_bytes: usize,
    /// Calls of one session executing at once (docs/protocol.md §18; default
    /// 64); beyond it calls wait (`QUEUED`), bounded by
    /// [`max_queued_calls`](Self::max_queued_calls). On `/mcp`, the calls of
    /// one MCP session.
    pub max_inflight_calls: usize,
    /// Calls of one session waiting for a slot (docs/protocol.md §18; default
    /// 256); beyond, `RATE_LIMITED`. Zero lets no call wait: a call beyond
    /// [`max_inflight_calls`](Self::max_inflight_calls) is refused at once.
    pub max_queued_calls: usize,
    /// Bytes of params (as sent) that one session's waiting calls may hold,
    /// queued or being validated (docs/protocol.md §18; default 16 MiB);
    /// beyond, `RATE_LIMITED`.
    pub max_queued_bytes: usize,
    /// Runs one session may have at once, advertised in `HAI` and enforced
    /// (docs/protocol.md §8; default 10).
    pub max_concurrent_runs: usize,
    /// Violations listed in an `INVALID_PARAMS` error (docs/protocol.md
    /// §18.1; default 20); each quotes at most 64 characters of the offending
    /// value, and `total` counts them all.
    pub max_violations: usize,

    // Tool calls' time.
    /// Timeout of tools that set none themselves (docs/protocol.md §18;
    /// default `None`: no timeout); when it expires the call ends with
    /// `TIMEOUT`. `Some(Duration::ZERO)` is refused: leave it `None` for none.
    pub tool_timeout: Option<Duration>,
    /// How long a cancelled or timed-out tool may take to stop before it is
    /// aborted (docs/protocol.md §18; default 5 s). Shutting down waits for
    /// it too.
    pub cancel_grace: Duration,

    // What waits for a client.
    /// Envelopes waiting to be written per session (docs/protocol.md §12.2;
    /// default 4096, at least 16); a client that lets more pile up is
    /// disconnected (close 1008 `outbound queue overflow`).
    pub max_outbound_queue: usize,
    /// Bytes of encoded envelopes waiting for one session's socket
    /// (docs/protocol.md §18.1; default 8 MiB, at least 4096). Above half of
    /// it the server stops reading that connection (TCP back-pressure;
    /// running calls go on); when more than this waits behind the envelope
    /// being written, the connection is closed (1008 `too slow`) and the
    /// session kept for resumption.
    pub max_outbound_bytes: usize,
    /// Largest single outbound envelope (docs/protocol.md §18.1; default
    /// 16 MiB). A `TOOL_DONE` that would be larger becomes `TOOL_DONE ERROR`
    /// code `RESULT_TOO_LARGE`, so the call still ends exactly once; a larger
    /// progress update is dropped. At least 4096, and at least three times
    /// [`max_message_bytes`](Self::max_message_bytes): the replies to a
    /// message (an error naming its tool and call id) must fit.
    pub max_outbound_message_bytes: usize,

    // Flow control.
    /// Messages of credit advertised per channel (docs/protocol.md §12;
    /// default 1000).
    pub initial_credit_messages: u64,
    /// Bytes of credit advertised per channel (docs/protocol.md §12; default
    /// 1 MiB).
    pub initial_credit_bytes: u64,
    /// Inbound credit is returned (`FLOW_UPDATE`) once this many messages are
    /// owed on a channel (docs/protocol.md §12.1; default 5) ...
    pub credit_return_messages: u64,
    /// ... or once this many bytes are (docs/protocol.md §12.1; default
    /// 256 KiB).
    pub credit_return_bytes: u64,

    // Replay and resumption.
    /// Envelopes always kept for replay and resumption (docs/protocol.md
    /// §11.1; default 1000, at most 10 000; up to ten times as many are kept
    /// while younger than [`replay_window_time`](Self::replay_window_time)).
    pub replay_window_messages: usize,
    /// How long envelopes beyond
    /// [`replay_window_messages`](Self::replay_window_messages) are kept, and
    /// how long a disconnected session stays resumable (docs/protocol.md
    /// §11.1, §11.3; default 5 min).
    pub replay_window_time: Duration,
    /// Hard cap on the bytes a session's replay window holds
    /// (docs/protocol.md §11.1; default 1 MiB): beyond it the oldest
    /// envelopes go, even among the newest
    /// [`replay_window_messages`](Self::replay_window_messages). This bounds
    /// a detached session's memory.
    pub replay_window_bytes: usize,
    /// Bytes all replay windows may hold together, server-wide
    /// (docs/protocol.md §18.1; default 256 MiB). Over it, detached sessions
    /// are evicted oldest first (their resumption then fails `unknown
    /// session`), then live windows give up their oldest envelopes.
    pub replay_budget_bytes: usize,

    // HTTP bodies and `/mcp` answers.
    /// Largest upstream POST body, in bytes (docs/protocol.md §18; default
    /// 10 MiB); larger ones get `413`, before any of the body is read.
    pub max_body_bytes: usize,
    /// Bytes of upstream POST bodies being read, and of `/mcp` requests until
    /// they are answered, server-wide (docs/protocol.md §18.1; default
    /// 128 MiB); a request that would exceed it gets `503` with
    /// `Retry-After`.
    pub max_inflight_body_bytes: usize,
    /// Time an upstream POST body, or an `/mcp` request body, may take to
    /// arrive (docs/protocol.md §18.1; default 30 s; after the first 10 s it
    /// must also average at least 1 KiB/s), else `408` and the connection is
    /// closed.
    pub body_read_timeout: Duration,
    /// Bytes of `/mcp` answers the server holds for clients that have not
    /// taken them yet, server-wide (docs/protocol.md §18.1; default 128 MiB).
    /// While over it, a connection whose client has taken nothing of its
    /// answer for a second is closed; a client that reads is never closed
    /// for it.
    pub max_inflight_answer_bytes: usize,
    /// Time an `/mcp` client may go without taking any of the answer the
    /// server holds for it (docs/protocol.md §18.1; default 30 s); then its
    /// connection is closed (counted in `/stats` as too slow). A connection
    /// holding more than [`max_outbound_bytes`](Self::max_outbound_bytes)
    /// gets one second.
    pub write_timeout: Duration,

    // MCP tasks and request state (used by `/mcp`, feature `mcp`).
    /// MCP tasks one caller (an authenticated subject, else its peer
    /// address; unauthenticated loopback peers are not counted) may have
    /// running on one instance (default 100); a call that would start one
    /// more answers with a tool error. Used by `/mcp` (feature `mcp`).
    pub max_tasks_per_client: usize,
    /// The bytes of MCP task records (their results and questions) one
    /// instance keeps in memory (default 64 MiB). A task whose result does
    /// not fit fails, saying so; a call that would start a task when the
    /// store is full answers with a tool error. Used by `/mcp` (feature
    /// `mcp`).
    pub max_task_bytes: usize,
    /// The bytes of MCP task records (running and ended ones, until they
    /// expire after [`task_ttl`](Self::task_ttl)) one caller may hold
    /// (default 8 MiB, of [`max_task_bytes`](Self::max_task_bytes); with
    /// Redis, across all instances). A caller is its subject, else its peer
    /// address; unauthenticated loopback peers are not counted. A call that
    /// would start a task beyond it answers with a tool error naming this
    /// setting, and a task whose result would not fit fails saying so;
    /// other callers' tasks are not affected. The number of records a caller
    /// keeps is bounded in the same proportion of the store's. Used by
    /// `/mcp` (feature `mcp`).
    pub max_task_bytes_per_client: usize,
    /// How long an MCP task is kept after it ended, for `tasks/get` (default
    /// 30 min; its `ttlMs`). A running task is kept while it runs. Used by
    /// `/mcp` (feature `mcp`).
    pub task_ttl: Duration,
    /// How many times a task of a tool marked idempotent runs at most when
    /// several instances share a Redis (default 3): when the instance
    /// running it dies, another takes it over and runs it again from the
    /// start, with the answers its client gave, until this many runs have
    /// been lost; then it fails, saying so. 1: it fails with its first
    /// instance, as a task of any other tool does. Used by `/mcp` (features
    /// `mcp` and `redis`).
    pub task_attempts: u32,
    /// How long the `requestState` of an `/mcp` call asking questions
    /// without a session stays valid (default 10 min; see
    /// [`request_state_key`](crate::ServerBuilder::request_state_key)): a
    /// retry that comes later is refused (`-32602`, the call starts again).
    /// Used by `/mcp` (feature `mcp`).
    pub request_state_ttl: Duration,
}

impl Default for Limits {
    /// The server's defaults: read from where the server and its sessions
    /// define them, so that there is one place for each.
    fn default() -> Self {
        Limits::of(&Config::default())
    }
}

impl Limits {
    /// The limits `config` holds.
    fn of(config: &Config) -> Limits {
        let session = &config.session;
        Limits {
            max_sessions: session.max_sessions,
            max_connections_per_peer: config.max_connections_per_peer,
            handshake_timeout: config.handshake_timeout,
            heartbeat_interval: session.heartbeat_interval.unwrap_or(Duration::ZERO),
            idle_timeout: session.idle_timeout.unwrap_or(Duration::ZERO),
            max_sessions_per_caller: config.max_sessions_per_caller,
            max_message_bytes: session.max_message_bytes,
            max_inflight_calls: session.max_inflight_calls,
            max_queued_calls: session.max_queued_calls,
            max_queued_bytes: session.max_queued_bytes,
            max_concurrent_runs: session.max_concurrent_runs,
            max_violations: session.max_violations,
            tool_timeout: session.tool_timeout,
            cancel_grace: session.cancel_grace,
            max_outbound_queue: session.max_outbound_queue,
            max_outbound_bytes: session.max_outbound_bytes,
            max_outbound_message_bytes: session.max_outbound_message_bytes,
            initial_credit_messages: session.initial_credit_messages,
            initial_credit_bytes: session.initial_credit_bytes,
            credit_return_messages: session.credit_return_messages,
            credit_return_bytes: session.credit_return_bytes,
            replay_window_messages: session.replay_window_messages,
            replay_window_time: session.replay_window_time,
            replay_window_bytes: session.replay_window_bytes,
            replay_budget_bytes: session.replay_budget_bytes,
            max_body_bytes: config.max_body_bytes,
            max_inflight_body_bytes: config.max_inflight_body_bytes,
            body_read_timeout: config.body_read_timeout,
            max_inflight_answer_bytes: config.max_inflight_answer_bytes,
            write_timeout: config.write_timeout,
            max_tasks_per_client: config.max_tasks_per_client,
            max_task_bytes: config.max_task_bytes,
            max_task_bytes_per_client: config.max_task_bytes_per_client,
            task_ttl: config.task_ttl,
            task_attempts: config.task_attempts,
            request_state_ttl: config.request_state_ttl,
        }
    }

    /// Writes every limit where the server and its sessions read it. The
    /// whole value is taken apart, so a field added here cannot be left out.
    pub(super) fn apply(&self, config: &mut Config) {
        let Limits {
            max_sessions,
            max_connections_per_peer,
            handshake_timeout,
            heartbeat_interval,
            idle_timeout,
            max_sessions_per_caller,
            max_message_bytes,
            max_inflight_calls,
            max_queued_calls,
            max_queued_bytes,
            max_concurrent_runs,
            max_violations,
            tool_timeout,
            cancel_grace,
            max_outbound_queue,
            max_outbound_bytes,
            max_outbound_message_bytes,
            initial_credit_messages,
            initial_credit_bytes,
            credit_return_messages,
            credit_return_bytes,
            replay_window_messages,
            replay_window_time,
            replay_window_bytes,
            replay_budget_bytes,
            max_body_bytes,
            max_inflight_body_bytes,
            body_read_timeout,
            max_inflight_answer_bytes,
            write_timeout,
            max_tasks_per_client,
            max_task_bytes,
            max_task_bytes_per_client,
            task_ttl,
            task_attempts,
            request_state_ttl,
        } = *self;
        let session = &mut config.session;
        session.max_sessions = max_sessions;
        session.heartbeat_interval = (!heartbeat_interval.is_zero()).then_some(heartbeat_interval);
        session.idle_timeout = (!idle_timeout.is_zero()).then_some(idle_timeout);
        session.max_message_bytes = max_message_bytes;
        session.max_inflight_calls = max_inflight_calls;
        session.max_queued_calls = max_queued_calls;
        session.max_queued_bytes = max_queued_bytes;
        session.max_concurrent_runs = max_concurrent_runs;
        session.max_violations = max_violations;
        session.tool_timeout = tool_timeout;
        session.cancel_grace = cancel_grace;
        session.max_outbound_queue = max_outbound_queue;
        session.max_outbound_bytes = max_outbound_bytes;
        session.max_outbound_message_bytes = max_outbound_message_bytes;
        session.initial_credit_messages = initial_credit_messages;
        session.initial_credit_bytes = initial_credit_bytes;
        session.credit_return_messages = credit_return_messages;
        session.credit_return_bytes = credit_return_bytes;
        session.replay_window_messages = replay_window_messages;
        session.replay_window_time = replay_window_time;
        session.replay_window_bytes = replay_window_bytes;
        session.replay_budget_bytes = replay_budget_bytes;
        config.max_connections_per_peer = max_connections_per_peer;
        config.handshake_timeout = handshake_timeout;
        config.max_sessions_per_caller = max_sessions_per_caller;
        config.max_body_bytes = max_body_bytes;
        config.max_inflight_body_bytes = max_inflight_body_bytes;
        config.body_read_timeout = body_read_timeout;
        config.max_inflight_answer_bytes = max_inflight_answer_bytes;
        config.write_timeout = write_timeout;
        config.max_tasks_per_client = max_tasks_per_client;
        config.max_task_bytes = max_task_bytes;
        config.max_task_bytes_per_client = max_task_bytes_per_client;
        config.task_ttl = task_ttl;
        config.task_attempts = task_attempts;
        config.request_state_ttl = request_state_ttl;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_servers_defaults() {
        // The documented defaults, checked against where they are defined.
        let limits = Limits::default();
        assert_eq!(limits.max_sessions, 10_000);
        assert_eq!(limits.max_message_bytes, 1024 * 1024);
        assert_eq!(limits.heartbeat_interval, Duration::from_secs(30));
        assert_eq!(limits.idle_timeout, Duration::from_secs(300));
        assert_eq!(limits.tool_timeout, None);
        assert_eq!(limits.max_connections_per_peer, Some(1024));
        assert_eq!(limits.max_body_bytes, 10 * 1024 * 1024);
        assert_eq!(limits.task_ttl, Duration::from_secs(30 * 60));
        assert_eq!(limits.task_attempts, 3);
        let mut config = Config::default();
        Limits::default().apply(&mut config);
        assert_eq!(
            format!("{config:?}"),
            format!("{:?}", Config::default()),
            "Limits::default() changes no setting of a default server"
        );
    }

    #[test]
    fn zero_durations_turn_the_heartbeat_and_idle_close_off() {
        let mut config = Config::default();
        Limits {
            heartbeat_interval: Duration::ZERO,
            idle_timeout: Duration::ZERO,
            tool_timeout: Some(Duration::from_secs(3)),
            max_connections_per_peer: None,
            ..Limits::default()
        }
        .apply(&mut config);
        assert_eq!(config.session.heartbeat_interval, None);
        assert_eq!(config.session.idle_timeout, None);
        assert_eq!(config.session.tool_timeout, Some(Duration::from_secs(3)));
        assert_eq!(config.max_connections_per_peer, None);
        assert!(config.validate().is_ok());
    }
}
