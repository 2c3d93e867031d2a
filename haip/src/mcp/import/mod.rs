//! Import: an MCP server's tools, served as haip tools.
//!
//! One supervisor task per [`McpImport`] connects (spawning the child or
//! opening the Streamable HTTP session), lists the server's tools and registers
//! them, re-lists them on `notifications/tools/list_changed`, and when the
//! connection ends removes them and reconnects with back-off.
//!
//! By concern:
//!
//! - `builder.rs`: [`McpImport`], what an import is given, checked at build;
//! - `supervise.rs`: the supervisor: connecting (the child process or the
//!   HTTP session), listing and registering the tools, reconnecting;
//! - `convert.rs`: an MCP tool as a haip tool (name, description, schemas,
//!   title, hints, icons);
//! - `forward.rs`: a call of an imported tool forwarded as `tools/call`, and
//!   its answer as a haip result;
//! - `progress.rs`: the server's progress notifications routed to the calls
//!   they belong to.

mod builder;
mod convert;
mod forward;
mod progress;
mod supervise;

pub use builder::McpImport;
pub(crate) use supervise::start;
