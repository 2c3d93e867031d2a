//! What only `/metrics` counts (feature `metrics`): the call families the
//! runtime records into as calls end, start and ask, and the envelope bytes
//! to and from clients ([`Traffic`]). Everything else `/metrics` shows is
//! read from the server's counters when it is scraped (`server/metrics.rs`).
//!
//! Labels are bounded: a tool label is a registered tool's name (`unknown`
//! for a call naming none), an error code is one compiled into the program
//! (`OTHER` for one made at run time), an MCP method one of the known ones.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::hash::FastMap;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ToolLabels {
    pub(crate) tool: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FinishedLabels {
    pub(crate) tool: String,
    /// `ok`, `error`, `cancelled`, `timeout` or `panic`.
    pub(crate) outcome: &'static str,
    /// The error code of an `error` (empty otherwise).
    pub(crate) code: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct MethodLabels {
    pub(crate) method: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct QuestionLabels {
    /// `asked`, `answered`, `declined` or `cancelled`.
    pub(crate) outcome: &'static str,
}

/// Envelope bytes to and from clients, all connections.
#[derive(Debug, Default)]
pub(crate) struct Traffic {
    /// Received from clients.
    pub(crate) bytes_in: AtomicU64,
    /// Written to clients.
    pub(crate) bytes_out: AtomicU64,
}

type Histograms = Family<ToolLabels, Histogram, fn() -> Histogram>;

fn seconds() -> Histogram {
    // 100 µs to about 105 s, ×2 per bucket.
    Histogram::new(exponential_buckets(0.000_1, 2.0, 21))
}

/// A tool's series of the calls that end well (most calls), found by the
/// tool's name without building labels.
#[derive(Debug, Clone)]
struct Common {
    started: Counter,
    ok: Counter,
    duration: Histogram,
}

/// The per-call families. Cloning shares them (what the registry holds).
#[derive(Debug, Clone)]
pub(crate) struct CallMetrics {
    /// [`Common`] by tool: at most one entry per tool label.
    common: Arc<RwLock<FastMap<Box<str>, Common>>>,
    pub(crate) started: Family<ToolLabels, Counter>,
    pub(crate) finished: Family<FinishedLabels, Counter>,
    pub(crate) duration: Histograms,
    pub(crate) queue_wait: Histograms,
    pub(crate) mcp_requests: Family<MethodLabels, Counter>,
    pub(crate) questions: Family<QuestionLabels, Counter>,
}

impl Default for CallMetrics {
    fn default() -> CallMetrics {
        CallMetrics {
            common: Arc::default(),
            started: Family::default(),
            finished: Family::default(),
            duration: Family::new_with_constructor(seconds),
            queue_wait: Family::new_with_constructor(seconds),
            mcp_requests: Family::default(),
            questions: Family::default(),
        }
    }
}

impl CallMetrics {
    /// Runs `f` on `tool`'s [`Common`] series, made on its first call.
    fn common<R>(&self, tool: &str, f: impl FnOnce(&Common) -> R) -> R {
        {
            let common = self.common.read().unwrap_or_else(|e| e.into_inner());
            if let Some(series) = common.get(tool) {
                return f(series);
            }
        }
        let labels = ToolLabels {
            tool: tool.to_owned(),
        };
        let series = Common {
            started: self.started.get_or_create(&labels).clone(),
            ok: self
                .finished
                .get_or_create(&FinishedLabels {
                    tool: tool.to_owned(),
                    outcome: "ok",
                    code: "",
                })
                .clone(),
            duration: self.duration.get_or_create(&labels).clone(),
        };
        let out = f(&series);
        let mut common = self.common.write().unwrap_or_else(|e| e.into_inner());
        common.entry(Box::from(tool)).or_insert(series);
        out
    }

    pub(crate) fn started(&self, tool: &str) {
        self.common(tool, |series| series.started.inc());
    }

    pub(crate) fn finished(
        &self,
        tool: &str,
        outcome: &'static str,
        code: &'static str,
        latency: Option<Duration>,
    ) {
        if outcome == "ok" {
            self.common(tool, |series| {
                series.ok.inc();
                if let Some(latency) = latency {
                    series.duration.observe(latency.as_secs_f64());
                }
            });
            return;
        }
        let labels = FinishedLabels {
            tool: tool.to_owned(),
            outcome,
            code,
        };
        self.finished.get_or_create(&labels).inc();
        if let Some(latency) = latency {
            self.duration
                .get_or_create(&ToolLabels { tool: labels.tool })
                .observe(latency.as_secs_f64());
        }
    }

    pub(crate) fn waited(&self, tool: &str, wait: Duration) {
        self.queue_wait
            .get_or_create(&ToolLabels {
                tool: tool.to_owned(),
            })
            .observe(wait.as_secs_f64());
    }

    #[cfg(feature = "mcp")]
    pub(crate) fn mcp_request(&self, method: &str) {
        self.mcp_requests
            .get_or_create(&MethodLabels {
                method: mcp_method(method),
            })
            .inc();
    }

    pub(crate) fn question(&self, outcome: &'static str) {
        self.questions
            .get_or_create(&QuestionLabels { outcome })
            .inc();
    }
}

/// The label of an MCP method: one of those MCP defines, else `other`.
#[cfg(feature = "mcp")]
fn mcp_method(method: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "subscriptions/listen",
        "tasks/get",
        "tasks/list",
        "tasks/result",
        "tasks/cancel",
        "tasks/update",
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/roots/list_changed",
    ];
    KNOWN
        .iter()
        .copied()
        .find(|known| *known == method)
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_stay_bounded() {
        #[cfg(feature = "mcp")]
        {
            assert_eq!(mcp_method("tools/call"), "tools/call");
            assert_eq!(mcp_method("made/up/by/a/client"), "other");
        }
        let m = CallMetrics::default();
        m.finished("echo", "ok", "", Some(Duration::from_millis(3)));
        m.finished("echo", "ok", "", None);
        let count = m
            .finished
            .get_or_create(&FinishedLabels {
                tool: "echo".into(),
                outcome: "ok",
                code: "",
            })
            .get();
        assert_eq!(count, 2);
    }
}
