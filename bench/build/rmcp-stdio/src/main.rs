//! One tool over MCP stdio, with rmcp.

#[path = "../../rmcp_echo.rs"]
mod rmcp_echo;

use rmcp::ServiceExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = rmcp_echo::Echo::new()
        .serve(rmcp::transport::stdio())
        .await?;
    server.waiting().await?;
    Ok(())
}
