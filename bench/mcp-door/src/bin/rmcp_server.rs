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

use std::sync::Arc;

use axum::serve::ListenerExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

#[derive(Clone)]
struct Echo {
    tool: Tool,
}

impl Echo {
    fn new() -> Self {
        let object = |value: Value| match value {
            Value::Object(map) => Arc::new(map),
            _ => unreachable!("a schema literal is an object"),
        };
        let mut tool = Tool::new(
            "echo",
            "Echo back the input",
            object(json!({
                "type": "object",
                "properties": {"message": {"type": "string"}},
                "required": ["message"],
            })),
        );
        tool.output_schema = Some(object(json!({
            "type": "object",
            "properties": {"echoed": {"type": "string"}},
        })));
        Self { tool }
    }
}

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("rmcp-echo", "0.1.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![self.tool.clone()]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == "echo").then(|| self.tool.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "echo" {
            return Err(ErrorData::invalid_params(
                format!("no tool {}", request.name),
                None,
            ));
        }
        let message = request
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get("message"))
            .filter(|message| message.is_string())
            .cloned()
            .ok_or_else(|| ErrorData::invalid_params("echo takes a string `message`", None))?;
        let value = json!({ "echoed": message });
        let mut result = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
        result.structured_content = Some(value);
        Ok(result.into())
    }
}

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
