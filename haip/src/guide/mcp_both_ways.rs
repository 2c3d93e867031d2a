//! # MCP both ways
//!
//! haip meets the Model Context Protocol both ways: it serves its registry
//! to MCP clients, over stdio and at `/mcp` (feature `mcp`), and it imports
//! MCP servers' tools into its registry (feature `mcp-import`, which turns
//! on `mcp` too: `haip = { version = "0.1", features = ["mcp-import"] }`).
//! Serving needs no MCP client code: the import's client (child processes,
//! an HTTP client) is built only with `mcp-import`. [`crate::mcp`] has the
//! API.
//!
//! Examples: `examples/mcp_import.rs` (an MCP server's tools over HAIP),
//! `examples/mcp_export.rs` (the quickstart's tools over MCP stdio) and
//! `examples/conformance.rs` (the fixture tools of MCP's official
//! conformance suite, written as plain `#[haip_tool]` functions; `cargo
//! test` runs the suite against it, see `tests/conformance/README.md`: every
//! server scenario passes except those about MCP resources, prompts and
//! completion, which a tool framework does not serve).
//!
//! ## Import: an MCP server's tools over HAIP
//!
//! The MCP server runs as a child process (stdio) or is reached over
//! Streamable HTTP; its tools join `TOOL_LIST` and `TOOL_SCHEMA` with their
//! input and output schemas, and calls are validated against them like any
//! other tool's.
//!
//! ```no_run
//! # #[cfg(feature = "mcp-import")]
//! # async fn run() -> Result<(), haip::Error> {
//! use haip::mcp::McpImport;
//!
//! haip::Server::builder()
//!     .mcp_stdio("npx", ["-y", "@modelcontextprotocol/server-everything"])
//!     .mcp(McpImport::http("http://127.0.0.1:3001/mcp").prefix("remote.")) // a name prefix
//!     .build()?
//!     .run()
//!     .await
//! # }
//! ```
//!
//! ```sh
//! cargo run -p haip-examples --example mcp_import -- npx -y @modelcontextprotocol/server-everything
//! haip call ws://127.0.0.1:8080/haip get-sum a=2 b=3
//! ```
//!
//! | HAIP | MCP |
//! |---|---|
//! | `TOOL_CALL` | `tools/call`, with a progress token |
//! | `TOOL_UPDATE RUNNING` | `notifications/progress`: `progress`/`total` → `progress` percent (none without a total), `message` → `partial` |
//! | `TOOL_CANCEL` → `TOOL_DONE CANCELLED` | `notifications/cancelled` |
//! | `TOOL_DONE OK` | the result's `structuredContent`, or `{"content": [...]}` with its content blocks |
//! | `TOOL_DONE ERROR TOOL_EXECUTION_ERROR` | a result with `isError` (its text is the message), a JSON-RPC error, or the server going away mid-call |
//! | the registry follows the server | `notifications/tools/list_changed` |
//!
//! When the connection ends (the child exits, say), calls still waiting end
//! with `TOOL_EXECUTION_ERROR`, the tools leave `TOOL_LIST`, and the bridge
//! reconnects with back-off (250 ms doubling to 30 s by default;
//! [`McpImport::restart_backoff`]). The server's start waits for the first
//! connection (at most [`McpImport::connect_timeout`], 30 s). An imported
//! tool whose name is taken is skipped with a warning: give the import a
//! [`prefix`](crate::mcp::McpImport::prefix). [`McpImport`] also sets a
//! child's environment and working directory, or an HTTP server's bearer
//! token. `https://` URLs need the `mcp-tls` feature. With
//! [`advertise_tools`](crate::ServerBuilder::advertise_tools) on, HAIP
//! clients whose `HAI` lists `TOOL_LIST` in `accept_events` are sent the new
//! list whenever the registry changes. Imports follow `tools/list`
//! pagination.
//!
//! ## Export: haip tools to MCP clients
//!
//! The whole registry (annotated, hand-written and imported tools) is an MCP
//! server, over stdio and over Streamable HTTP at `/mcp` on the HAIP port
//! (same authentication as the rest of the server;
//! [`ServerBuilder::mcp_endpoint`]`(false)` turns it off):
//!
//! ```no_run
//! # #[cfg(feature = "mcp")]
//! #[tokio::main]
//! async fn main() -> Result<(), haip::Error> {
//!     haip::mcp::serve_stdio().await // every #[haip_tool]; stdout carries MCP, log to stderr
//! }
//! # #[cfg(not(feature = "mcp"))]
//! # fn main() {}
//! ```
//!
//! [`Server::run_mcp_stdio`] does the same for a server built with settings
//! and state. To try it: `cargo build -p haip-examples --example mcp_export`,
//! then point an MCP client's command at `target/debug/examples/mcp_export`
//! (`npx @modelcontextprotocol/inspector target/debug/examples/mcp_export`).
//!
//! Each tool is listed with its input schema (in the [profile](super::schemas)
//! the client asked for: `?schema_profile=` on the `/mcp` URL), its output
//! schema when that describes an object, and its title, hints and icons.
//! Calls are validated first: violations come back as an `isError` result
//! listing each offending path, which a model can read and fix. Results
//! carry the value as text, plus `structuredContent` when the tool has an
//! object output schema; tool errors are `isError` results with the message
//! and code. Imported MCP tools keep their content blocks (images included)
//! when exported again, so haip can also sit between MCP clients and MCP
//! servers.
//!
//! | a tool does | an MCP client gets |
//! |---|---|
//! | `ctx.progress` | `notifications/progress` (`progress` = percent, `total` = 100, `message` = `partial`) when the request carried a progress token |
//! | `ctx.log` | `notifications/message`, honouring `logging/setLevel` |
//! | `ctx.ask` | `elicitation/create` in form mode |
//! | `ctx.sample` | `sampling/createMessage` |
//! | `ctx.roots` | `roots/list` |
//! | returns `Content` | content blocks, one to one |
//! | is cancelled | on `notifications/cancelled` (or, without sessions, the client closing the call's response stream) |
//!
//! Every registry change (imported tools included) is announced with
//! `notifications/tools/list_changed`. Calls keep their timeouts, panic
//! capture and the `max_inflight_calls` limit (per MCP session). The export
//! has no call queue: beyond `max_inflight_calls` a call gets an `isError`
//! result at once. The whole list is one `tools/list` page.
//!
//! ## Revisions
//!
//! `/mcp` and stdio speak MCP 2026-07-28 (no `initialize`: each request
//! carries its protocol version and client capabilities in `_meta`;
//! `server/discover`; `resultType` on every result; cache hints on
//! `tools/list`; the `Mcp-Method`/`Mcp-Name` header rules) and the earlier
//! revisions that open with `initialize` (2025-11-25 and before), whichever
//! the client speaks. `cargo test` runs the official conformance suites of
//! both against the `conformance` example.
//!
//! ## Sessions for older clients, none for 2026-07-28
//!
//! `/mcp` serves each revision as it expects, on one endpoint. A client that
//! opens with `initialize` (2025-11-25 and before: most hosts today, the
//! official Python and TypeScript SDKs' default handshake) gets an **MCP
//! session** on the instance that served it (`Mcp-Session-Id`), which
//! serves the client's later requests, its answers to elicitation
//! (`ctx.ask`, `ctx.confirm`) and sampling, and the `GET` stream that
//! carries `notifications/tools/list_changed`; its `DELETE` ends the
//! session (`204`). A 2026-07-28 request (no `initialize`) is **served on
//! its own**: any instance answers it, its questions go by rounds (below),
//! and it hears of registry changes on a `subscriptions/listen` stream.
//! Over stdio there is always one session.
//!
//! **Several instances.** With Redis ([several
//! instances](super::several_instances)), MCP sessions are kept there too,
//! as HAIP sessions and MCP tasks are: any instance behind a load balancer
//! serves any request of a session. A call runs where its request arrived;
//! the client's answer to its question, and its cancellation, are passed
//! to that instance whichever instance they reach; a `DELETE` ends the
//! session everywhere. Without Redis a session lives on the instance that
//! opened it: keep each MCP client on one instance (sticky sessions, for
//! example on the `Mcp-Session-Id` header); a request that reaches another
//! instance is answered `404`, and the client opens a new session.
//!
//! **No sessions at all**: [`ServerBuilder::mcp_sessions`]`(false)` (or
//! `HAIP_MCP_SESSIONS=0` with `from_env`) serves every request on its own,
//! older clients' too, so any instance answers any request, even one that
//! never saw the client's `initialize`. Such a client sees no
//! `Mcp-Session-Id`; a result with nothing before it comes back as plain
//! `application/json`; a call's progress and log lines come on its own
//! response stream (SSE) before the result, and the client closing that
//! stream cancels the call. `GET` and `DELETE` get `405`.
//! `logging/setLevel` holds for its own request only (a level in a
//! request's `_meta`, `io.modelcontextprotocol/logLevel`, holds for that
//! request). `max_sessions` bounds the MCP requests being served at once.
//! An older client cannot be asked anything then: its answer would be a new
//! POST that nothing waits for, so `ctx.ask` and `ctx.confirm` fail at once
//! with an error saying that the client has no session and naming
//! `mcp_sessions` ([`AskError::Failed`](crate::AskError::Failed)), even when
//! it declared elicitation.
//!
//! ## Questions without sessions
//!
//! A 2026-07-28 client that declares elicitation (sampling, roots) gets a
//! stateless call's questions by rounds: the call answers `resultType:
//! "input_required"` with the questions it waits for (`inputRequests`,
//! keyed by [`Ask::key`](crate::Ask::key), `ask-1`, `ask-2`, … by default)
//! and a signed `requestState`; the client retries with `inputResponses`,
//! and **the tool runs again from the start**, each question finding its
//! answer at once. What a tool does before a question therefore runs once
//! per round: keep it free of side effects, and ask the same questions in
//! the same order (the rule is on [`Context::ask`](crate::Context::ask)).
//!
//! The server keeps nothing between rounds, so the retry may reach any
//! instance that shares the key ([`ServerBuilder::request_state_key`],
//! `HAIP_REQUEST_STATE_KEY`; random per process by default); a state that
//! was tampered with, has expired ([`Limits::request_state_ttl`],
//! 10 min) or belongs to another call is refused (`-32602`). A question of a
//! kind the client did not declare fails at once in the tool
//! ([`AskError::Unsupported`](crate::AskError::Unsupported),
//! [`SampleError::Unsupported`](crate::SampleError::Unsupported)); if the
//! call then fails, the client is answered `-32021` (missing required
//! client capability) naming what it lacks. Older clients are asked in
//! their session; with `mcp_sessions(false)` they cannot be asked at all
//! (at once, naming the setting).
//!
//! What waiting costs, measured with `bash bench/asking_memory.sh 1000`
//! (release quickstart, 1 000 `book_table` calls between question and
//! answer): nothing measurable without sessions (RSS −5 KiB per call,
//! noise), about 174 KiB per waiting call with sessions.
//!
//! ## Tasks
//!
//! A tool that may take long declares `#[haip_tool(task)]` (`task =
//! "required"` for one that always runs as a task;
//! [`ToolBuilder::task_support`] with [`TaskSupport`]). For a client that
//! declares the `io.modelcontextprotocol/tasks` extension, its call starts as
//! any call; once it waits for anything but answers of the client's next
//! round, the answer is a task (`resultType: "task"`, `taskId`, `ttlMs`,
//! `pollIntervalMs`), and the call runs on.
//!
//! - `tasks/get` shows its status, its open questions (`input_required`;
//!   `ctx.ask` in a task waits for `tasks/update`, answered one at a time if
//!   the client likes) and finally its result: a tool error completes the
//!   task with `isError`, a panic fails it with a JSON-RPC error.
//!   `tasks/cancel` cancels the call.
//! - A call that finishes at once answers at once (a `required` tool's
//!   answer is then a task holding the result); questions asked before the
//!   call first waits go by rounds, so the task starts with their answers.
//!   A `required` tool refuses clients without the extension (`-32021`).
//! - Tasks are their caller's own (another subject is told the task does
//!   not exist), bounded per caller ([`Limits::max_tasks_per_client`],
//!   100 running per instance), in bytes
//!   ([`Limits::max_task_bytes`], 64 MiB per instance), and in each
//!   caller's share of those bytes, its running and ended tasks until they
//!   expire ([`Limits::max_task_bytes_per_client`], 8 MiB; across
//!   all instances with Redis), so one caller cannot fill the store; and
//!   kept [`Limits::task_ttl`] (30 min) after they end.
//! - An authenticated caller's `subscriptions/listen` stream also hears its
//!   tasks' changes of status (`notifications/tasks`, on the instance
//!   running the task; `tasks/get` stays the truth).
//! - With Redis ([several instances](super::several_instances)) the records
//!   live in Redis: any instance answers `tasks/*`, passing answers and
//!   cancellations on to the instance running the call, and a task whose
//!   instance died fails with "instance lost", once, unless its tool is
//!   marked idempotent: then another instance runs it again from the start,
//!   with its client's answers, up to [`Limits::task_attempts`] times
//!   ([tasks that outlive their
//!   instance](super::several_instances#tasks-that-outlive-their-instance)).
//!
//! ## Not mapped
//!
//! MCP resources, prompts and completion (HAIP tools have no counterpart).
//! The import's MCP client advertises none of the client capabilities, and
//! calls imported tools without tasks.
//!
//! ## `/mcp` under load
//!
//! `/mcp` is held to the same byte budgets as HAIP before a request reaches
//! the MCP server; browsers' `Origin`s are checked against DNS rebinding.
//! Both are in [Settings, limits and budgets](super::limits#mcp-under-the-same-budgets).
//!
//! [`McpImport`]: crate::mcp::McpImport
//! [`McpImport::restart_backoff`]: crate::mcp::McpImport::restart_backoff
//! [`McpImport::connect_timeout`]: crate::mcp::McpImport::connect_timeout
//! [`Server::run_mcp_stdio`]: crate::Server::run_mcp_stdio
//! [`ServerBuilder::mcp_endpoint`]: crate::ServerBuilder::mcp_endpoint
//! [`ServerBuilder::mcp_sessions`]: crate::ServerBuilder::mcp_sessions
//! [`ServerBuilder::request_state_key`]: crate::ServerBuilder::request_state_key
//! [`Limits::request_state_ttl`]: crate::Limits::request_state_ttl
//! [`Limits::max_tasks_per_client`]: crate::Limits::max_tasks_per_client
//! [`Limits::max_task_bytes_per_client`]: crate::Limits::max_task_bytes_per_client
//! [`Limits::max_task_bytes`]: crate::Limits::max_task_bytes
//! [`Limits::task_ttl`]: crate::Limits::task_ttl
//! [`Limits::task_attempts`]: crate::Limits::task_attempts
//! [`ToolBuilder::task_support`]: crate::ToolBuilder::task_support
//! [`TaskSupport`]: crate::TaskSupport
//!
//! ---
//!
//! Previous: [Transports and the wire](super::the_wire) · Next: [Authentication](super::authentication)
