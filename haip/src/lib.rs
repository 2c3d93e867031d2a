//! # haip
//!
//! Turn ordinary async Rust functions into tools and serve them over HAIP, the
//! Human-Agent Interaction Protocol: discovery (`TOOL_LIST`, `TOOL_SCHEMA`),
//! calls with progress and cancellation (`TOOL_CALL` → `TOOL_UPDATE` →
//! `TOOL_DONE`, `TOOL_CANCEL`), over WebSocket, SSE or HTTP streaming, with
//! optional JWT authentication ([`auth`]), replay and resumption after a lost
//! connection, and flow control. A Rust client is in `haip::client` (feature
//! `client`); the `haip` command line is behind the `cli` feature; the MCP
//! bridge (`haip::mcp`) is the `mcp` feature (serving MCP clients; on by
//! default) and the `mcp-import` feature (importing MCP servers' tools too).
//!
//! ```no_run
//! use haip::{haip_tool, Context, ToolError};
//!
//! /// The sum of two numbers.
//! #[haip::data]
//! struct Sum {
//!     result: f64,
//! }
//!
//! /// Add two numbers.
//! #[haip_tool]
//! async fn add(
//!     /// First operand.
//!     a: f64,
//!     /// Second operand.
//!     b: f64,
//! ) -> Sum {
//!     Sum { result: a + b }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), haip::Error> {
//!     haip::serve().await // every #[haip_tool] in the binary
//! }
//! ```
//!
//! [`#[haip_tool]`](haip_tool) derives the tool's schemas from the signature at
//! compile time; [`Tool::builder`] writes a tool by hand. Every call is
//! validated against the tool's input schema before it runs, runs in its own
//! task, and ends with exactly one `TOOL_DONE`, whether it succeeds, fails,
//! panics, times out or is cancelled. [`Server::builder`] configures limits,
//! state and the set of tools; [`ServerHandle`] changes the tools while the
//! server runs; [`layer`] puts middleware around every call (rate limits,
//! caching, error masking, your own).
//!
//! The [`guide`] explains the rest, chapter by chapter: writing tools,
//! schemas, tools that talk to people, the wire, MCP, authentication,
//! several instances, limits, operating, testing, the CLI and the inspector,
//! middleware, composing tools ([`ToolSet`], mounts, tags, [`ToolEdit`]).

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
pub mod auth;
#[cfg(feature = "client")]
#[cfg_attr(docsrs, doc(cfg(feature = "client")))]
pub mod client;
#[cfg(feature = "redis")]
mod cluster;
mod content;
mod context;
mod error;
mod exec;
pub mod guide;
mod hash;
pub mod layer;
pub mod lint;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
mod otel;
pub mod protocol;
mod schema;
mod server;
mod session;
mod stats;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod tool;
mod transport;

pub use content::{Content, EmbeddedResource, Rich};
pub use context::{
    Answer, Ask, AskError, CancellationHandle, Confirm, Context, ListRoots, LogLevel, QuestionForm,
    Role, Root, RootsError, SampleError, SampleRequest, Sampled,
};
pub use error::Error;
pub use protocol::{Icon, IconTheme, ToolAnnotations};
pub use schema::{SchemaProblem, SchemaProfile, UnknownProfile, Violation};
pub use server::{
    HaipService, Limits, Listener, Mount, PeerAddr, Server, ServerBuilder, ServerHandle,
    ServiceBody, ToolSet, serve,
};
pub use tool::{
    Injected, Params, State, TaskSupport, Tool, ToolBuilder, ToolEdit, ToolError, ToolFuture,
    ToolHandler,
};

pub use haip_macros::{data, haip_tool};

/// `serde_json`'s [`json!`](serde_json::json) macro and [`Value`],
/// re-exported: a tool crate needs them for [`ToolError::with_details`],
/// hand-written tools ([`Tool::builder`]), `Value` parameters and
/// `haip::testing`'s params, and with them `haip` stays its only
/// dependency (tokio aside). They are `serde_json`'s own: values mix freely
/// with a crate that depends on `serde_json` itself.
pub use serde_json::{Value, json};

// The traits `#[haip_tool]`'s compile errors are about ("the trait `ToolArg`
// is not implemented for `Plain`"), re-exported at the root only so that rustc
// names them without the `__private` path. Not public API.
#[doc(hidden)]
pub use __private::{InjectedArg, ToolArg, ToolErrorType, ToolOutput};
