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
//! | [`RateLimit::per_subject`] | a token bucket per authenticated subject (GCRA); anonymous calls share one; at most [`max_subjects`](crate::layer::RateLimit::max_subjects) partly used buckets held, a new caller refused only while all of them are | `RATE_LIMITED`, `details.retry_after_ms` (and `details.reason` `"too_many_callers"` for a new caller refused) |
//! | [`ConcurrencyLimit::per_tool`] | at most N calls of each tool at once, the others wait (cancellable) | `RATE_LIMITED` beyond [`max_waiting`](crate::layer::ConcurrencyLimit::max_waiting) |
//! | [`Cache`] | results of tools marked `idempotent`, per authorization (subject, scopes, claims: [below](#what-the-cache-keys-on)), keyed by canonical params, bounded in bytes, least recently used dropped | — |
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
//! <!-- excerpt of examples/middleware.rs -->
//! ```
//! use std::time::{Duration, Instant};
//! #
//! use haip::layer::{Cache, Call, ConcurrencyLimit, MaskErrors, Next, RateLimit, from_fn};
//! # use haip::{ServerBuilder, haip_tool};
//! # /// A rate.
//! # #[haip_tool(idempotent)]
//! # async fn exchange_rate() -> f64 { 1.0 }
//! # /// A charge.
//! # #[haip_tool]
//! # async fn charge() -> bool { true }
//! # /// A report.
//! # #[haip_tool]
//! # async fn render_report() -> u32 { 1 }
//! #
//! /// The tools, behind the layers: outermost first.
//! fn server() -> ServerBuilder {
//!     haip::Server::builder()
//!         .tools([exchange_rate::tool(), charge::tool(), render_report::tool()])
//!         // Refuse early: 30 calls a minute per caller, 10 of them at once.
//!         .layer(RateLimit::per_subject(30, Duration::from_secs(60)).burst(10))
//!         // One line per call, with what the caller saw.
//!         .layer(from_fn(|call: Call, next: Next| async move {
//!             let (tool, who) = (call.name().to_owned(), call.subject().map(str::to_owned));
//!             let started = Instant::now();
//!             let outcome = next.run(call).await;
//!             let code = outcome.as_ref().err().map(|e| e.code().to_string());
//!             tracing::info!(tool, who, ?code, took = ?started.elapsed(), "call");
//!             outcome
//!         }))
//!         // Internal error text stays in the log; the caller gets a reference.
//!         .layer(MaskErrors::new())
//!         // Reports are heavy: two at once, the others told to come back.
//!         .layer(ConcurrencyLimit::per_tool(2).max_waiting(0))
//!         // Idempotent tools answered again for a minute, within 8 MiB.
//!         .layer(Cache::new(8 << 20).ttl(Duration::from_secs(60)))
//! }
//! # drop(server());
//! ```
//!
//! ## What the cache keys on
//!
//! A cached result must not reach a caller it was not computed for: a tool
//! may read anything of its [`Caller`](crate::auth::Caller) (the subject,
//! the scopes, a claim naming a tenant), so by default [`Cache`] keys on all
//! of it: the subject, the sorted scopes, and every claim of the token but
//! those that change with each token issued to the same caller
//! ([`Cache::PER_TOKEN_CLAIMS`]: `exp`, `iat`, `nbf`, `jti`, `auth_time`,
//! `nonce`, `at_hash`, `c_hash`, `s_hash`). A caller with fewer scopes, or
//! another tenant, gets its own result; the same caller with a renewed token
//! gets the one already computed. Each part of the key is length-prefixed,
//! so no two authorizations can share one.
//!
//! When an identity provider adds claims of its own that change per token
//! (a session id, a vendor's token id), every renewed token would miss;
//! [`key_claims`](crate::layer::Cache::key_claims) names the claims the
//! tools read instead (the subject and the scopes stay in the key), and
//! [`shared`](crate::layer::Cache::shared) keys on nothing of the caller,
//! for tools whose results do not depend on who asks:
//!
//! ```
//! use haip::layer::Cache;
//!
//! let per_tenant = Cache::new(32 << 20).key_claims(["tenant"]);
//! let for_everyone = Cache::new(8 << 20).shared();
//! # drop((per_tenant, for_everyone));
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
//! [`Cache::PER_TOKEN_CLAIMS`]: crate::layer::Cache::PER_TOKEN_CLAIMS
//! [`MaskErrors`]: crate::layer::MaskErrors
//! [`from_fn`]: crate::layer::from_fn
//! [`Call`]: crate::layer::Call
//! [`Next::run`]: crate::layer::Next::run
//!
//! ---
//!
//! Previous: [The CLI and the inspector](super::cli_and_inspector) · Next: [Composing tools](super::compose)
