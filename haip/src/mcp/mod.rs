//! The MCP bridge: haip tools served to MCP clients (feature `mcp`), and
//! tools from MCP servers served over HAIP (feature `mcp-import`).
//!
//! **Import** (feature `mcp-import`). [`ServerBuilder::mcp_stdio`](crate::ServerBuilder::mcp_stdio)
//! runs an MCP server as a child process, [`ServerBuilder::mcp_http`](crate::ServerBuilder::mcp_http)
//! connects to one over Streamable HTTP ([`McpImport`] has the options). Its
//! tools join the registry with their input and output schemas, optionally
//! under a name prefix, and follow the server's `tools/list_changed`. A
//! `TOOL_CALL` becomes `tools/call` with a progress token; progress
//! notifications become `TOOL_UPDATE`s (`progress/total` as the percentage,
//! `message` as `partial`); `TOOL_CANCEL` sends `notifications/cancelled`; a
//! result with `isError` becomes `TOOL_EXECUTION_ERROR`. The result is the
//! structured content when there is some, otherwise `{"content": [...]}` with
//! the content blocks. When the connection ends (the child exits, say), calls
//! still waiting fail with `TOOL_EXECUTION_ERROR`, the tools leave the
//! registry, and the bridge reconnects with back-off.
//!
//! ```no_run
//! # #[cfg(feature = "mcp-import")]
//! #[tokio::main]
//! async fn main() -> Result<(), haip::Error> {
//!     haip::Server::builder()
//!         .mcp_stdio("npx", ["-y", "@modelcontextprotocol/server-everything"])
//!         .build()?
//!         .run()
//!         .await
//! }
//! # #[cfg(not(feature = "mcp-import"))]
//! # fn main() {}
//! ```
//!
//! **Export.** The registry (annotated, hand-written and imported tools alike)
//! is an MCP server: over stdio with [`serve_stdio`] or
//! [`Server::run_mcp_stdio`](crate::Server::run_mcp_stdio), and over Streamable
//! HTTP at `/mcp` on the HAIP server's own port (same authentication; see
//! [`ServerBuilder::mcp_endpoint`](crate::ServerBuilder::mcp_endpoint)). Calls
//! are validated against the input schema (violations come back as a tool
//! error the model can read), run with the tool's timeout, report
//! `ctx.progress` as MCP progress when the client sent a progress token, and
//! are cancelled by MCP cancellation. Registry changes are announced with
//! `notifications/tools/list_changed`. Tools that talk to people work here
//! too: `ctx.log` lines become `notifications/message` (the export declares
//! `logging` and honours `logging/setLevel`), `ctx.ask` becomes
//! `elicitation/create` (form mode) for clients that declare elicitation,
//! `ctx.sample` becomes `sampling/createMessage`, and
//! [`Content`](crate::Content) results become content blocks one to one.
//! `/mcp` serves each revision as it expects: a client that sends
//! `initialize` (2025-11-25 and before) gets an MCP session on this instance,
//! in which it is asked questions and told of registry changes; an MCP
//! 2026-07-28 request is served on its own (any instance answers it), takes
//! a call's questions (elicitation, sampling, roots) in rounds
//! (`input_required`), and hears of registry changes on a
//! `subscriptions/listen` stream.
//! [`ServerBuilder::mcp_sessions`](crate::ServerBuilder::mcp_sessions)`(false)`
//! serves older clients without sessions too.
//! Tools that declare [`TaskSupport`](crate::TaskSupport) run as MCP tasks
//! (the `io.modelcontextprotocol/tasks` extension) for clients that take
//! them: `tasks/get`, `tasks/update` (answers to questions asked inside the
//! task) and `tasks/cancel`, on any instance.
//!
//! ```no_run
//! /// Shout the input.
//! #[haip::haip_tool]
//! async fn shout(text: String) -> String {
//!     text.to_uppercase()
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), haip::Error> {
//!     haip::mcp::serve_stdio().await // stdout carries MCP: log to stderr
//! }
//! ```

// The import's items are named above; built without `mcp-import`, those
// names are shown as plain text rather than warned about.
#![cfg_attr(not(feature = "mcp-import"), allow(rustdoc::broken_intra_doc_links))]

pub(crate) mod export;
#[cfg(feature = "mcp-import")]
mod import;
pub(crate) mod inbound;
pub(crate) mod listen;
pub(crate) mod model;
pub(crate) mod mrtr;
mod peer;
mod stdio;
pub(crate) mod tasks;

#[cfg(feature = "mcp-import")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp-import")))]
pub use import::McpImport;
#[cfg(feature = "mcp-import")]
pub(crate) use import::start as start_imports;

/// The mark of a tool imported from an MCP server: a `{"content": [...]}`
/// result holds MCP content blocks, which the MCP export passes on as they are.
#[cfg(feature = "mcp-import")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct McpContent;

pub use stdio::serve_stdio;
