//! Traces of tool calls (feature `otel`): one `tool.call` span per call,
//! with children for its validation, its wait in the queue, each question it
//! asks and an MCP import's upstream call. The parent is the caller's, from
//! a W3C `traceparent` in the call's `_meta` (docs/protocol.md §6.15; MCP's request
//! `_meta`); an MCP import passes the call's context on to the server it
//! calls. Spans are exported over OTLP/HTTP in batches by a task of the
//! server's; a call never waits for the export, and spans that find the
//! queue full are dropped and counted.
//!
//! Without the feature, or without an endpoint, every type here is a no-op
//! the compiler removes.

use std::time::SystemTime;

use serde_json::{Map, Value};

use crate::stats::Ended;

#[cfg(feature = "otel")]
mod live;
#[cfg(feature = "otel")]
pub(crate) use live::{Settings, Tracing};

/// Which door a call came in by, for the span's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Door {
    /// A HAIP session over WebSocket.
    WebSocket,
    /// A HAIP session over SSE or HTTP streaming.
    Stream,
    /// MCP over `/mcp` (Streamable HTTP).
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    McpHttp,
    /// MCP over stdio.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    McpStdio,
}

impl Door {
    /// `network.protocol.name` and the transport, as the span says them.
    #[cfg_attr(not(feature = "otel"), allow(dead_code))]
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Door::WebSocket => ("haip", "websocket"),
            Door::Stream => ("haip", "http"),
            Door::McpHttp => ("mcp", "http"),
            Door::McpStdio => ("mcp", "pipe"),
        }
    }
}

/// The server's tracer: off unless the feature is on and an OTLP endpoint
/// is configured. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Tracer {
    #[cfg(feature = "otel")]
    live: Option<Tracing>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer").field("on", &self.on()).finish()
    }
}

impl Tracer {
    /// A tracer exporting through `tracing`.
    #[cfg(feature = "otel")]
    pub(crate) fn new(tracing: Tracing) -> Tracer {
        Tracer {
            live: Some(tracing),
        }
    }

    /// Whether spans are made at all.
    pub(crate) fn on(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.live.is_some();
        #[cfg(not(feature = "otel"))]
        false
    }

    /// Starts exporting spans (once), on the server's `tasks`, until
    /// `shutdown`; then what is queued is sent, for a few seconds at most.
    #[allow(unused_variables)]
    pub(crate) fn start_export(
        &self,
        tasks: &tokio_util::task::TaskTracker,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        #[cfg(feature = "otel")]
        if let Some(exporter) = self.live.as_ref().and_then(Tracing::exporter) {
            tasks.spawn(exporter.run(shutdown));
        }
    }

    /// Spans dropped because the export queue was full or the collector
    /// failed (0 when off).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn dropped(&self) -> u64 {
        #[cfg(feature = "otel")]
        if let Some(live) = &self.live {
            return live.dropped();
        }
        0
    }

    /// The span of a call of `tool` received now, the child of the
    /// `traceparent` in `meta` (the call's `_meta`) if it holds a valid one.
    #[allow(unused_variables)]
    #[inline]
    pub(crate) fn call(
        &self,
        tool: &str,
        call_id: &dyn std::fmt::Display,
        session: Option<&str>,
        door: Door,
        meta: Option<&Map<String, Value>>,
    ) -> CallSpan {
        #[cfg(feature = "otel")]
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
    #[cfg(feature = "otel")]
    live: Option<Box<live::CallLive>>,
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
        #[cfg(feature = "otel")]
        if let Some(live) = &self.live
            && live.recording()
        {
            return Some(SystemTime::now());
        }
        None
    }

    /// A child span `name` from `since` (a [`mark`](Self::mark)) to now.
    #[allow(unused_variables)]
    #[inline]
    pub(crate) fn child(&self, name: &'static str, since: Option<SystemTime>) {
        #[cfg(feature = "otel")]
        if let (Some(live), Some(since)) = (&self.live, since) {
            live.child(name, since);
        }
    }

    /// A child span `name` from the call's start to now (its wait in the
    /// queue).
    #[allow(unused_variables)]
    #[inline]
    pub(crate) fn since_start(&self, name: &'static str) {
        #[cfg(feature = "otel")]
        if let Some(live) = &self.live {
            live.since_start(name);
        }
    }

    /// A question the call asks, open until its [`QuestionSpan::end`].
    #[inline]
    pub(crate) fn question(&self) -> QuestionSpan {
        #[cfg(feature = "otel")]
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
        #[cfg(feature = "otel")]
        if let Some(live) = &self.live {
            return TraceLink {
                live: Some(live.link()),
            };
        }
        TraceLink::default()
    }

    /// Ends the span with the call's outcome.
    #[allow(unused_variables)]
    #[inline]
    pub(crate) fn end(self, ended: Ended) {
        #[cfg(feature = "otel")]
        if let Some(live) = self.live {
            live.end(ended);
        }
    }
}

/// A question's span, open until it is answered, declined or cancelled.
#[derive(Default)]
pub(crate) struct QuestionSpan {
    #[cfg(feature = "otel")]
    live: Option<live::QuestionLive>,
}

impl std::fmt::Debug for QuestionSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuestionSpan")
    }
}

impl QuestionSpan {
    /// Ends it: `answered`, `declined` or `cancelled`.
    #[allow(unused_variables)]
    #[inline]
    pub(crate) fn end(self, outcome: &'static str) {
        #[cfg(feature = "otel")]
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
    #[cfg(feature = "otel")]
    live: Option<live::LinkLive>,
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
        #[cfg(feature = "otel")]
        if let Some(live) = &self.live
            && live.recording()
        {
            return Some(SystemTime::now());
        }
        None
    }

    /// A child span `name` of the call's span, from `since` (a
    /// [`mark`](Self::mark)) to now.
    #[allow(unused_variables)]
    #[inline]
    pub(crate) fn child(&self, name: &'static str, since: Option<SystemTime>) {
        #[cfg(feature = "otel")]
        if let (Some(live), Some(since)) = (&self.live, since) {
            live.child(name, since);
        }
    }

    /// A question the call asks (through a peer: the MCP export's client),
    /// open until its [`QuestionSpan::end`].
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn question(&self) -> QuestionSpan {
        #[cfg(feature = "otel")]
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
    #[allow(unused_variables)]
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn upstream(&self, tool: &str, server: &str) -> (UpstreamSpan, Map<String, Value>) {
        #[cfg(feature = "otel")]
        if let Some(live) = &self.live {
            let (span, meta) = live.upstream(tool, server);
            return (UpstreamSpan { live: Some(span) }, meta);
        }
        (UpstreamSpan::default(), Map::new())
    }
}

/// An MCP import's call to the server it imports from.
#[derive(Default)]
pub(crate) struct UpstreamSpan {
    #[cfg(feature = "otel")]
    live: Option<live::UpstreamLive>,
}

impl UpstreamSpan {
    /// Ends it: `None` when the upstream server answered a result, or what
    /// went wrong.
    #[allow(unused_variables)]
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn end(self, error: Option<&str>) {
        #[cfg(feature = "otel")]
        if let Some(live) = self.live {
            live.end(error);
        }
    }
}
