//! # Middleware: layers around calls
//!
//! A rate limit per caller, an audit trail, error masking, a cache: things
//! every tool needs and no tool should write. A [`Layer`] runs around every
//! call, HAIP (`TOOL_CALL`) and MCP (`tools/call`) alike, and
//! [`ServerBuilder::layer`] adds one. The reference is the
//! [`haip::layer`](crate::layer) module; `examples/middleware.rs` serves
//! three tools behind all four ready-made layers and an audit line of its
//! own, and tests them with `haip::testing`.
//!
//! ## The four that come ready
//!
//! | layer | what it does | refuses with |
//! |---|---|---|
//! | [`RateLimit::per_subject`] | a token bucket per authenticated subject (`governor`); anonymous calls share one | `RATE_LIMITED`, `details.retry_after_ms` |
//! | [`ConcurrencyLimit::per_tool`] | at most N calls of each tool at once, the others wait (cancellable) | `RATE_LIMITED` beyond [`max_waiting`](crate::layer::ConcurrencyLimit::max_waiting) |
//! | [`Cache`] | results of tools marked `idempotent`, per subject, keyed by canonical params, bounded in bytes, least recently used dropped | — |
//! | [`MaskErrors`] | `TOOL_EXECUTION_ERROR` and `INTERNAL_ERROR` text replaced by a reference id; the original logged (target `haip::masked`) under it | — |
//!
//! ## Order
//!
//! The first layer added is the outermost: it sees the call first and the
//! outcome last. Put what refuses cheaply first (the rate limit), what
//! rewrites errors outside what produces them (masking outside the tools,
//! but inside an audit that should see the real codes), and the cache
//! innermost, so that a cached answer still counts against the rate limit.
//!
//! ```
//! use std::time::Duration;
//! use haip::layer::{Cache, Call, ConcurrencyLimit, MaskErrors, Next, RateLimit, from_fn};
//!
//! let builder = haip::Server::builder()
//!     .layer(RateLimit::per_subject(600, Duration::from_secs(60)).burst(50))
//!     .layer(from_fn(|call: Call, next: Next| async move {
//!         let tool = call.name().to_owned();
//!         let outcome = next.run(call).await;
//!         tracing::info!(tool, ok = outcome.is_ok(), "audit");
//!         outcome
//!     }))
//!     .layer(MaskErrors::new())
//!     .layer(ConcurrencyLimit::per_tool(8))
//!     .layer(Cache::new(32 << 20));
//! # drop(builder);
//! ```
//!
//! ## What a layer sees, and when
//!
//! A layer runs in the call's own task, after the call was admitted
//! (authentication, the tool's scopes, the session's limits on calls in
//! flight) and before its params are checked against the tool's input
//! schema. So it can refuse a call before any validation is paid for, and
//! fix up params a model got slightly wrong (a renamed field, a number sent
//! as a string): the params the last layer passes on are checked, and a call
//! still invalid then ends with `INVALID_PARAMS` exactly as it would
//! without layers (HAIP: `details` and `total`; MCP: the same text).
//!
//! The call's timeout and cancellation cover its layers; a layer waiting for
//! something (a place, a lock) should wait with
//! [`Context::cancelled`](crate::Context::cancelled) beside it, as
//! [`ConcurrencyLimit`] does. A tool that panics ends its call with
//! `INTERNAL_ERROR` without passing back through the layers.
//!
//! ## Writing one
//!
//! `impl Layer` with one `async fn call(&self, call, next)`, or
//! [`from_fn`] with an async closure. [`Call`] gives the tool (its name,
//! annotations, tags), the params (to read or rewrite) and the
//! [`Context`](crate::Context) (ids, caller, cancellation); [`Next::run`]
//! runs the rest and returns the outcome, a `Result<Value, ToolError>`.
//!
//! ```
//! use haip::layer::{Call, Layer, Next};
//! use haip::ToolError;
//! use serde_json::Value;
//!
//! /// Refuses tools tagged `admin` to callers without the `admin` scope.
//! struct AdminOnly;
//!
//! impl Layer for AdminOnly {
//!     async fn call(&self, call: Call, next: Next) -> Result<Value, ToolError> {
//!         let admin_tool = call.tool().tags().iter().any(|t| t == "admin");
//!         let admin = call.caller().is_some_and(|c| c.has_scope("admin"));
//!         if admin_tool && !admin {
//!             return Err(ToolError::new("FORBIDDEN", "admin tools need the admin scope"));
//!         }
//!         next.run(call).await
//!     }
//! }
//! ```
//!
//! ## Why haip's own trait, not tower's
//!
//! A tower `Service` takes `&mut self` and must be cloned for each call when
//! it is shared, and it has a readiness step no tool call needs (a call is
//! admitted before its layers run). haip's [`Layer`] takes `&self` and
//! boxes one future per layer. `bench/layers.sh` measures both shapes (the
//! table is in `BENCHMARKS.md`): in one thread, haip's costs about 120 ns
//! less per call at one layer and 50 ns less at four; over the wire the two
//! are within the noise of each other. haip's is the smaller to write (one
//! `async fn`), so it is the one the builder takes. A tower stack can
//! still be used, behind one haip layer that calls it: `examples/layer_shapes.rs`
//! does that.
//!
//! ## What it costs
//!
//! A server without layers has no stack at all: calls run as they always
//! did. One layer that passes calls on costs about 0.2 µs per call, 3 to 5 %
//! of an echo call's server CPU over the wire; the rate limit about the same
//! again (`BENCHMARKS.md`, "Layers").
//!
//! [`Layer`]: crate::layer::Layer
//! [`ServerBuilder::layer`]: crate::ServerBuilder::layer
//! [`RateLimit::per_subject`]: crate::layer::RateLimit::per_subject
//! [`ConcurrencyLimit::per_tool`]: crate::layer::ConcurrencyLimit::per_tool
//! [`ConcurrencyLimit`]: crate::layer::ConcurrencyLimit
//! [`Cache`]: crate::layer::Cache
//! [`MaskErrors`]: crate::layer::MaskErrors
//! [`from_fn`]: crate::layer::from_fn
//! [`Call`]: crate::layer::Call
//! [`Next::run`]: crate::layer::Next::run
