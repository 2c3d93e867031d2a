//! Without the `metrics` feature, in `metrics.rs`'s place: the same names,
//! holding nothing. `/metrics` is a path like any other (`404`), and
//! `HAIP_METRICS_ADDR` set anyway is warned about.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::Response;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::reply::{Body, not_found};
use super::with_redis::Cluster;
use crate::Error;
use crate::session::Shared;

/// `/metrics` is not served anywhere.
#[derive(Debug, Clone, Default)]
pub(crate) struct MetricsConfig;

impl MetricsConfig {
    /// `HAIP_METRICS_ADDR`: said to serve nothing.
    pub(super) fn set_from_env(&mut self, addr: String) {
        tracing::warn!(%addr, "HAIP_METRICS_ADDR is set, but haip was built without its `metrics` feature: no /metrics");
    }

    /// The server's own port does not serve `/metrics` either.
    pub(super) fn on_main_port(&self) -> bool {
        false
    }
}

/// No port of its own.
pub(super) struct Port;

impl Port {
    /// Nothing to bind.
    pub(super) async fn bind(_config: &MetricsConfig) -> Result<Port, Error> {
        Ok(Port)
    }

    /// No address.
    pub(super) fn addr(&self) -> Result<Option<SocketAddr>, Error> {
        Ok(None)
    }

    /// Nothing to serve.
    pub(super) fn serve(
        self,
        _metrics: &Arc<Metrics>,
        _timeout: Duration,
        _tracker: &TaskTracker,
        _shutdown: CancellationToken,
    ) -> Result<(), Error> {
        Ok(())
    }
}

/// Nothing to show.
pub(crate) struct Metrics;

impl Metrics {
    pub(crate) fn new(_shared: &Arc<Shared>, _cluster: &Cluster) -> Metrics {
        Metrics
    }

    /// Never asked for ([`MetricsConfig::on_main_port`] is false).
    pub(super) fn response(&self) -> Response<Body> {
        not_found()
    }
}
