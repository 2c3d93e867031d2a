//! `GET /metrics` (feature `metrics`): the server's metrics in the
//! Prometheus (OpenMetrics) text format, for a Prometheus server to scrape.
//!
//! The per-call families (`haip_tool_calls_*`, durations, queue waits, MCP
//! requests, questions) are recorded as calls go (`stats/metrics.rs`); the
//! rest is read from the server's counters (those behind `/stats`) at each
//! scrape, so it costs the calls nothing.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::session::Shared;
use crate::stats::Transport;

/// The `Content-Type` of the exposition.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What `/metrics` shows: the call families and the server's counters.
pub(crate) struct Metrics {
    registry: Registry,
}

impl Metrics {
    pub(crate) fn new(shared: &Arc<Shared>, store: Option<Arc<dyn StoreCounts>>) -> Metrics {
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
            store,
        }));
        Metrics { registry }
    }

    /// The exposition, as of now.
    pub(crate) fn render(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        // Writing to a `String` cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// What a shared session store counts of its own work (feature `redis`).
pub(crate) trait StoreCounts: Send + Sync + 'static {
    /// Round trips to the store, and those that failed.
    fn round_trips(&self) -> (u64, u64);
}

/// The server's counters, read at each scrape.
struct Counters {
    shared: Arc<Shared>,
    store: Option<Arc<dyn StoreCounts>>,
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counters").finish_non_exhaustive()
    }
}

fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for Counters {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let stats = &self.shared.stats;
        let ok = stats.calls_ok.load(Relaxed);
        let failed = stats.calls_failed.load(Relaxed);
        let cancelled = stats.calls_cancelled.load(Relaxed);
        let total = stats.calls_total.load(Relaxed).max(ok + failed + cancelled);
        gauge(
            &mut encoder,
            "calls_in_flight",
            "Tool calls received and not ended yet",
            total - ok - failed - cancelled,
        )?;
        let connections = stats.active_connections.load(Relaxed);
        let parked = stats.detached_sessions.load(Relaxed);
        {
            let zero = ConstGauge::new(0i64);
            let mut family = encoder.encode_descriptor(
                "sessions",
                "HAIP sessions: on a connection, or parked awaiting resumption",
                None,
                zero.metric_type(),
            )?;
            for (state, value) in [("connected", connections), ("parked", parked)] {
                let labels = [("state", state)];
                let value = i64::try_from(value).unwrap_or(i64::MAX);
                ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
            }
        }
        {
            let zero = ConstGauge::new(0i64);
            let mut family = encoder.encode_descriptor(
                "connections",
                "Open HAIP connections, by transport (relayed: served here for another instance)",
                None,
                zero.metric_type(),
            )?;
            let by = |t: Transport| stats.connections_on(t);
            let rows = [
                ("websocket", by(Transport::WebSocket)),
                ("sse", by(Transport::Sse)),
                ("stream", by(Transport::Stream)),
                ("relayed", stats.relayed_connections.load(Relaxed)),
            ];
            for (transport, value) in rows {
                let labels = [("transport", transport)];
                let value = i64::try_from(value).unwrap_or(i64::MAX);
                ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
            }
        }
        counter(
            &mut encoder,
            "connections_opened",
            "HAIP connections accepted since start",
            stats.total_connections.load(Relaxed),
        )?;
        {
            let zero = ConstCounter::new(0u64);
            let mut family = encoder.encode_descriptor(
                "connections_closed",
                "Connections closed or refused by the server, by reason",
                None,
                zero.metric_type(),
            )?;
            let rows = [
                ("too_slow", stats.closed_too_slow.load(Relaxed)),
                ("idle", stats.closed_idle.load(Relaxed)),
                ("body_timeout", stats.closed_body_timeout.load(Relaxed)),
                ("per_peer_cap", stats.refused_per_peer.load(Relaxed)),
            ];
            for (reason, value) in rows {
                let labels = [("reason", reason)];
                ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
            }
        }
        {
            let zero = ConstCounter::new(0u64);
            let mut family = encoder.encode_descriptor(
                "bytes",
                "HAIP envelope bytes received from and written to clients",
                None,
                zero.metric_type(),
            )?;
            let rows = [
                ("in", stats.bytes_in.load(Relaxed)),
                ("out", stats.bytes_out.load(Relaxed)),
            ];
            for (direction, value) in rows {
                let labels = [("direction", direction)];
                ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
            }
        }
        counter(
            &mut encoder,
            "messages_received",
            "HAIP envelopes received",
            stats.total_messages.load(Relaxed),
        )?;
        gauge(
            &mut encoder,
            "outbound_bytes",
            "Encoded envelopes waiting for sockets, all sessions",
            stats.outbound_bytes.load(Relaxed),
        )?;
        gauge(
            &mut encoder,
            "replay_bytes",
            "Bytes the sessions' replay windows hold",
            self.shared.replay.used(),
        )?;
        if self.shared.tracer.on() {
            counter(
                &mut encoder,
                "trace_spans_dropped",
                "Spans of calls not exported: the export queue was full or the collector failed",
                self.shared.tracer.dropped(),
            )?;
        }
        if let Some(store) = &self.store {
            let (trips, failed) = store.round_trips();
            counter(
                &mut encoder,
                "store_round_trips",
                "Round trips to the shared session store (Redis)",
                trips,
            )?;
            counter(
                &mut encoder,
                "store_errors",
                "Round trips to the shared session store that failed or timed out",
                failed,
            )?;
        }
        Ok(())
    }
}

#[cfg(feature = "redis")]
impl StoreCounts for crate::cluster::RedisSessionStore {
    fn round_trips(&self) -> (u64, u64) {
        crate::cluster::RedisSessionStore::round_trips(self)
    }
}

/// Concurrent connections to a separate metrics port, at most.
const METRICS_CONNECTIONS: usize = 16;

/// Serves `GET /metrics` alone on `listener` (`metrics_addr`) until
/// `shutdown`: every other request is `404`. A client slower than the
/// handshake timeout, or beyond [`METRICS_CONNECTIONS`] at once, is dropped.
pub(super) async fn serve_separately(
    listener: tokio::net::TcpListener,
    hub: Arc<super::Hub>,
    shutdown: tokio_util::sync::CancellationToken,
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
        let hub = Arc::clone(&hub);
        let timeout = hub.config.handshake_timeout;
        let shutdown = shutdown.clone();
        hub.tracker.clone().spawn(async move {
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let hub = Arc::clone(&hub);
                async move {
                    let response =
                        if req.method() == hyper::Method::GET && req.uri().path() == "/metrics" {
                            let mut response =
                                hyper::Response::new(super::reply::full(hub.metrics.render()));
                            response.headers_mut().insert(
                                hyper::header::CONTENT_TYPE,
                                hyper::header::HeaderValue::from_static(CONTENT_TYPE),
                            );
                            response
                        } else {
                            super::reply::not_found()
                        };
                    Ok::<_, std::convert::Infallible>(response)
                }
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
