//! A call of an imported tool forwarded to its MCP server: `tools/call`
//! with a progress token and the call's trace, cancellation relayed as
//! `notifications/cancelled`, and the answer (or the failure) as a haip
//! result.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientNotification, ClientRequest, ContentBlock, MetaObject,
    RequestMetaObject, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient};
use serde_json::{Map, Value};

use crate::Context;
use crate::tool::ToolError;

use super::progress::ProgressRouter;

/// What an imported tool's handler needs to reach its server.
pub(super) struct Upstream {
    pub(super) peer: Peer<RoleClient>,
    pub(super) progress: Arc<ProgressRouter>,
    pub(super) label: String,
}

/// One call: `tools/call` with a progress token, progress relayed to the
/// context, cancellation relayed as `notifications/cancelled`.
pub(super) async fn call(
    link: &Upstream,
    remote_name: String,
    params: Value,
    ctx: Context,
    has_output_schema: bool,
    trace: Map<String, Value>,
) -> Result<Value, ToolError> {
    let arguments = match params {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => {
            return Err(ToolError::invalid_params(format!(
                "MCP tools take an object of arguments, not {other}"
            )));
        }
    };
    let mut params = CallToolRequestParams::new(remote_name.clone()).with_arguments(arguments);
    if !trace.is_empty() {
        params.meta = Some(RequestMetaObject(MetaObject(trace)));
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let gone = |e: &dyn std::fmt::Display| {
        ToolError::execution(format!(
            "the MCP server {} is not reachable: {e}",
            link.label
        ))
    };
    let mut handle = link
        .peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .map_err(|e| gone(&e))?;
    let _progress = link
        .progress
        .register(handle.progress_token.clone(), ctx.clone());
    let response = tokio::select! {
        response = &mut handle.rx => response,
        () = ctx.cancelled() => {
            let notice = CancelledNotification::new(CancelledNotificationParam::new(
                Some(handle.id.clone()),
                Some("cancelled by the HAIP client".into()),
            ));
            let _ = link
                .peer
                .send_notification(ClientNotification::CancelledNotification(notice))
                .await;
            return Err(ToolError::cancelled());
        }
    };
    let result = match response {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => return Err(mcp_error(link, &remote_name, e)),
        Err(_) => return Err(went_away(link, &remote_name)),
    };
    match result {
        ServerResult::CallToolResult(result) => tool_result(result, has_output_schema),
        other => Err(ToolError::execution(format!(
            "the MCP server {} answered `{remote_name}` with something other than a tool result: {}",
            link.label,
            serde_json::to_string(&other).unwrap_or_default()
        ))),
    }
}

/// The connection ended while the call waited for its answer.
fn went_away(link: &Upstream, remote_name: &str) -> ToolError {
    ToolError::execution(format!(
        "the MCP server {} went away during the call to `{remote_name}`",
        link.label
    ))
}

fn mcp_error(link: &Upstream, remote_name: &str, e: rmcp::ServiceError) -> ToolError {
    match e {
        rmcp::ServiceError::McpError(data) => {
            let message = format!(
                "the MCP server {} rejected the call to `{remote_name}`: {}",
                link.label, data.message
            );
            let details = serde_json::json!({ "mcp_code": data.code.0, "data": data.data });
            if data.code.0 == crate::protocol::jsonrpc::INVALID_PARAMS {
                ToolError::invalid_params(message).with_details(details)
            } else {
                ToolError::execution(message).with_details(details)
            }
        }
        rmcp::ServiceError::TransportClosed => went_away(link, remote_name),
        other => ToolError::execution(format!(
            "the call to `{remote_name}` on the MCP server {} failed: {other}",
            link.label
        )),
    }
}

/// A `CallToolResult` as a haip result: `isError` becomes
/// `TOOL_EXECUTION_ERROR` (its text as the message, the blocks as details);
/// otherwise the structured content when present, else `{"content": [...]}`.
fn tool_result(result: CallToolResult, has_output_schema: bool) -> Result<Value, ToolError> {
    let content = serde_json::to_value(&result.content).unwrap_or(Value::Array(Vec::new()));
    if result.is_error == Some(true) {
        let text = text_of(&result.content);
        let message = if text.is_empty() {
            "the MCP tool reported an error".to_owned()
        } else {
            text
        };
        return Err(
            ToolError::execution(message).with_details(serde_json::json!({ "content": content }))
        );
    }
    match result.structured_content {
        Some(structured) => Ok(structured),
        None if has_output_schema => Err(ToolError::execution(
            "the MCP tool declares an output schema but returned no structured content",
        )
        .with_details(serde_json::json!({ "content": content }))),
        None => Ok(serde_json::json!({ "content": content })),
    }
}

/// The text blocks, joined by newlines.
fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn text_result(text: &str, is_error: bool) -> CallToolResult {
        let blocks = vec![ContentBlock::text(text)];
        if is_error {
            CallToolResult::error(blocks)
        } else {
            CallToolResult::success(blocks)
        }
    }

    #[test]
    fn results_map_to_structured_content_or_content_blocks() {
        let plain = tool_result(text_result("hi", false), false).unwrap();
        assert_eq!(plain, json!({"content": [{"type": "text", "text": "hi"}]}));

        let mut structured = text_result("{\"a\":1}", false);
        structured.structured_content = Some(json!({"a": 1}));
        assert_eq!(tool_result(structured, true).unwrap(), json!({"a": 1}));

        let missing = tool_result(text_result("no structure", false), true).unwrap_err();
        assert_eq!(missing.code().as_str(), "TOOL_EXECUTION_ERROR");
        assert!(missing.message().contains("no structured content"));
    }

    #[test]
    fn is_error_becomes_a_tool_execution_error_with_the_text() {
        let mut result = text_result("disk full", true);
        result.content.push(ContentBlock::text("try again later"));
        let e = tool_result(result, false).unwrap_err();
        assert_eq!(e.code().as_str(), "TOOL_EXECUTION_ERROR");
        assert_eq!(e.message(), "disk full\ntry again later");
        assert_eq!(e.details().unwrap()["content"][0]["text"], "disk full");

        let silent = tool_result(CallToolResult::error(Vec::new()), false).unwrap_err();
        assert_eq!(silent.message(), "the MCP tool reported an error");
    }
}
