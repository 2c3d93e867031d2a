//! The JSON-RPC 2.0 error codes the MCP door answers with, in one table:
//! the protocol's own (`-32700` to `-32603`) and the server-defined one
//! haip uses for a busy server. Those only `/mcp` answers with exist with
//! the `mcp` feature.

/// Not JSON.
#[cfg(feature = "mcp")]
pub(crate) const PARSE_ERROR: i32 = -32700;
/// Not a valid request object.
pub(crate) const INVALID_REQUEST: i32 = -32600;
/// No such method.
#[cfg(feature = "mcp")]
pub(crate) const METHOD_NOT_FOUND: i32 = -32601;
/// Params of the wrong shape.
#[cfg(feature = "mcp")]
pub(crate) const INVALID_PARAMS: i32 = -32602;
/// The server failed (a task that failed, a result not kept).
#[cfg(feature = "mcp")]
pub(crate) const INTERNAL_ERROR: i32 = -32603;
/// Implementation-defined: the server is busy (a pool is full, or it is
/// shutting down); try again later.
#[cfg(feature = "mcp")]
pub(crate) const SERVER_BUSY: i32 = -32000;
