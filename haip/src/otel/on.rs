//! The tracer and spans with the `otel` feature: each holds its live
//! counterpart (`live.rs`) when an OTLP endpoint is configured, and does
//! nothing otherwise.

use std::time::SystemTime;

use serde_json::{Map, Value};

use super::live::Tracing;
use crate::stats::{Door, Ended};

/// The server's tracer: off unless the feature is on and an OTLP endpoint
/// is configured. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Tracer {
    live: Option<Tracing>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer").field("on", &self.on()).finish()
    }
}

impl Tracer {
    /// A tracer exporting through `tracing`.
    pub(crate) fn new(tracing: Tracing) -> Tracer {
        Tracer {
            live: Some(tracing),
        }
    }

    /// Whether spans are made at all.
    pub(crate) fn on(&self) -> bool {
        self.live.is_some()
    }

    /// Starts exporting spans (once), on the server's `tasks`, until
    /// `shutdown`; then what is queued is sent, for a few seconds at most.
    pub(crate) fn start_export(
        &self,
        tasks: &tokio_util::task::TaskTracker,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        if let Some(exporter) = self.live.as_ref().and_then(Tracing::exporter) {
            tasks.spawn(exporter.run(shutdown));
        }
    }

    /// Spans dropped because the export queue was full or the collector
    /// failed (0 when off).
    #[cfg(feature = "metrics")]
    pub(crate) fn dropped(&self) -> u64 {
        if let Some(live) = &self.live {
            return live.dropped();
        }
        0
    }

    /// The span of a call of `tool` received now, the child of the
    /// `traceparent` in `meta` (the call's `_meta`) if it holds a valid one.
    #[inline]
    pub(crate) fn call(
        &self,
        tool: &str,
        call_id: &dyn std::fmt::Display,
        session: Option<&str>,
        door: Door,
        meta: Option<&Map<String, Value>>,
    ) -> CallSpan {
        if let Some(live) = &self.live {
            return CallSpan {
                live: live.call(tool, call_id, session, door, meta),
            };
        }
        CallSpan::default()
    }
}

/// The span of one call. Dropping it without [`end`](Self::end) ends it
/// without an outcome.
#[derive(Default)]
pub(crate) struct CallSpan {
    live: Option<Box<super::live::CallLive>>,
}

impl std::fmt::Debug for CallSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallSpan")
    }
}

impl CallSpan {
    /// Now, if the span is recorded (to time a child with); `None` otherwise,
    /// without reading the clock.
    #[inline]
    pub(crate) fn mark(&self) -> Option<SystemTime> {
        if let Some(live) = &self.live
            && live.recording()
        {
            return Some(SystemTime::now());
        }
        None
    }

    /// A child span `name` from `since` (a [`mark`](Self::mark)) to now.
    #[inline]
    pub(crate) fn child(&self, name: &'static str, since: Option<SystemTime>) {
        if let (Some(live), Some(since)) = (&self.live, since) {
            live.child(name, since);
        }
    }

    /// A child span `name` from the call's start to now (its wait in the
    /// queue).
    #[inline]
    pub(crate) fn since_start(&self, name: &'static str) {
        if let Some(live) = &self.live {
            live.since_start(name);
        }
    }

    /// A question the call asks, open until its [`QuestionSpan::end`].
    #[inline]
    pub(crate) fn question(&self) -> QuestionSpan {
        if let Some(live) = &self.live {
            return QuestionSpan {
                live: live.question(),
            };
        }
        QuestionSpan::default()
    }

    /// What the call's tool sees of the trace: its [`Context`](crate::Context)
    /// carries it on (to an MCP import's upstream call).
    #[inline]
    pub(crate) fn link(&self) -> TraceLink {
        if let Some(live) = &self.live {
            return TraceLink {
                live: Some(live.link()),
            };
        }
        TraceLink::default()
    }

    /// Ends the span with the call's outcome.
    #[inline]
    pub(crate) fn end(self, ended: Ended) {
        if let Some(live) = self.live {
            live.end(ended);
        }
    }
}

/// A question's span, open until it is answered, declined or cancelled.
#[derive(Default)]
pub(crate) struct QuestionSpan {
    live: Option<super::live::QuestionLive>,
}

impl std::fmt::Debug for QuestionSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuestionSpan")
    }
}

impl QuestionSpan {
    /// Ends it: `answered`, `declined` or `cancelled`.
    #[inline]
    pub(crate) fn end(self, outcome: &'static str) {
        if let Some(live) = self.live {
            live.end(outcome);
        }
    }
}

/// The trace a call runs in, as its tool's [`Context`](crate::Context)
/// carries it: the span to make children of, and the tracer to make them
/// with. Empty when tracing is off. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct TraceLink {
    live: Option<super::live::LinkLive>,
}

impl std::fmt::Debug for TraceLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TraceLink")
    }
}

impl TraceLink {
    /// Now, if the call's span is recorded (to time a child with); `None`
    /// otherwise, without reading the clock.
    #[inline]
    pub(crate) fn mark(&self) -> Option<SystemTime> {
        if let Some(live) = &self.live
            && live.recording()
        {
            return Some(SystemTime::now());
        }
        None
    }

    /// A child span `name` of the call's span, from `since` (a
    /// [`mark`](Self::mark)) to now.
    #[inline]
    pub(crate) fn child(&self, name: &'static str, since: Option<SystemTime>) {
        if let (Some(live), Some(since)) = (&self.live, since) {
            live.child(name, since);
        }
    }

    /// A question the call asks (through a peer: the MCP export's client),
    /// open until its [`QuestionSpan::end`].
    #[cfg(feature = "mcp")]
    pub(crate) fn question(&self) -> QuestionSpan {
        if let Some(live) = &self.live {
            return QuestionSpan {
                live: live.question(),
            };
        }
        QuestionSpan::default()
    }

    /// An upstream call's client span (`tools/call {tool}` to `server`),
    /// and the `_meta` entries that carry it to the server called
    /// (`traceparent`, `tracestate`). Without a trace, no span and no entries.
    #[cfg(feature = "mcp-import")]
    pub(crate) fn upstream(&self, tool: &str, server: &str) -> (UpstreamSpan, Map<String, Value>) {
        if let Some(live) = &self.live {
            let (span, meta) = live.upstream(tool, server);
            return (UpstreamSpan { live: Some(span) }, meta);
        }
        (UpstreamSpan::default(), Map::new())
    }
}

/// An MCP import's call to the server it imports from.
#[cfg(feature = "mcp-import")]
#[derive(Default)]
pub(crate) struct UpstreamSpan {
    live: Option<super::live::UpstreamLive>,
}

#[cfg(feature = "mcp-import")]
impl UpstreamSpan {
    /// Ends it: `None` when the upstream server answered a result, or what
    /// went wrong.
    pub(crate) fn end(self, error: Option<&str>) {
        if let Some(live) = self.live {
            live.end(error);
        }
    }
}
