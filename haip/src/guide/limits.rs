//! # Settings, limits and budgets
//!
//! Every limit, size and duration of the server is a field of one value,
//! [`Limits`], given to the builder with [`ServerBuilder::limits`]: start
//! from `Limits::default()` (the protocol's defaults) and change the fields
//! you need. Every other setting (the address, switches, authentication,
//! CORS) is a [`ServerBuilder`] method; unset ones keep their defaults too.
//! [`build`](crate::ServerBuilder::build) rejects nonsensical values with an
//! error naming the setting (for a limit, its field).
//!
//! ```
//! use std::time::Duration;
//! use haip::Limits;
//!
//! let server = haip::Server::builder()
//!     .limits(Limits {
//!         max_inflight_calls: 16,
//!         tool_timeout: Some(Duration::from_secs(30)),
//!         max_outbound_bytes: 4 * 1024 * 1024,
//!         ..Limits::default()
//!     })
//!     .build()?;
//! let zero = haip::Server::builder()
//!     .limits(Limits { max_inflight_calls: 0, ..Limits::default() })
//!     .build();
//! assert!(zero.unwrap_err().to_string().contains("max_inflight_calls"));
//! # drop(server);
//! # Ok::<(), haip::Error>(())
//! ```
//!
//! [`limits`](crate::ServerBuilder::limits) takes the whole value: a second
//! call replaces the first, fields it does not name included. Code that
//! sets limits in several places passes one `Limits` along and changes its
//! fields.
//!
//! How the server holds up against each attack these bounds are for is
//! measured in `RELIABILITY.md` (`bash bench/reliability.sh`, driving
//! `examples/hostile`).
//!
//! ## Limits
//!
//! The fields of [`Limits`] that shape sessions and calls (the byte budgets
//! are in the next section; [`Limits`] documents each field):
//!
//! | field | default | what it does |
//! |---|---|---|
//! | `max_message_bytes` | 1 MiB | largest message (WebSocket message, NDJSON line, envelope of a POST) |
//! | `max_body_bytes` | 10 MiB | largest upstream POST body; larger ones get `413` |
//! | `max_sessions` | 10 000 | connected sessions (parked ones not counted); beyond, `503` or close 1013 |
//! | `max_sessions_per_caller` | 1000 | what one caller (its subject; unauthenticated, its peer address) may hold of the HAIP sessions, the MCP sessions, the MCP requests in flight and the listen streams ([Authentication](super::authentication#what-the-defaults-protect-against)) |
//! | `max_inflight_calls` / `max_queued_calls` | 64 / 256 per session | calls running / waiting (`QUEUED`); beyond, `RATE_LIMITED` |
//! | `tool_timeout` | `None` | for tools that set none themselves |
//! | `cancel_grace` | 5 s | how long a cancelled or timed-out tool may take to stop before it is aborted |
//! | `heartbeat_interval` | 30 s | the server's `PING`s (streams: at most 15 s); zero turns them off |
//! | `idle_timeout` | 5 min | see the budgets below; zero never closes |
//! | `replay_window_messages` / `replay_window_time` / `replay_window_bytes` | 1000 / 5 min / 1 MiB | the replay window; `replay_window_time` is also how long a lost session is kept |
//! | `max_concurrent_runs` | 10 | runs per session, advertised in `HAI` |
//! | `initial_credit_messages` / `initial_credit_bytes` | 1000 / 1 MiB | credit advertised per channel |
//! | `credit_return_messages` / `credit_return_bytes` | 5 / 256 KiB | when credit is returned (`FLOW_UPDATE`) |
//! | `max_outbound_queue` | 4096 envelopes per session | a client that lets more pile up is disconnected (1008 `outbound queue overflow`) |
//! | `request_state_ttl` | 10 min | `/mcp` questions without sessions ([MCP](super::mcp_both_ways#questions-without-sessions)) |
//! | `task_ttl` / `max_tasks_per_client` / `max_task_bytes` / `max_task_bytes_per_client` | 30 min / 100 / 64 MiB / 8 MiB | [MCP tasks](super::mcp_both_ways#tasks) |
//! | `task_attempts` | 3 | runs of a task of an idempotent tool when instances die ([several instances](super::several_instances#tasks-that-outlive-their-instance)) |
//!
//! ## Other settings
//!
//! Each is a [`ServerBuilder`] method of the same name:
//!
//! | setting | default | what it does |
//! |---|---|---|
//! | `addr` | `127.0.0.1:8080` | the listen address; port 0 picks a free one |
//! | `schema_profile` | `portable` | the [profile](super::schemas) tools are advertised in |
//! | `announce_running` | off | `TOOL_UPDATE RUNNING` when a call starts |
//! | `advertise_tools` | off | push `TOOL_LIST` to clients that list it in `accept_events`, after their `HAI` and after every registry change |
//! | `tool_schema_legacy_field` | off | `schema` beside `inputSchema` in `TOOL_SCHEMA` |
//! | `strict_envelope` | off | require the full envelope schema inbound; drop envelopes whose `seq` is not above the highest seen |
//! | `strict_flow_control` | off | enforce credit ([the wire](super::the_wire#flow-control)) |
//! | `strict_output_validation` | off | results violating the output schema become errors (else logged and counted) |
//! | `debug_errors` | off | panic texts in `INTERNAL_ERROR` messages; for development |
//! | `allow_unauthenticated` | off | serve a non-loopback address without authentication |
//! | `limit_loopback_peers` | off | hold loopback peers to `max_connections_per_peer` and the per-caller shares too |
//! | `cors_allowed_origins` / `allowed_hosts` | none / loopback names when bound to loopback, any when bound elsewhere | browser origins and `Host` names ([Authentication](super::authentication#what-the-defaults-protect-against)) |
//! | `request_state_key` | random per process | signs `/mcp` questions without sessions ([MCP](super::mcp_both_ways#questions-without-sessions)) |
//! | `mcp_endpoint` / `mcp_sessions` | on / on | `/mcp`, and whether a client that sends `initialize` gets an MCP session ([MCP](super::mcp_both_ways#sessions-for-older-clients-none-for-2026-07-28)) |
//! | `inspector` | off | the page at `/inspector` |
//!
//! ## Budgets
//!
//! A slow or hostile client costs a bounded amount of memory, and a client
//! that reads is not dropped for receiving a lot. Every buffer is bounded in
//! bytes, by these fields of [`Limits`]:
//!
//! | field | default | what happens at the bound |
//! |---|---|---|
//! | `max_outbound_bytes` | 8 MiB per session | above half of it the server stops reading that connection (TCP pushes back on the client; running calls go on); when more waits behind the envelope being written, the connection closes 1008 `too slow` and the session is kept for resumption |
//! | `max_outbound_message_bytes` | 16 MiB | a larger `TOOL_DONE` becomes `TOOL_DONE ERROR` code `RESULT_TOO_LARGE` with `details {size, limit}`; a larger progress update is dropped. At least three times `max_message_bytes`, so every reply to a message fits |
//! | `replay_budget_bytes` | 256 MiB for the server | all replay windows together; over it, detached sessions are evicted oldest first (their resumption then fails `unknown session`), then live windows give up their oldest envelopes |
//! | `max_violations` | 20 | `INVALID_PARAMS` lists the first 20 violations by path, each quoting at most 64 characters, plus `total` (`total_at_least` when counting stopped at 10 000) |
//! | `max_queued_bytes` | 16 MiB per session | params held by calls waiting to run; beyond, `RATE_LIMITED` |
//! | `max_inflight_body_bytes` | 128 MiB for the server | upstream POST bodies being read, and `/mcp` requests from their first byte until answered (at what they cost parsed, below); a request that would exceed it gets `503` with `Retry-After` |
//! | `body_read_timeout` | 30 s | an upstream POST body or an `/mcp` request body must arrive within it, and at 1 KiB/s or better after 10 s (also after `100 Continue`), else `408` and the connection closes. The long-lived body of an HTTP-streaming session is not such a body: `idle_timeout` and the budgets govern it |
//! | `max_inflight_answer_bytes` | 128 MiB for the server | `/mcp` answers not yet taken by their clients; while over it, a connection whose client has taken nothing for a second is closed |
//! | `write_timeout` | 30 s | an `/mcp` client that takes nothing of its answer for this long is disconnected (1 s when its connection holds more than `max_outbound_bytes`) |
//! | `handshake_timeout` | 10 s | request headers and the WebSocket upgrade |
//! | `idle_timeout` | 5 min | a connection with no inbound data (PONGs and WebSocket pongs count) closes 1001 `idle`, session kept |
//! | `max_connections_per_peer` | `Some(1024)` | per client IP (`None`: no limit); beyond, `503 TOO_MANY_SESSIONS` or close 1013; loopback is exempt (a local reverse proxy speaks for many clients) unless `limit_loopback_peers(true)` |
//!
//! Replays, resumptions and POSTs of many envelopes feed the outbox as the
//! socket drains, so none of them overflows it by itself. Params larger
//! than 64 KiB are validated off the connection's task, at most one per two
//! CPU cores at once (calls beyond wait, `QUEUED`). A `Content-Length` over
//! `max_body_bytes` is refused before any of the body is read. Every length
//! a client gives (`bin_len`, `Content-Length`, credits) is checked
//! arithmetic: an overflow is `INVALID_MESSAGE`, never a panic. `/stats`
//! reports `outboundBytes` (`/mcp` answers included), `replayBytes`,
//! `detachedSessions` and the connections closed for each reason
//! (`connectionsClosed`; an `/mcp` client not taking its answers counts as
//! `tooSlow`).
//!
//! ## MCP under the same budgets
//!
//! `/mcp` is held to the same budgets, before a request reaches the MCP
//! server. A request is one JSON-RPC message of at most `max_message_bytes`
//! (a longer `Content-Length` gets `413` before anything is read). It is
//! checked once, in a pass that builds nothing, and refused with the
//! JSON-RPC error a client expects: `-32700` for what is not JSON and
//! `-32600` for what is not one JSON-RPC message (both `400`, as are a
//! batch and a wrong `Content-Type`, `415`, or `Accept`, `406`), `-32601`
//! for a method name over 128 bytes, `-32602` for `tools/call` arguments
//! that are not an object, an unknown `logging/setLevel` level, or a
//! `progressToken` over 256 bytes (it would be repeated in every progress
//! notification). Errors quote at most 40 characters of what the client
//! sent, and the warnings a client can provoke are rate-limited (10 per
//! 10 s each, then one saying how many were left out).
//!
//! What a request costs parsed (at most 17 times its length: one JSON value
//! per two bytes of `[0,0,…]`) is what it holds of `max_inflight_body_bytes`
//! until its answer has gone. Messages over 64 KiB are checked on the
//! blocking pool and parsed with one of `max(1, cores / 2)` permits; their
//! params are validated off the runtime's workers like HAIP's. A result
//! whose answer would exceed `max_outbound_message_bytes` becomes an
//! `isError` result saying `RESULT_TOO_LARGE`.
//!
//! A browser `Origin` is refused with `403` (MCP's rule against DNS
//! rebinding, held on every route) unless it is the server's own, is in
//! `cors_allowed_origins`, or is a loopback origin on a loopback `Host`
//! (local tools, the MCP inspector); clients that are not browsers send
//! none and are not affected. A `Host` the server does not answer to gets
//! `403` too ([Authentication](super::authentication#what-the-defaults-protect-against)).
//!
//! ## From the environment
//!
//! [`ServerBuilder::from_env`] (which [`serve`](crate::serve) applies) reads:
//!
//! | variable | sets |
//! |---|---|
//! | `HAIP_ADDR` | `addr` |
//! | `HAIP_CORS_ALLOWED_ORIGINS`, `HAIP_ALLOWED_HOSTS` | `cors_allowed_origins`, `allowed_hosts` (comma-separated) |
//! | `HAIP_JWT_SECRET` | HS256 authentication with that secret (empty or under 32 bytes: a start-up error; feature `jwt`, without which it is a start-up error too) |
//! | `HAIP_ALLOW_UNAUTHENTICATED=1` | `allow_unauthenticated` |
//! | `HAIP_TOOL_SCHEMA_LEGACY=1` | `tool_schema_legacy_field` |
//! | `HAIP_SCHEMA_PROFILE` | `schema_profile` (an unknown name: a start-up error) |
//! | `HAIP_MCP_SESSIONS=0` (or `1`) | `mcp_sessions(false)` (or `true`; feature `mcp`) |
//! | `HAIP_REQUEST_STATE_KEY` | `request_state_key` |
//! | `HAIP_REDIS_URL`, `HAIP_INSTANCE_ID`, `HAIP_REDIS_WAIT` | `redis`, `instance_id`, `redis_wait` ([several instances](super::several_instances)) |
//! | `HAIP_OAUTH_ISSUER`, `HAIP_OAUTH_RESOURCE`, `HAIP_OAUTH_AUDIENCE`, `HAIP_OAUTH_CLIENT_ID`, `HAIP_OAUTH_CLIENT_SECRET` | `oauth` ([Authentication](super::authentication)) |
//!
//! The examples also read `HAIP_LOG` and `HAIP_LOG_FORMAT` for their logging
//! ([Operating haip](super::operating#logs)), and the `haip` command
//! `HAIP_TOKEN`.
//!
//! [`ServerBuilder`]: crate::ServerBuilder
//! [`ServerBuilder::limits`]: crate::ServerBuilder::limits
//! [`Limits`]: crate::Limits
//! [`ServerBuilder::from_env`]: crate::ServerBuilder::from_env
//!
//! ---
//!
//! Previous: [Several instances](super::several_instances) · Next: [Operating haip](super::operating)
