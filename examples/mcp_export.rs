//! Serve the quickstart's tools (`echo`, `add`, `weather`, `calculator`,
//! `process_file`, `create_user`, `book_table`) to an MCP client over stdio.
//! Point an MCP client's "command" at the built binary, or try it with the
//! MCP Inspector:
//!
//! ```text
//! cargo build -p haip-examples --example mcp_export
//! npx @modelcontextprotocol/inspector target/debug/examples/mcp_export
//! ```
//!
//! stdout carries MCP; logs go to stderr (`HAIP_LOG`, default `warn`).

// Links the annotated tools into this binary.
use haip_examples as _;

#[tokio::main]
async fn main() -> Result<(), haip::Error> {
    haip_examples::init_logging("warn,rmcp=error");
    haip::Server::builder()
        .from_env()
        .builtin_tools()
        .annotated_tools()
        .build()?
        .run_mcp_stdio()
        .await
}
