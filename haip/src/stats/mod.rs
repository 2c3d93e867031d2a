use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use serde_json::{Value, json};

use crate::protocol::{ErrorCode, HAIP_VERSION, iso8601_millis, now_millis};

mod door;
#[cfg(feature = "metrics")]
pub(crate) mod metrics;

pub(crate) use door::Door;

/// The tool label of a call naming no registered tool (or one whose tool is
/// not known any more: lost with its instance).
pub(crate) const UNKNOWN_TOOL: &str = "unknown";

/// Server-wide counters behind `/health` and `/stats` (docs/protocol.md §16).
#[derive(Debug)]
pub(crate) struct Stats {
    started: Instant,
    pub(crate) active_connections: AtomicU64,
    pub(crate) total_connections: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) warnings: AtomicU64,
    pub(crate) total_messages: AtomicU64,
    /// Sessions kept after their connection was lost, awaiting resumption.
    pub(crate) detached_sessions: AtomicU64,
    pub(crate) calls_total: AtomicU64,
    pub(crate) calls_ok: AtomicU64,
    pub(crate) calls_failed: AtomicU64,
    pub(crate) calls_cancelled: AtomicU64,
    /// Encoded envelopes waiting for sockets, all sessions (docs/protocol.md §18.1).
    pub(crate) outbound_bytes: AtomicU64,
    /// Connections closed because the client did not read fast enough.
    pub(crate) closed_too_slow: AtomicU64,
    /// Connections closed after `idle_timeout` without inbound data.
    pub(crate) closed_idle: AtomicU64,
    /// Upstream POSTs answered `408` (body too slow).
    pub(crate) closed_body_timeout: AtomicU64,
    /// Connections refused beyond `max_connections_per_peer`.
    pub(crate) refused_per_peer: AtomicU64,
    /// Open HAIP connections by door ([`Door::haip_index`]).
    connections: [AtomicU64; Door::HAIP_DOORS],
    latency_micros_sum: AtomicU64,
    latency_count: AtomicU64,
    /// Of the connections counted, those another instance relays here.
    #[cfg(feature = "redis")]
    relayed: Relayed,
    /// Envelope bytes to and from clients.
    #[cfg(feature = "metrics")]
    pub(crate) traffic: metrics::Traffic,
    /// What `/metrics` counts per tool.
    #[cfg(feature = "metrics")]
    pub(crate) metrics: metrics::CallMetrics,
}

/// Connections another instance relays here: their clients are connected
/// there, and counted there too (feature `redis`).
#[cfg(feature = "redis")]
#[derive(Debug, Default)]
struct Relayed {
    /// Open now.
    open: AtomicU64,
    /// Opened since start.
    total: AtomicU64,
}

/// A client's value in a log line, cut after [`Brief::CHARS`] characters:
/// a call id is the client's to choose, and may be long.
pub(crate) struct Brief<'a>(pub(crate) &'a dyn std::fmt::Display);

impl Brief<'_> {
    const CHARS: usize = 64;
}

impl std::fmt::Display for Brief<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.0.to_string();
        match text.char_indices().nth(Self::CHARS) {
            Some((end, _)) => write!(f, "{}…", &text[..end]),
            None => f.write_str(&text),
        }
    }
}

/// How a call ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Ok,
    /// `TOOL_DONE ERROR` with this code.
    Failed(&'static str),
    Cancelled,
    /// Its timeout elapsed (`TIMEOUT`).
    TimedOut,
    /// The tool panicked (`INTERNAL_ERROR`).
    Panicked,
}

impl Ended {
    /// A failure with `code` (a code made at run time counts as `OTHER`).
    pub(crate) fn failed(code: &ErrorCode) -> Ended {
        Ended::Failed(code.label())
    }

    /// The `outcome` label of `/metrics` and of the access log.
    pub(crate) fn outcome(self) -> &'static str {
        match self {
            Ended::Ok => "ok",
            Ended::Failed(_) => "error",
            Ended::Cancelled => "cancelled",
            Ended::TimedOut => "timeout",
            Ended::Panicked => "panic",
        }
    }
}

impl Stats {
    pub(crate) fn new() -> Stats {
        Stats {
            started: Instant::now(),
            active_connections: AtomicU64::new(0),
            total_connections: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            warnings: AtomicU64::new(0),
            total_messages: AtomicU64::new(0),
            detached_sessions: AtomicU64::new(0),
            calls_total: AtomicU64::new(0),
            calls_ok: AtomicU64::new(0),
            calls_failed: AtomicU64::new(0),
            calls_cancelled: AtomicU64::new(0),
            outbound_bytes: AtomicU64::new(0),
            closed_too_slow: AtomicU64::new(0),
            closed_idle: AtomicU64::new(0),
            closed_body_timeout: AtomicU64::new(0),
            refused_per_peer: AtomicU64::new(0),
            connections: Default::default(),
            latency_micros_sum: AtomicU64::new(0),
            latency_count: AtomicU64::new(0),
            #[cfg(feature = "redis")]
            relayed: Relayed::default(),
            #[cfg(feature = "metrics")]
            traffic: metrics::Traffic::default(),
            #[cfg(feature = "metrics")]
            metrics: metrics::CallMetrics::default(),
        }
    }

