//! The `echo` tool of the bare rmcp servers (the build fixtures here, and
//! `bench/mcp-door`'s `rmcp_server`), written against rmcp's `ServerHandler`
//! as its own examples do: `{"echoed": message}` as text and as structured
//! content, the result haip's built-in `echo` gives.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

#[derive(Clone)]
pub struct Echo {
    tool: Tool,
}

impl Echo {
    pub fn new() -> Self {
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
