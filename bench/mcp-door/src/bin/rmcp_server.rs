//! A bare rmcp Streamable HTTP server with one tool, `echo`, whose result is
//! the one haip's built-in `echo` gives: `{"echoed": message}` as text in
//! `content` and as `structuredContent`. Served by axum at `/mcp`, the way
//! rmcp's own examples serve it.
//!
//! ```text
//! rmcp_server      # on HAIP_ADDR (default 127.0.0.1:8080), at /mcp
//! ```
//!
//! Sessions for the revisions before 2026-07-28 (rmcp's `legacy_session_mode`,
//! its default); a 2026-07-28 request is served statelessly, and answered
//! with `application/json` (`json_response`), as rmcp allows.

#[path = "../../../build/rmcp_echo.rs"]
mod rmcp_echo;

use axum::serve::ListenerExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp_echo::Echo;

/// The allocator of haip's examples, embed_bench among them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("HAIP_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let echo = Echo::new();
    let config = StreamableHttpServerConfig::default().with_json_response(true);
    let service: StreamableHttpService<Echo, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(echo.clone()), Default::default(), config);
    let router = axum::Router::new().nest_service("/mcp", service);
    // TCP_NODELAY, as haip and the floor set it: without it, the chunks of
    // an event-stream answer wait on the client's delayed ACK (~40 ms).
    let listener = tokio::net::TcpListener::bind(&addr)
        .await?
        .tap_io(|stream| {
            let _ = stream.set_nodelay(true);
        });
    axum::serve(listener, router).await?;
    Ok(())
}