    /// A HAIP connection by `door` opened; [`Stats::disconnected`] follows.
    pub(crate) fn connected(&self, door: Door) {
        if let Some(i) = door.haip_index() {
            self.connections[i].fetch_add(1, Relaxed);
        }
    }

    pub(crate) fn disconnected(&self, door: Door) {
        if let Some(i) = door.haip_index() {
            self.connections[i].fetch_sub(1, Relaxed);
        }
    }

    /// HAIP connections open by `door`.
    #[cfg(feature = "metrics")]
    pub(crate) fn connections_on(&self, door: Door) -> u64 {
        door.haip_index()
            .map_or(0, |i| self.connections[i].load(Relaxed))
    }

    /// A call of `tool` (a registered tool's name, or [`UNKNOWN_TOOL`]) was
    /// received.
    pub(crate) fn call_started(&self, tool: &str) {
        self.calls_total.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics.started(tool);
        #[cfg(not(feature = "metrics"))]
        let _ = tool;
    }

    /// A call of `tool` starts running, `wait` after it was received
    /// (validation and its place in the queue).
    #[cfg(feature = "metrics")]
    pub(crate) fn call_waited(&self, tool: &str, wait: std::time::Duration) {
        self.metrics.waited(tool, wait);
    }

    /// A request for MCP `method` reached `/mcp`.
    #[cfg(feature = "mcp")]
    #[allow(unused_variables)]
    pub(crate) fn mcp_request(&self, method: &str) {
        #[cfg(feature = "metrics")]
        self.metrics.mcp_request(method);
    }

    /// A question to a person: `asked`, `answered`, `declined` or `cancelled`.
    #[allow(unused_variables)]
    pub(crate) fn question(&self, outcome: &'static str) {
        #[cfg(feature = "metrics")]
        self.metrics.question(outcome);
    }

    /// One line of the access log (target `haip::access`, at `info`) for a
    /// call that ended: who called which tool, how it ended, how long it
    /// took, and the size of its `TOOL_DONE` (or MCP result). Never its
    /// params or result.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn access(
        &self,
        over: &'static str,
        tool: &str,
        call_id: &dyn std::fmt::Display,
        subject: Option<&str>,
        ended: Ended,
        latency: std::time::Duration,
        bytes: usize,
    ) {
        let code = match ended {
            Ended::Failed(code) => code,
            Ended::TimedOut => "TIMEOUT",
            Ended::Panicked => "INTERNAL_ERROR",
            _ => "",
        };
        tracing::info!(
            target: "haip::access",
            over,
            tool,
            call_id = %Brief(call_id),
            subject = subject.unwrap_or(""),
            outcome = ended.outcome(),
            code,
            duration_ms = latency.as_secs_f64() * 1000.0,
            bytes,
            "call"
        );
    }

    /// A call of `tool` ended, `latency` after it was received.
    pub(crate) fn call_ended(
        &self,
        tool: &str,
        ended: Ended,
        latency: Option<std::time::Duration>,
    ) {
        #[cfg(feature = "metrics")]
        {
            let code = match ended {
                Ended::Failed(code) => code,
                _ => "",
            };
            self.metrics.finished(tool, ended.outcome(), code, latency);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = tool;
        match ended {
            Ended::Ok => &self.calls_ok,
            Ended::Failed(_) | Ended::TimedOut | Ended::Panicked => &self.calls_failed,
            Ended::Cancelled => &self.calls_cancelled,
        }
        .fetch_add(1, Relaxed);
        if let Some(latency) = latency {
            self.latency_micros_sum
                .fetch_add(latency.as_micros() as u64, Relaxed);
            self.latency_count.fetch_add(1, Relaxed);
        }
    }

    fn uptime_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub(crate) fn health(&self) -> Value {
        json!({
            "status": "ok",
            "uptime": self.uptime_ms(),
            "activeConnections": self.active_connections.load(Relaxed),
            "totalConnections": self.total_connections.load(Relaxed),
            "errors": self.errors.load(Relaxed),
            "warnings": self.warnings.load(Relaxed),
            "version": HAIP_VERSION,
            "timestamp": iso8601_millis(now_millis()),
        })
    }

    /// The `/stats` body; `replay_bytes` is what all replay windows hold.
    pub(crate) fn stats(&self, replay_bytes: u64) -> Value {
        let uptime = self.uptime_ms();
        let messages = self.total_messages.load(Relaxed);
        let errors = self.errors.load(Relaxed);
        // Read the end counters before the total, so `active` never underflows.
        let ok = self.calls_ok.load(Relaxed);
        let failed = self.calls_failed.load(Relaxed);
        let cancelled = self.calls_cancelled.load(Relaxed);
        let total = self.calls_total.load(Relaxed).max(ok + failed + cancelled);
        let latency_count = self.latency_count.load(Relaxed);
        let average_latency = if latency_count == 0 {
            0.0
        } else {
            self.latency_micros_sum.load(Relaxed) as f64 / latency_count as f64 / 1000.0
        };
        let mut stats = json!({
            "totalConnections": self.total_connections.load(Relaxed),
            "activeConnections": self.active_connections.load(Relaxed),
            "totalMessages": messages,
            "messagesPerSecond": if uptime < 1000 { 0.0 } else { messages as f64 / (uptime as f64 / 1000.0) },
            "averageLatency": average_latency,
            "errorRate": if messages == 0 { 0.0 } else { errors as f64 / messages as f64 },
            "uptime": uptime,
            "detachedSessions": self.detached_sessions.load(Relaxed),
            "outboundBytes": self.outbound_bytes.load(Relaxed),
            "replayBytes": replay_bytes,
            "connectionsClosed": {
                "tooSlow": self.closed_too_slow.load(Relaxed),
                "idle": self.closed_idle.load(Relaxed),
                "bodyTimeout": self.closed_body_timeout.load(Relaxed),
                "perPeerCap": self.refused_per_peer.load(Relaxed),
            },
            "toolExecutions": {
                "total": total,
                "successful": ok,
                "failed": failed,
                "cancelled": cancelled,
                "active": total - ok - failed - cancelled,
            },
        });
        if let Some(rss) = resident_set_bytes() {
            stats["memoryUsage"] = json!({ "rss": rss });
        }
        stats
    }
}

