//! `GET /metrics` (feature `metrics`; `without_metrics.rs` takes this
//! file's place without it): the server's metrics in the Prometheus
//! (OpenMetrics) text format, for a Prometheus server to scrape, on the
//! server's own port or on one of its own (`metrics_addr`).
//!
//! The per-call families (`haip_tool_calls_*`, durations, queue waits, MCP
//! requests, questions) are recorded as calls go (`stats/metrics.rs`); the
//! rest is read from the server's counters (those behind `/stats`) at each
//! scrape, so it costs the calls nothing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use hyper::header::{self, HeaderValue};
use hyper::{Method, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::reply::{Body, full, not_found};
use super::with_redis::Cluster;
use crate::Error;
use crate::session::Shared;
use crate::stats::Door;

/// The `Content-Type` of the exposition.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Where `/metrics` is served: `metrics_addr` (`HAIP_METRICS_ADDR`), else
/// the server's own port.
#[derive(Clone, Default)]
pub(crate) struct MetricsConfig {
    pub(super) addr: Option<String>,
}

impl std::fmt::Debug for MetricsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.addr.fmt(f)
    }
}

impl MetricsConfig {
    /// `HAIP_METRICS_ADDR`.
    pub(super) fn set_from_env(&mut self, addr: String) {
        self.addr = Some(addr);
    }

    /// Whether the server's own port serves `/metrics` (else it answers `404` there).
    pub(super) fn on_main_port(&self) -> bool {
        self.addr.is_none()
    }
}

/// `/metrics` on a port of its own (`metrics_addr`), bound at start.
pub(super) struct Port(Option<TcpListener>);

impl Port {
    /// Binds `metrics_addr`, if set.
    pub(super) async fn bind(config: &MetricsConfig) -> Result<Port, Error> {
        let Some(addr) = &config.addr else {
            return Ok(Port(None));
        };
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind {
                addr: addr.clone(),
                source,
            })?;
        Ok(Port(Some(listener)))
    }

    /// The address bound, if any.
    pub(super) fn addr(&self) -> Result<Option<SocketAddr>, Error> {
        match &self.0 {
            Some(listener) => Ok(Some(listener.local_addr()?)),
            None => Ok(None),
        }
    }

    /// Serves `metrics` on the port bound, if any, on `tracker` until
    /// `shutdown`; `timeout`: the handshake timeout.
    pub(super) fn serve(
        self,
        metrics: &Arc<Metrics>,
        timeout: Duration,
        tracker: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<(), Error> {
        if let Some(listener) = self.0 {
            tracing::info!(addr = %listener.local_addr()?, "haip metrics at /metrics");
            tracker.spawn(serve_separately(
                listener,
                Arc::clone(metrics),
                timeout,
                tracker.clone(),
                shutdown,
            ));
        }
        Ok(())
    }
}

/// What `/metrics` shows: the call families and the server's counters.
pub(crate) struct Metrics {
    registry: Registry,
}

impl Metrics {
    pub(crate) fn new(shared: &Arc<Shared>, cluster: &Cluster) -> Metrics {
        let mut registry = Registry::with_prefix("haip");
        let calls = &shared.stats.metrics;
        registry.register(
            "tool_calls_started",
            "Tool calls received, by tool (HAIP and MCP)",
            calls.started.clone(),
        );
        registry.register(
            "tool_calls_finished",
            "Tool calls ended, by tool, outcome (ok, error, cancelled, timeout, panic) and error code",
            calls.finished.clone(),
        );
        registry.register(
            "tool_call_duration_seconds",
            "From a tool call's arrival to its end, by tool",
            calls.duration.clone(),
        );
        registry.register(
            "tool_call_queue_wait_seconds",
            "From a tool call's arrival until it starts running, for calls that waited (validation off the session, or the queue), by tool",
            calls.queue_wait.clone(),
        );
        registry.register(
            "mcp_requests",
            "Requests reaching /mcp, by JSON-RPC method",
            calls.mcp_requests.clone(),
        );
        registry.register(
            "questions",
            "Questions tools asked people (over HAIP and MCP), and how they were settled",
            calls.questions.clone(),
        );
        registry.register_collector(Box::new(Counters {
            shared: Arc::clone(shared),
            cluster: cluster.clone(),
        }));
        Metrics { registry }
    }

    /// The exposition, as of now.
    fn render(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        // Writing to a `String` cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The answer to `GET /metrics`: the exposition, as of now.
    pub(super) fn response(&self) -> Response<Body> {
        let mut response = Response::new(full(self.render()));
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        response
    }
}

/// The server's counters, read at each scrape.
struct Counters {
    shared: Arc<Shared>,
    /// The shared session store's round trips, with Redis.
    cluster: Cluster,
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counters").finish_non_exhaustive()
    }
}

/// What a metric the scrape reads is: a counter (it only rises) or a gauge.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn metric_type(self) -> MetricType {
        match self {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
        }
    }

    /// `value` as a metric of this kind.
    fn encode(self, value: u64, encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        match self {
            Kind::Counter => ConstCounter::new(value).encode(encoder),
            Kind::Gauge => {
                ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(encoder)
            }
        }
    }

    /// One metric of this kind: `name`, `help` and its `value`.
    fn one(
        self,
        encoder: &mut DescriptorEncoder<'_>,
        name: &str,
        help: &str,
        value: u64,
    ) -> Result<(), std::fmt::Error> {
        self.encode(
            value,
            encoder.encode_descriptor(name, help, None, self.metric_type())?,
        )
    }

    /// A family of this kind, one metric per row: `label` is the row's first
    /// part.
    fn by(
        self,
        encoder: &mut DescriptorEncoder<'_>,
        name: &str,
        help: &str,
        label: &str,
        rows: &[(&str, u64)],
    ) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(name, help, None, self.metric_type())?;
        for &(value_of, value) in rows {
            self.encode(value, family.encode_family(&[(label, value_of)])?)?;
        }
        Ok(())
    }
}

