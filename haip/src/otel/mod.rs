//! Traces of tool calls (feature `otel`): one `tool.call` span per call,
//! with children for its validation, its wait in the queue, each question it
//! asks and an MCP import's upstream call. The parent is the caller's, from
//! a W3C `traceparent` in the call's `_meta` (docs/protocol.md §6.15; MCP's request
//! `_meta`); an MCP import passes the call's context on to the server it
//! calls. Spans are exported over OTLP/HTTP in batches by a task of the
//! server's; a call never waits for the export, and spans that find the
//! queue full are dropped and counted.
//!
//! One `cfg` chooses the types: `on.rs` with the feature (each type holds
//! its `live.rs` counterpart when an endpoint is configured, and does
//! nothing otherwise), `off.rs` without it (the same API, empty types the
//! compiler removes).

#[cfg(feature = "otel")]
mod live;
#[cfg(not(feature = "otel"))]
mod off;
#[cfg(feature = "otel")]
mod on;

#[cfg(feature = "otel")]
pub(crate) use live::{Settings, Tracing};
#[cfg(not(feature = "otel"))]
pub(crate) use off::{CallSpan, QuestionSpan, TraceLink, Tracer};
#[cfg(feature = "otel")]
pub(crate) use on::{CallSpan, QuestionSpan, TraceLink, Tracer};