/// The connections other instances relay here.
#[cfg(feature = "redis")]
impl Stats {
    /// A connection another instance relays here opened (counted in
    /// [`Stats::active_connections`] too); [`Stats::relay_closed`] follows.
    pub(crate) fn relay_opened(&self) {
        self.relayed.open.fetch_add(1, Relaxed);
        self.relayed.total.fetch_add(1, Relaxed);
    }

    /// A relayed connection closed.
    pub(crate) fn relay_closed(&self) {
        self.relayed.open.fetch_sub(1, Relaxed);
    }

    /// Relayed connections open now.
    pub(crate) fn relayed_now(&self) -> u64 {
        self.relayed.open.load(Relaxed)
    }

    /// Relayed connections opened since start.
    pub(crate) fn relayed_total(&self) -> u64 {
        self.relayed.total.load(Relaxed)
    }
}

/// Without the feature `redis` no instance relays connections here.
#[cfg(all(feature = "metrics", not(feature = "redis")))]
impl Stats {
    pub(crate) fn relayed_now(&self) -> u64 {
        0
    }
}

/// Resident set size of this process, where the platform tells it.
fn resident_set_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// A warning a client can cause again and again (a result too large, a
/// client that does not read): at most [`Throttle::BURST`] per
/// [`Throttle::WINDOW`] reach the log, and the next one let through says how
/// many were left out. One `static` per kind of warning.
///
/// ```text
/// static TOO_LARGE: Throttle = Throttle::new();
/// if let Some(suppressed) = TOO_LARGE.allow() {
///     tracing::warn!(suppressed, "tool result too large to send");
/// }
/// ```
#[derive(Debug)]
pub(crate) struct Throttle {
    /// Start of the current window, in ms since [`epoch`].
    window: AtomicU64,
    /// Warnings let through in the current window.
    count: AtomicU64,
    /// Warnings left out since the last one let through.
    suppressed: AtomicU64,
}

/// The clock [`Throttle`]s read.
fn epoch() -> &'static Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now)
}

impl Throttle {
    /// Warnings let through per window.
    pub(crate) const BURST: u64 = 10;
    /// The window, in ms.
    pub(crate) const WINDOW: u64 = 10_000;

    pub(crate) const fn new() -> Throttle {
        Throttle {
            window: AtomicU64::new(0),
            count: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(left out since the last one)` when this warning may be logged.
    pub(crate) fn allow(&self) -> Option<u64> {
        self.allow_at(epoch().elapsed().as_millis() as u64)
    }

    fn allow_at(&self, now: u64) -> Option<u64> {
        let window = self.window.load(Relaxed);
        if now.saturating_sub(window) >= Self::WINDOW
            && self
                .window
                .compare_exchange(window, now, Relaxed, Relaxed)
                .is_ok()
        {
            self.count.store(0, Relaxed);
        }
        if self.count.fetch_add(1, Relaxed) < Self::BURST {
            Some(self.suppressed.swap(0, Relaxed))
        } else {
            self.suppressed.fetch_add(1, Relaxed);
            None
        }
    }
}

#[cfg(test)]
mod throttle_tests {
    use super::Throttle;

    #[test]
    fn a_burst_per_window_then_the_count_of_what_was_left_out() {
        let t = Throttle::new();
        let allowed = (0..25).filter(|_| t.allow_at(1).is_some()).count() as u64;
        assert_eq!(allowed, Throttle::BURST);
        assert_eq!(t.allow_at(Throttle::WINDOW / 2), None, "same window");
        assert_eq!(t.allow_at(Throttle::WINDOW + 1), Some(16));
        assert_eq!(t.allow_at(Throttle::WINDOW + 2), Some(0));
    }
}