impl Collector for Counters {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let stats = &self.shared.stats;
        let ok = stats.calls_ok.load(Relaxed);
        let failed = stats.calls_failed.load(Relaxed);
        let cancelled = stats.calls_cancelled.load(Relaxed);
        let total = stats.calls_total.load(Relaxed).max(ok + failed + cancelled);
        Kind::Gauge.one(
            &mut encoder,
            "calls_in_flight",
            "Tool calls received and not ended yet",
            total - ok - failed - cancelled,
        )?;
        Kind::Gauge.by(
            &mut encoder,
            "sessions",
            "HAIP sessions: on a connection, or parked awaiting resumption",
            "state",
            &[
                ("connected", stats.active_connections.load(Relaxed)),
                ("parked", stats.detached_sessions.load(Relaxed)),
            ],
        )?;
        let by = |door: Door| stats.connections_on(door);
        Kind::Gauge.by(
            &mut encoder,
            "connections",
            "Open HAIP connections, by transport (relayed: served here for another instance)",
            "transport",
            &[
                ("websocket", by(Door::WebSocket)),
                ("sse", by(Door::Sse)),
                ("stream", by(Door::Stream)),
                ("relayed", stats.relayed_now()),
            ],
        )?;
        Kind::Counter.one(
            &mut encoder,
            "connections_opened",
            "HAIP connections accepted since start",
            stats.total_connections.load(Relaxed),
        )?;
        Kind::Counter.by(
            &mut encoder,
            "connections_closed",
            "Connections closed or refused by the server, by reason",
            "reason",
            &[
                ("too_slow", stats.closed_too_slow.load(Relaxed)),
                ("idle", stats.closed_idle.load(Relaxed)),
                ("body_timeout", stats.closed_body_timeout.load(Relaxed)),
                ("per_peer_cap", stats.refused_per_peer.load(Relaxed)),
            ],
        )?;
        Kind::Counter.by(
            &mut encoder,
            "bytes",
            "HAIP envelope bytes received from and written to clients",
            "direction",
            &[
                ("in", stats.traffic.bytes_in.load(Relaxed)),
                ("out", stats.traffic.bytes_out.load(Relaxed)),
            ],
        )?;
        Kind::Counter.one(
            &mut encoder,
            "messages_received",
            "HAIP envelopes received",
            stats.total_messages.load(Relaxed),
        )?;
        Kind::Gauge.one(
            &mut encoder,
            "outbound_bytes",
            "Encoded envelopes waiting for sockets, all sessions",
            stats.outbound_bytes.load(Relaxed),
        )?;
        Kind::Gauge.one(
            &mut encoder,
            "replay_bytes",
            "Bytes the sessions' replay windows hold",
            self.shared.replay.used(),
        )?;
        self.encode_exports(&mut encoder)
    }
}

impl Counters {
    /// What leaves the server beside its answers: spans of calls, and round
    /// trips to the shared session store.
    fn encode_exports(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        if self.shared.tracer.on() {
            Kind::Counter.one(
                encoder,
                "trace_spans_dropped",
                "Spans of calls not exported: the export queue was full or the collector failed",
                self.shared.tracer.dropped(),
            )?;
        }
        if let Some((trips, failed)) = self.cluster.round_trips() {
            Kind::Counter.one(
                encoder,
                "store_round_trips",
                "Round trips to the shared session store (Redis)",
                trips,
            )?;
            Kind::Counter.one(
                encoder,
                "store_errors",
                "Round trips to the shared session store that failed or timed out",
                failed,
            )?;
        }
        Ok(())
    }
}

/// Concurrent connections to a separate metrics port, at most.
const METRICS_CONNECTIONS: usize = 16;

/// Serves `GET /metrics` alone on `listener` (`metrics_addr`) until
/// `shutdown`: every other request is `404`. A client slower than the
/// handshake `timeout`, or beyond [`METRICS_CONNECTIONS`] at once, is dropped.
async fn serve_separately(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    timeout: Duration,
    tracker: TaskTracker,
    shutdown: CancellationToken,
) {
    use hyper::service::service_fn;
    use hyper_util::rt::{TokioIo, TokioTimer};
    let open = Arc::new(tokio::sync::Semaphore::new(METRICS_CONNECTIONS));
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::debug!(error = %e, "metrics port: accept failed");
                    continue;
                }
            },
            () = shutdown.cancelled() => return,
        };
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            continue; // dropped: enough scrapes at once
        };
        let metrics = Arc::clone(&metrics);
        let shutdown = shutdown.clone();
        tracker.spawn(async move {
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let response = if req.method() == Method::GET && req.uri().path() == "/metrics" {
                    metrics.response()
                } else {
                    not_found()
                };
                std::future::ready(Ok::<_, std::convert::Infallible>(response))
            });
            // One scrape per connection: an idle client holds no permit.
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(timeout)
                .max_buf_size(super::MAX_HTTP_BUF)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = shutdown.cancelled() => conn.as_mut().graceful_shutdown(),
            }
            drop(permit);
        });
    }
}
