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
//! | `haip_questions_total` | counter | `outcome` (`asked`, `answered`, `declined`, `cancelled`) | questions tools asked people over HAIP |
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
//! ## The access log
//!
//! Every call that ends logs one line: a `tracing` event, target
//! `haip::access`, at `info`, with `over` (`haip` or `mcp`), `tool`,
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
//! | `oauth` | with OAuth: the issuer, the resource, the keys, `jwksFetches`, `introspections`, `cachedTokens` |
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
