//! Serve an MCP server's tools over HAIP: the MCP server runs as a child
//! process, its tools appear in `TOOL_LIST` (prefixed with `MCP_PREFIX`, if
//! set), and calls, progress and cancellation are relayed both ways. The child
//! is restarted with back-off if it dies.
//!
//! ```text
//! cargo run -p haip-examples --example mcp_import -- npx -y @modelcontextprotocol/server-everything
//! cargo run -p haip --features cli -- tools ws://127.0.0.1:8080/haip
//! cargo run -p haip --features cli -- call ws://127.0.0.1:8080/haip get-sum a=2 b=3
//! ```
//!
//! With no arguments it runs `npx -y @modelcontextprotocol/server-everything`.
//! Listens on `HAIP_ADDR` or `127.0.0.1:8080`; logs go to stderr (`HAIP_LOG`).

use haip::mcp::McpImport;

#[tokio::main]
async fn main() -> Result<(), haip::Error> {
    haip_examples::init_logging("info,rmcp=warn");
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.is_empty() {
        argv = ["npx", "-y", "@modelcontextprotocol/server-everything"]
            .map(String::from)
            .to_vec();
    }
    let command = argv.remove(0);
    let import =
        McpImport::stdio(command, argv).prefix(std::env::var("MCP_PREFIX").unwrap_or_default());
    haip::Server::builder()
        .from_env()
        .mcp(import)
        .build()?
        .run()
        .await
}
