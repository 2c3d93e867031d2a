//! [`serve_stdio`]: the whole server over MCP stdio in one call, for a binary
//! whose tools are its `#[haip_tool]` functions.

use crate::{Error, Server};

/// Serves every `#[haip_tool]` function linked into the binary to an MCP client
/// on stdin and stdout, until stdin closes or Ctrl-C / SIGTERM.
///
/// This is [`Server::builder`] with the environment applied and the annotated
/// tools, [`run over MCP stdio`](Server::run_mcp_stdio). Nothing else may
/// write to stdout: send logs to stderr.
pub async fn serve_stdio() -> Result<(), Error> {
    Server::builder()
        .from_env()
        .annotated_tools()
        .build()?
        .run_mcp_stdio()
        .await
}
