//! # Transports and the wire
//!
//! Every HAIP rule the server keeps, in one place: the transports, the
//! envelope, the handshake, tool calls, replay and resumption, flow
//! control, errors. Section numbers (§) are those of HAIP 1, which the
//! code's comments cite. The rule of thumb: accept the loose traffic real
//! clients send, and send only envelopes that follow the protocol's schema.
//! [`crate::protocol`] is the wire model itself (decoding, encoding, every
//! payload type), without I/O.
//!
//! Try each transport against the quickstart (`cargo run --example
//! quickstart`) with the commands below; `tests/tests/wire.rs` and
//! `tests/tests/transports.rs` check every rule here through a real socket.
//!
//! ## Transports
//!
//! Every transport (§15) carries the same envelopes, session logic, tools and
//! limits. Streams are flushed envelope by envelope, never compressed or
//! buffered.
//!
//! | route | what |
//! |---|---|
//! | `GET /`, `/haip`, `/haip/websocket` (upgrade) | WebSocket: one envelope per text message; `haip` subprotocol selected when offered. Without an upgrade: `426` |
//! | `GET /haip/sse` | SSE: one `data: <json>` event per envelope (no `event:` or `id:` lines), `X-HAIP-Session` header |
//! | `POST /haip/stream` | HTTP streaming: NDJSON both ways on one request; the request body is read line by line as it arrives |
//! | `GET /haip/stream` | the server half alone: `data:` framing with `Accept: text/event-stream` (`data: [DONE]` when it ends), NDJSON otherwise |
//! | `POST /haip/sse`, `/haip/message`, `/haip/handshake`; `POST /haip/stream` with `X-HAIP-Message: true` or `X-HAIP-Binary: true` | an upstream POST into an open SSE or stream session (below) |
//! | `GET /health`, `GET /stats`, `GET /metrics` | see [Operating haip](super::operating) |
//! | `/mcp` | MCP Streamable HTTP (feature `mcp`; [MCP both ways](super::mcp_both_ways)) |
//! | `GET /inspector` | the inspector page (feature `inspector`, when turned on) |
//!
//! A WebSocket upgrade on any other path, and any unknown route, get `404
//! {"error":"Not found","code":"NOT_FOUND"}`.
//!
//! ```text
//! → {"type":"TOOL_CALL","payload":{"call_id":"c-1","tool":"add","params":{"a":5,"b":3}}}
//! ← {"id":"…","session":"…","seq":"2","ts":"…","channel":"AGENT","type":"TOOL_DONE",
//!    "payload":{"call_id":"c-1","status":"OK","result":{"result":8}}}
//! ```
//!
//! SSE: open the stream, then POST envelopes to it:
//!
//! ```sh
//! curl -N http://127.0.0.1:8080/haip/sse            # terminal 1: data: events, HAI first
//! curl -d '{"type":"TOOL_CALL","payload":{"call_id":"c-1","tool":"add","params":{"a":5,"b":3}}}' \
//!      http://127.0.0.1:8080/haip/message           # terminal 2: {"status":"ok"}
//! ```
//!
//! HTTP streaming: type envelopes, one per line, and watch the replies:
//!
//! ```sh
//! curl -N -T - -H 'Content-Type: application/x-ndjson' http://127.0.0.1:8080/haip/stream
//! {"type":"TOOL_CALL","payload":{"call_id":"p-1","tool":"process_file","params":{"filename":"a.txt","operation":"read"}}}
//! {"type":"TOOL_CANCEL","payload":{"call_id":"p-1","reason":"changed my mind"}}
//! ```
//!
//! **Upstream POSTs** (§15.4). The body is one envelope, a JSON array of
//! envelopes, or NDJSON, each element handled as a message of its own
//! (over `max_message_bytes`: `MESSAGE_TOO_LARGE` for that element, the
//! rest handled). The session it is for, first match wins, among the
//! caller's open SSE and stream sessions: the first element's envelope
//! `session` (unless it is a resuming `HAI`), the `X-HAIP-Session` header,
//! the `session` query parameter, else the caller's only open one. None:
//! `404 SESSION_NOT_FOUND`. Success is `200 {"status":"ok"}` once the
//! elements are handled (not when the tools finish); problems inside the
//! body become `ERROR` envelopes on the stream, never HTTP errors. A body
//! over `max_body_bytes` gets `413 MESSAGE_TOO_LARGE`, refused before it is
//! read when its `Content-Length` says so. `X-HAIP-Binary: true` delivers a
//! binary body (base64-decoded when it is base64).
//!
//! **CORS** (§15.5) is off by default. With
//! [`ServerBuilder::cors_allowed_origins`] set, `OPTIONS` on any route gets
//! `204` with the allow headers, every response echoes a listed origin (or
//! `*`), and WebSocket upgrades check `Origin` against the list.
//!
//! ## The envelope
//!
//! Every message is one JSON object (§2). The server sends all seven fields on
//! every envelope: `id` (a fresh lower-case UUID v4), `session` (the
//! session's UUID), `seq` (decimal string, from `"1"`, +1 per envelope, no
//! gaps), `ts` (milliseconds since the epoch, decimal string), `channel`
//! (one of the five below), `type` and `payload` (an object); `run_id` and
//! `thread_id` are copied from a request onto every envelope about it.
//! Non-ASCII is raw UTF-8.
//!
//! It accepts much less: only `type` (a string) and `payload` (an object)
//! are required. `id` may be any string or number (else replies carry no
//! `related_id`); `session`, `seq` and `ts` are optional and loosely typed,
//! and `seq` is never used to drop or reorder; a missing or odd `channel`
//! is the type's default. Unknown keys are ignored, unless the envelope
//! says `crit: true`: then any key the protocol does not list for that
//! type gets `UNSUPPORTED_TYPE` with `detail.fields`.
//!
//! Each inbound message goes through these steps; the first that fails
//! decides the reply, and none of them closes the session except the
//! first:
//!
//! | step | check | on failure |
//! |---|---|---|
//! | 1 | at most `max_message_bytes` | `ERROR MESSAGE_TOO_LARGE`, then close (WebSocket 1009) |
//! | 2 | JSON, and an object | `ERROR INVALID_MESSAGE` |
//! | 3 | `type` a string, `payload` an object | `ERROR INVALID_MESSAGE`, `related_id` = its `id` |
//! | 4 | `type` one of the 22 below | `ERROR UNSUPPORTED_TYPE` |
//! | 5 | no unknown fields when `crit` is `true` | `ERROR UNSUPPORTED_TYPE` |
//! | 6 | `strict_flow_control` only: credit left | `ERROR FLOW_CONTROL_VIOLATION` |
//!
//! A session handles its messages one at a time, in arrival order; running
//! tools never delay that. With `strict_envelope` (off) step 3 also
//! requires the full envelope schema, and an envelope whose `seq` is not
//! above the highest seen is dropped.
//!
//! **Channels** (§4): `USER`, `AGENT`, `SYSTEM`, `AUDIO_IN`, `AUDIO_OUT`.
//! The server sends tool traffic on `AGENT` and control (`HAI`, `PING`,
//! `PONG`, `ERROR`, `FLOW_UPDATE`) on `SYSTEM`; it accepts any type on any
//! channel, and any name matching `^[A-Za-z0-9_\-]{1,128}$`.
//!
//! **The 22 types** (§5): `HAI`, `RUN_STARTED`, `RUN_FINISHED`,
//! `RUN_CANCEL`, `RUN_ERROR`, `PING`, `PONG`, `REPLAY_REQUEST`,
//! `TEXT_MESSAGE_START`, `TEXT_MESSAGE_PART`, `TEXT_MESSAGE_END`,
//! `AUDIO_CHUNK`, `TOOL_CALL`, `TOOL_UPDATE`, `TOOL_DONE`, `TOOL_CANCEL`,
//! `TOOL_LIST`, `TOOL_SCHEMA`, `ERROR`, `FLOW_UPDATE`, `PAUSE_CHANNEL`,
//! `RESUME_CHANNEL`; plus `TOOL_INPUT`, the answer to a tool's question
//! ([Talking to people](super::talking_to_people)).
//!
//! ```
//! use haip::protocol::{EventType, decode};
//!
//! // Lenient in: no id, no session, no seq, no channel.
//! let inbound = decode(r#"{"type":"PING","payload":{"nonce":"n-1"}}"#).unwrap();
//! assert_eq!(inbound.event, EventType::Ping);
//! assert_eq!(inbound.channel, "SYSTEM"); // the type's default channel
//! ```
//!
//! ## The handshake
//!
//! The server speaks first (§3): on every transport its first envelope is a
//! `HAI` (`haip_version` `"1.1.2"`, `accept_major` `[1]`, the 22 types in
//! `accept_events`, and `capabilities`: `binary_frames` (true on WebSocket only),
//! `flow_control` credit, `max_concurrent_runs`). The client learns its
//! session id from that envelope's `session`.
//!
//! The client's `HAI` is optional, accepted at any time and never awaited:
//! calls work without it. No `HAI` is sent in reply (except to confirm a
//! resumption). What it may carry:
//!
//! | in the client's `HAI` | effect |
//! |---|---|
//! | `accept_major` without `1` | `ERROR VERSION_INCOMPATIBLE`, then close (WebSocket 1002) |
//! | `accept_events` | filters **unsolicited** traffic only: heartbeat `PING`s, credit `FLOW_UPDATE`s, the pushed `TOOL_LIST`. Replies, errors and a call's updates always arrive |
//! | `capabilities.tool_input`, `.log_level` | questions and log lines ([Talking to people](super::talking_to_people)) |
//! | `capabilities.schema_profile` | the session's [schema profile](super::schemas) |
//! | `capabilities.flow_control`, `binary_frames` | credit returns and two-frame binary (below) |
//! | `session` naming another session, with `last_rx_seq` | a resumption (below) |
//!
//! ## Tool calls
//!
//! `TOOL_LIST` (§6.2; payload `{}`) is answered with `{"tools": [{name,
//! description, title?, annotations?, icons?}]}` in registry order;
//! `TOOL_SCHEMA {tool, profile?}` with `{tool, inputSchema, outputSchema?}`
//! (an unknown tool: `ERROR TOOL_NOT_FOUND`). A `TOOL_LIST` carrying
//! `tools`, or a `TOOL_SCHEMA` carrying a schema, is a client describing its
//! own tools: never answered.
//!
//! A `TOOL_CALL {call_id, tool, params}` (§6.4) goes through:
//!
//! 1. **call_id**: the payload's (a number becomes its text), else the
//!    envelope `id`, else a fresh UUID. Calls are keyed by session and id.
//! 2. **duplicate**: an id this session still has running gets `ERROR
//!    INVALID_MESSAGE` "Duplicate call_id", and nothing else; the first call
//!    goes on. A finished call's id may be used again.
//! 3. **lookup**: an unknown tool gets `ERROR TOOL_NOT_FOUND`, then
//!    `TOOL_DONE ERROR TOOL_NOT_FOUND`. When tools the caller may see have
//!    a name it likely meant (the name mounted under a prefix, `ops_crunch`
//!    for `crunch`, or a few edits away), the message names up to three
//!    (`Tool crunch not found; did you mean "ops_crunch"?`) and the details
//!    list them (`{"did_you_mean": ["ops_crunch"]}`).
//! 4. **validate**: `params` absent or `null` is `{}`; anything else is
//!    validated as sent (JSON Schema 2020-12, no type coercion, formats
//!    asserted, defaults not inserted). Any violation: `TOOL_DONE ERROR
//!    INVALID_PARAMS`, its `details` the first `max_violations` (20) by
//!    JSON pointer, its `total` how many there are; the tool does not run.
//! 5. **admit**: under `max_inflight_calls` (64) running, it starts; else
//!    under `max_queued_calls` (256) waiting, `TOOL_UPDATE QUEUED` and it
//!    starts when a slot frees, first in first out; else `TOOL_DONE ERROR
//!    RATE_LIMITED`.
//! 6. **run**: with `announce_running` (off), `TOOL_UPDATE RUNNING` first;
//!    the tool's timeout starts. With [layers](super::middleware), they run
//!    here, before step 4's check, which then applies to the params they
//!    pass on (the same `INVALID_PARAMS`).
//! 7. **finish** with exactly one `TOOL_DONE`.
//!
//! `TOOL_UPDATE` statuses: `QUEUED`, `RUNNING` (with `progress` 0–100,
//! integers kept integers, and `partial` when the tool gave one; or a
//! `log` line), `WAITING_INPUT` (a question), `CANCELLING`. Under
//! back-pressure a newer progress update replaces an unsent older one of
//! the same call; nothing else is ever merged or dropped. Per call, in `seq`
//! order: `QUEUED` < `RUNNING` … < `CANCELLING` < `TOOL_DONE`.
//!
//! `TOOL_DONE {call_id, status, result}`: `OK` with the value (left out when
//! `null`); `CANCELLED` with `{"reason"}` when there was one; `ERROR` with
//! `{"error": <message>, "code": <CODE>, "details"?}`:
//!
//! | code | when | details |
//! |---|---|---|
//! | `TOOL_NOT_FOUND` | step 3 | — |
//! | `INVALID_PARAMS` | step 4, or the tool's own check | `[{"path", "message"}, …]` |
//! | `TOOL_EXECUTION_ERROR` | the tool returned an error | what the tool gave |
//! | `TIMEOUT` | the tool's timeout elapsed | — |
//! | `INTERNAL_ERROR` | a panic, or a result that cannot be serialised; "instance lost" ([several instances](super::several_instances)) | — |
//! | `RATE_LIMITED` | step 5, the queue full; a [layer](super::middleware)'s limit | —; a layer's: `{"retry_after_ms"}` |
//! | `RESULT_TOO_LARGE` | the `TOOL_DONE` would exceed `max_outbound_message_bytes` | `{size, limit}` |
//! | `FORBIDDEN` | the caller lacks the tool's scopes ([Authentication](super::authentication#scopes)) | `{required, missing}` |
//! | any code a tool chose | [`ToolError::new`](crate::ToolError::new) | what the tool gave |
//!
//! A result that violates the tool's output schema is logged, counted
//! (`warnings` in `/health`) and sent as `OK`; `strict_output_validation`
//! makes it `TOOL_EXECUTION_ERROR`.
//!
//! **Cancelling** (§6.7). `TOOL_CANCEL {call_id, reason?}` for a running
//! call: `TOOL_UPDATE CANCELLING`, the tool's [`Context`](crate::Context) is
//! cancelled, up to `cancel_grace` (5 s) for it to stop, then its task is
//! aborted; `TOOL_DONE CANCELLED`. Unknown or finished ids are ignored.
//! `RUN_CANCEL` does this for every call of the run (reason `"run
//! cancelled"`), shutdown for every call (`"server shutdown"`). A timeout
//! is not a cancel: `TOOL_DONE ERROR TIMEOUT` goes at the deadline, then
//! the task is cancelled and aborted after the grace.
//!
//! Replies that run no tool (`TOOL_LIST`, `TOOL_SCHEMA`, `PONG`, errors)
//! come in request order; `TOOL_DONE`s in completion order. Every envelope
//! about a call carries its `call_id` and its `run_id`/`thread_id`; an
//! `ERROR` about a request has `related_id` = the request's `id`.
//! `TOOL_UPDATE` and `TOOL_DONE` from a client are accepted and ignored.
//!
//! ## Runs, heartbeat, text and audio
//!
//! **Runs** (§8) are the client's: `RUN_STARTED` records one (at most
//! `max_concurrent_runs`, 10, else `RUN_LIMIT_EXCEEDED`), `RUN_FINISHED`
//! closes it (its calls go on), `RUN_CANCEL` cancels its calls (calls
//! belong to a run through the envelope's or the payload's `run_id`);
//! unknown ones get `RUN_NOT_FOUND`, missing ids `MISSING_RUN_ID`. The
//! server never sends `RUN_*`, and calls need no run.
//!
//! **Heartbeat** (§9): `PING` is answered with `PONG` carrying its `nonce`. The
//! server pings every `heartbeat_interval` (30 s) on WebSocket, every
//! min(interval, 15 s) on streams (`: ping` comments on SSE framing when
//! the client filters `PING`s out). A missing `PONG` never closes a
//! connection; only `idle_timeout` (5 min without any inbound data) does.
//! WebSocket pings are answered with pongs.
//!
//! **Text and audio** (§10: `TEXT_MESSAGE_*`, `AUDIO_CHUNK`) are accepted with
//! any payload and not answered: the server authors neither.
//!
//! ## Sequence, replay and resumption
//!
//! Every envelope the server sends (§11) is kept, unchanged, in the session's
//! replay window: the newest `replay_window_messages` (1000) always, older
//! ones while younger than `replay_window_time` (5 min), never more than
//! ten times that count nor `replay_window_bytes` (1 MiB). All windows
//! together stay under `replay_budget_bytes` ([limits](super::limits)).
//!
//! `REPLAY_REQUEST {from_seq, to_seq?}` re-sends the kept envelopes of that
//! range, byte-identical (same `id`, `seq`, `ts`); a range reaching below
//! the oldest kept gets `ERROR REPLAY_TOO_OLD {oldest_seq}` and nothing.
//!
//! A session outlives its connection for `replay_window_time`: its calls
//! run on and their envelopes are kept. A client **resumes** it with a
//! `HAI` whose envelope `session` names it and whose payload carries
//! `last_rx_seq` (the highest `seq` it received), sent as the first message
//! of a new connection, by the same subject when authentication is on. The
//! server then re-sends every kept envelope after `last_rx_seq`, in order,
//! and confirms with a `HAI` carrying its own `last_rx_seq`; calls, runs,
//! pauses and the `seq` counter carry over, and a connection still open on
//! that session is closed (WebSocket 1000 `session resumed elsewhere`). A
//! refusal is `ERROR RESUME_FAILED` with `detail.reason` (`not first
//! message`, `unknown session`, `subject mismatch`, `invalid last_rx_seq`,
//! `window exceeded`), and the client stays on its fresh session.
//!
//! ## Flow control
//!
//! Credit (§12) is counted per channel, in messages and bytes. A client whose
//! `HAI` carries `capabilities.flow_control` gets its credit back in
//! `FLOW_UPDATE`s every 5 messages or 256 KiB owed. Credit it grants the
//! server is tracked, never waited for. `PAUSE_CHANNEL`/`RESUME_CHANNEL`
//! hold and release the server's envelopes on a channel (`SYSTEM` cannot be
//! paused). With `strict_flow_control` (off) an envelope beyond its credit
//! is dropped with `FLOW_CONTROL_VIOLATION` (a dropped call gets no
//! `TOOL_DONE`); otherwise the byte budgets bound memory instead.
//!
//! ## Binary frames
//!
//! On WebSocket (§13) an envelope with `bin_len` (and no `payload.data`) is
//! followed by one binary message of exactly that many bytes, its body;
//! another length, a text message or nothing within 10 s gets
//! `BINARY_FRAME_ERROR`. `payload.data` (base64) works on every transport.
//! The server sends binary only for audio an application sends.
//!
//! ## Errors and close codes
//!
//! An `ERROR` (§14; on `SYSTEM`) is `{code, message, related_id?, detail?}`;
//! clients key on `code`, and the server never answers a client's `ERROR`.
//!
//! | code | when | afterwards |
//! |---|---|---|
//! | `INVALID_MESSAGE` | not JSON, not an object, no `type`, a payload that is not an object; a duplicate `call_id`; `TOOL_SCHEMA` without `tool`; a bad `from_seq`/`to_seq`; an unknown schema profile | the session goes on |
//! | `UNSUPPORTED_TYPE` | an unknown type; unknown fields under `crit` | goes on |
//! | `VERSION_INCOMPATIBLE` | the client's `HAI` lacks major 1 | close (1002) |
//! | `TOOL_NOT_FOUND` | `TOOL_CALL` or `TOOL_SCHEMA` for no registered tool | a call's `TOOL_DONE` follows |
//! | `MISSING_RUN_ID`, `RUN_NOT_FOUND`, `RUN_LIMIT_EXCEEDED` | runs | goes on |
//! | `REPLAY_TOO_OLD`, `RESUME_FAILED` | replay, resumption | goes on (a fresh session) |
//! | `FLOW_CONTROL_VIOLATION` | `strict_flow_control` only | the envelope is dropped |
//! | `REQUEST_NOT_FOUND` | `TOOL_INPUT` for a question that is not open | goes on |
//! | `INVALID_PARAMS` | a `TOOL_INPUT` answer that does not fit | the question stays open |
//! | `BINARY_FRAME_ERROR` | §13 | goes on |
//! | `MESSAGE_TOO_LARGE` | a message over `max_message_bytes` | close (1009; streams end) |
//! | `MISSING_TOKEN`, `INVALID_TOKEN`, `TOKEN_EXPIRED` | WebSocket authentication ([Authentication](super::authentication)) | close (1008) |
//!
//! | WebSocket close | when |
//! |---|---|
//! | 1000 `session resumed elsewhere` | another connection resumed the session |
//! | 1001 `server shutdown` / `idle` | graceful shutdown, after every call got its `TOOL_DONE`; no inbound data for `idle_timeout` |
//! | 1002 | `VERSION_INCOMPATIBLE`, or a broken WebSocket frame |
//! | 1007 | invalid UTF-8 in a text message |
//! | 1008 | authentication refused; `outbound queue overflow` or `too slow` ([limits](super::limits)) |
//! | 1009 `message too large` | after `MESSAGE_TOO_LARGE` |
//! | 1011 | an unexpected fault on that connection; `instance lost` for a relayed connection |
//! | 1013 `too many sessions` | `max_sessions` reached, or the per-peer cap |
//!
//! HTTP errors have the body `{"error": <message>, "code": <CODE>}`: `401`
//! for authentication, `404` `SESSION_NOT_FOUND` or `NOT_FOUND`, `408` for a
//! body too slow, `413` `MESSAGE_TOO_LARGE`, `503` `TOO_MANY_SESSIONS`
//! (with `max_sessions` reached or over the per-peer cap) or over the body
//! budget (with `Retry-After`).
//!
//! [`ServerBuilder::cors_allowed_origins`]: crate::ServerBuilder::cors_allowed_origins
//!
//! ---
//!
//! Previous: [Talking to people](super::talking_to_people) · Next: [MCP both ways](super::mcp_both_ways)
