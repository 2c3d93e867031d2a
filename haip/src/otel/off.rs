//! The tracer and spans without the `otel` feature: the same API as
//! `on.rs`, every type empty and every method nothing, which the compiler
//! removes.

use std::time::SystemTime;

#[cfg(feature = "mcp-import")]
use serde_json::{Map, Value};

use crate::stats::{Door, Ended};

/// The server's tracer: always off.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tracer {}

impl Tracer {
    /// Whether spans are made at all: never.
    #[cfg(feature = "metrics")]
    pub(crate) fn on(&self) -> bool {
        false
    }

    /// Nothing to export.
    pub(crate) fn start_export(
        &self,
        _tasks: &tokio_util::task::TaskTracker,
        _shutdown: tokio_util::sync::CancellationToken,
    ) {
    }

    /// Spans dropped: none.
    #[cfg(feature = "metrics")]
    pub(crate) fn dropped(&self) -> u64 {
        0
    }

    /// No span.
    #[inline]
    pub(crate) fn call(
        &self,
        _tool: &str,
        _call_id: &dyn std::fmt::Display,
        _session: Option<&str>,
        _door: Door,
        _meta: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> CallSpan {
        CallSpan {}
    }
}

/// The span of one call: nothing.
#[derive(Debug, Default)]
pub(crate) struct CallSpan {}

impl CallSpan {
    /// Never a time: nothing is recorded.
    #[inline]
    pub(crate) fn mark(&self) -> Option<SystemTime> {
        None
    }

    /// Nothing.
    #[inline]
    pub(crate) fn child(&self, _name: &'static str, _since: Option<SystemTime>) {}

    /// Nothing.
    #[inline]
    pub(crate) fn since_start(&self, _name: &'static str) {}

    /// No question span.
    #[inline]
    pub(crate) fn question(&self) -> QuestionSpan {
        QuestionSpan {}
    }

    /// No trace to carry on.
    #[inline]
    pub(crate) fn link(&self) -> TraceLink {
        TraceLink {}
    }

    /// Nothing.
    #[inline]
    pub(crate) fn end(self, _ended: Ended) {}
}

/// A question's span: nothing.
#[derive(Debug, Default)]
pub(crate) struct QuestionSpan {}

impl QuestionSpan {
    /// Nothing.
    #[inline]
    pub(crate) fn end(self, _outcome: &'static str) {}
}

/// The trace a call runs in: none.
#[derive(Debug, Clone, Default)]
pub(crate) struct TraceLink {}

impl TraceLink {
    /// Never a time.
    #[inline]
    pub(crate) fn mark(&self) -> Option<SystemTime> {
        None
    }

    /// Nothing.
    #[inline]
    pub(crate) fn child(&self, _name: &'static str, _since: Option<SystemTime>) {}

    /// No question span.
    #[cfg(feature = "mcp")]
    pub(crate) fn question(&self) -> QuestionSpan {
        QuestionSpan {}
    }

    /// No span, and no `_meta` entries.
    #[cfg(feature = "mcp-import")]
    pub(crate) fn upstream(
        &self,
        _tool: &str,
        _server: &str,
    ) -> (UpstreamSpan, Map<String, Value>) {
        (UpstreamSpan {}, Map::new())
    }
}

/// An MCP import's call to the server it imports from: nothing.
#[cfg(feature = "mcp-import")]
#[derive(Debug, Default)]
pub(crate) struct UpstreamSpan {}

#[cfg(feature = "mcp-import")]
impl UpstreamSpan {
    /// Nothing.
    pub(crate) fn end(self, _error: Option<&str>) {}
}
