//! # haip
//!
//! Turn ordinary async Rust functions into tools and serve them over HAIP, the
//! Human-Agent Interaction Protocol: discovery (`TOOL_LIST`, `TOOL_SCHEMA`),
//! calls with progress and cancellation (`TOOL_CALL` → `TOOL_UPDATE` →
//! `TOOL_DONE`, `TOOL_CANCEL`), over WebSocket.
//!
//! ```no_run
//! use haip::{Context, Server, Tool, ToolError};
//! use serde_json::{json, Value};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), haip::Error> {
//!     let greet = Tool::builder("greet")
//!         .description("Say hello")
//!         .input_schema(json!({
//!             "type": "object",
//!             "properties": {"name": {"type": "string"}},
//!             "required": ["name"]
//!         }))
//!         .handler(|params: Value, ctx: Context| async move {
//!             ctx.progress(50.0);
//!             Ok::<_, ToolError>(json!({ "greeting": format!("Hello, {}!", params["name"].as_str().unwrap_or("")) }))
//!         })
//!         .build()?;
//!     Server::builder().from_env().tool(greet).build()?.run().await
//! }
//! ```
//!
//! Every call is validated against the tool's input schema before the handler
//! runs, runs in its own task, and ends with exactly one `TOOL_DONE`, whether
//! it succeeds, fails, panics, times out or is cancelled.

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
mod context;
mod error;
mod exec;
pub mod protocol;
mod schema;
mod server;
mod session;
mod tool;
mod transport;

pub use context::{CancellationHandle, Context};
pub use error::Error;
pub use schema::Violation;
pub use server::{Server, ServerBuilder, ServerHandle, serve};
pub use tool::{Injected, Params, State, Tool, ToolBuilder, ToolError, ToolFuture, ToolHandler};

pub use haip_macros::{data, haip_tool};
