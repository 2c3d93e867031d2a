//! # Operating haip
//!
//! What a running server tells you: Prometheus metrics at `/metrics`, one
//! access-log line per call, `/health` and `/stats`; and how it stops. The
//! examples show all of it: `cargo run --example quickstart`, then
//! `curl -s http://127.0.0.1:8080/metrics`.
//!
//! ## Metrics
//!
//! With the `metrics` feature (on in the examples), `GET /metrics` serves
//! Prometheus metrics in the OpenMetrics text format, under the same rule as
//! `/stats` (a token when authentication is on). Without the feature nothing
//! is recorded. Scrape it:
//!
//! ```yaml
//! scrape_configs:
//!   - job_name: haip
//!     scrape_interval: 15s
//!     static_configs:
//!       - targets: ['127.0.0.1:8080']
//! ```
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `haip_tool_calls_started_total` | counter | `tool` | tool calls received (HAIP and MCP) |
//! | `haip_tool_calls_finished_total` | counter | `tool`, `outcome` (`ok`, `error`, `cancelled`, `timeout`, `panic`), `code` (of an `error`) | tool calls ended |
//! | `haip_tool_call_duration_seconds` | histogram | `tool` | from a call's arrival to its `TOOL_DONE` (or MCP result) |
//! | `haip_tool_call_queue_wait_seconds` | histogram | `tool` | from arrival to start, for calls that waited (large params validated off the session, or a place in the queue) |
//! | `haip_calls_in_flight` | gauge | | calls received and not ended yet |
//! | `haip_sessions` | gauge | `state` (`connected`, `parked`) | HAIP sessions on a connection, or parked awaiting resumption |
//! | `haip_connections` | gauge | `transport` (`websocket`, `sse`, `stream`, `relayed`) | open connections (`relayed`: served here for another instance) |
//! | `haip_connections_opened_total` | counter | | connections accepted since start |
//! | `haip_connections_closed_total` | counter | `reason` (`too_slow`, `idle`, `body_timeout`, `per_peer_cap`) | connections the server closed or refused |
//! | `haip_bytes_total` | counter | `direction` (`in`, `out`) | envelope bytes received from and written to clients |
//! | `haip_messages_received_total` | counter | | envelopes received |
//! | `haip_outbound_bytes` | gauge | | encoded envelopes waiting for sockets, all sessions |
//! | `haip_replay_bytes` | gauge | | bytes the replay windows hold |
//! | `haip_mcp_requests_total` | counter | `method` (MCP's methods, else `other`) | requests reaching `/mcp` |
//! | `haip_questions_total` | counter | `outcome` (`asked`, `answered`, `declined`, `cancelled`) | questions tools asked people, over HAIP and MCP (a question is asked when its answer is not there at once: a round's retry bringing it counts only the answer) |
//! | `haip_trace_spans_dropped_total` | counter | | spans not exported (queue full, collector slow or gone), with [traces](#traces) on |
//! | `haip_store_round_trips_total`, `haip_store_errors_total` | counter | | round trips to Redis, and those that failed or timed out ([several instances](super::several_instances)) |
//!
//! The histograms' buckets run from 100 µs, doubling, to about 100 s.
//! Labels stay bounded: a tool is a registered tool's name (`unknown` for a
//! call naming none), a code one compiled into the program (`OTHER` for one
//! made at run time), never client input. The per-call families are
//! recorded as calls go; the rest is read from the server's counters at each
//! scrape. What that costs is measured in `BENCHMARKS.md`
//! (`bash bench/metrics.sh`), and `tests/tests/metrics.rs` has a real
//! Prometheus scrape a server and reads the series back.
//!
//! To serve `/metrics` on an internal port instead of the server's, give it
//! one: `metrics_addr` (`HAIP_METRICS_ADDR`). That port serves `/metrics`
//! alone, without a token; the server's own port then answers `404` there.
//!
//! ```no_run
//! # #[cfg(feature = "metrics")]
//! # async fn demo() -> Result<(), haip::Error> {
//! let handle = haip::Server::builder()
//!     .metrics_addr("10.0.0.5:9464")
//!     .build()?
//!     .start()
//!     .await?;
//! println!("scrape http://{}/metrics", handle.metrics_addr().unwrap());
//! # Ok(()) }
//! ```
//!
//! ## Traces
//!
//! With the `otel` feature (on in the examples) and an OTLP endpoint
//! (`HAIP_OTLP_ENDPOINT`, else the standard `OTEL_EXPORTER_OTLP_ENDPOINT`,
//! or `otlp_endpoint`), every call gets a `tool.call` span, exported over
//! OTLP/HTTP (protobuf) to `{endpoint}/v1/traces`, under the service name
//! `OTEL_SERVICE_NAME` (default `haip`):
//!
//! ```sh
//! HAIP_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=my-tools cargo run --example quickstart
//! ```
//!
//! ```no_run
//! # #[cfg(feature = "otel")]
//! # fn demo() -> Result<(), haip::Error> {
//! let server = haip::Server::builder()
//!     .otlp_endpoint("http://127.0.0.1:4318")
//!     .trace_sampling(0.01) // one call in a hundred, unless the caller samples
//!     .build()?;
//! # Ok(()) }
//! ```
//!
//! - **Attributes** after the GenAI conventions for tool execution:
//!   `gen_ai.operation.name` (`execute_tool`), `gen_ai.tool.name`,
//!   `gen_ai.tool.call.id`, `network.protocol.name` (`haip`, `mcp`),
//!   `mcp.method.name` (`tools/call`, over MCP), `haip.transport`,
//!   `haip.session.id` / `mcp.session.id`, `haip.call.outcome` (`ok`,
//!   `error`, `cancelled`, `timeout`, `panic`) and, for a failure,
//!   `error.type` (its code) with an error status.
//! - **Children**: `tool.validate`, `tool.queue` (a call that waited before
//!   it ran), `tool.question` (each question, with `haip.question.outcome`),
//!   and `tools/call {tool}` (a client span) for an MCP import's call to the
//!   server it imports from.
//! - **The parent is the caller's**: a W3C `traceparent` (and `tracestate`)
//!   in the `_meta` of a HAIP `TOOL_CALL` payload
//!   ([the wire](super::the_wire), docs/protocol.md §6.15) or of an MCP request:
//!   `{"call_id": "c1", "tool": "echo", "params": {…}, "_meta":
//!   {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}`.
//!   An MCP import passes the call's context on in its own request's
//!   `_meta`, so a call through two haip servers is one trace. What a span
//!   keeps of the client is bounded: a call id is cut to 64 characters, a
//!   `tracestate` over 512 bytes is dropped.
//! - **Sampling**: every call by default; `HAIP_TRACE_SAMPLING=0.01` (or
//!   `OTEL_TRACES_SAMPLER_ARG`, `trace_sampling`) keeps one in a hundred of
//!   the calls that come without a `traceparent`, decided before any span
//!   is made (a call left out costs nothing more, and passes no context to
//!   an MCP import). A caller's `traceparent` decides for its calls: a
//!   sampled trace is always followed, an unsampled one never.
//! - **Export never holds a call up**: finished spans wait in a bounded
//!   queue (4 096) and go in batches of up to 512, every 500 ms, one export
//!   at a time (with the exporter's retries, 10 s at most). When the
//!   collector is slow or gone, spans are dropped and counted
//!   (`haip_trace_spans_dropped_total`). At shutdown what is queued is sent
//!   for up to 3 s.
//!
//! `tests/tests/traces.rs` receives the export with the official protobuf
//! definitions and checks the spans and their parents over HAIP, over MCP
//! and through an MCP import into a second server. What tracing costs per
//! call, at 100 % and 1 % sampling, is in `BENCHMARKS.md`.
//!
//! ## The access log
//!
//! Every call that ends logs one line: a `tracing` event, target
//! `haip::access`, at `info`, with `over` (`haip`, `mcp`, or `mcp-task`
//! for an MCP call run as a task), `tool`,
//! `call_id` (cut to 64 characters), `subject`, `outcome`, `code`,
//! `duration_ms` and `bytes` (of its `TOOL_DONE` or MCP result); never its
//! params or result. Turn it off in your subscriber's filter
//! (`haip::access=off`) when you do not want it.
//!
//! ## Logs
//!
//! haip logs through `tracing` and installs no subscriber: the application
//! chooses where logs go. The examples' (`haip_examples::init_logging`) log
//! to stderr, filtered by `HAIP_LOG` (`HAIP_LOG=debug`; the access log is
//! left out unless asked for: `HAIP_LOG=warn,haip::access=info`), one JSON
//! object per line with `HAIP_LOG_FORMAT=json`, and keep the MCP library's
//! own lines to `error` (it logs three lines per request at `info`, and one
//! per client mistake at `warn`).
//!
//! ## `/health` and `/stats`
//!
//! `GET /health` never needs a token and always answers `200`:
//!
//! ```json
//! {"status":"ok","uptime":12345,"activeConnections":5,"totalConnections":25,"errors":3,"warnings":0,
//!  "version":"1.1.2","timestamp":"2026-01-01T00:00:12.345Z","instance":"haip-3f2a…"}
//! ```
//!
//! `GET /stats` needs a token when authentication is on:
//!
//! | field | what |
//! |---|---|
//! | `uptime` | milliseconds since the server started listening |
//! | `activeConnections`, `totalConnections` | open connections (all transports), connections accepted since start |
//! | `totalMessages`, `messagesPerSecond` | envelopes received, and per second of uptime |
//! | `averageLatency` | mean milliseconds from `TOOL_CALL` to `TOOL_DONE` |
//! | `errorRate` | `ERROR` envelopes sent per message received |
//! | `toolExecutions` | `total`, `successful`, `failed`, `cancelled`, `active` (always `total = successful + failed + cancelled + active`) |
//! | `detachedSessions`, `outboundBytes`, `replayBytes` | sessions parked for resumption; the byte budgets in use ([limits](super::limits)) |
//! | `connectionsClosed` | `tooSlow`, `idle`, `bodyTimeout`, `perPeerCap` |
//! | `memoryUsage.rss` | resident set size in bytes, where the system tells it |
//! | `instance` | this instance's id |
//! | `cluster` | with Redis: `reachable`, the live `instances`, `totals` across them, `relayedConnections` |
//! | `oauth` | with OAuth: the issuer, the resource, the keys, `jwksFetches`, `introspections`, `cachedTokens` (active opaque tokens remembered), `refusedTokens` (refusals remembered, for 30 s at most), `introspecting` and `introspectionsWaiting` (now), `introspectionsShed` (unknown tokens refused without asking the issuer), of which `introspectionsShedPerPeer` (a peer over its budget) and `introspectionsShedQueueFull` |
//!
//! In `/health`, `errors` counts `ERROR` envelopes sent and `warnings` the
//! results that failed their tool's output schema.
//!
//! ## Stopping
//!
//! [`Server::run`] (and [`serve`]) serve until Ctrl-C or SIGTERM, then shut
//! down gracefully: stop accepting, cancel running calls (each still gets its
//! `TOOL_DONE`, `CANCELLED` with reason `server shutdown`; a tool that
//! ignores cancellation is aborted after `cancel_grace`), close WebSockets
//! with 1001 and end streams. [`Server::start`] serves in the background;
//! its [`ServerHandle::shutdown`] does the same on demand and returns once
//! every connection has closed and every call's task has stopped. With
//! Redis, an instance that stops hands its sessions over: their clients
//! resume on another instance.
//!
//! ## Memory
//!
//! The library leaves the allocator to the application. The examples and
//! the `haip` binary allocate with mimalloc, which returns freed memory to
//! the system, so the RSS comes down after a spike of large messages
//! (`examples/src/lib.rs` shows the two lines it takes). Idle sessions and
//! calls cost what `BENCHMARKS.md` measures.
//!
//! [`Server::run`]: crate::Server::run
//! [`Server::start`]: crate::Server::start
//! [`ServerHandle::shutdown`]: crate::ServerHandle::shutdown
//! [`serve`]: crate::serve
//!
//! ---
//!
//! Previous: [Settings, limits and budgets](super::limits) · Next: [Testing your tools](super::testing)
