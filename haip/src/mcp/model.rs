//! The MCP messages the export reads and writes, named in one place: what a
//! request, a result, a notification or an error is on the wire.
//!
//! They are still the MCP SDK's model types, re-exported: this list is what
//! serving MCP needs of the SDK (its transports and client are the import's
//! alone, feature `mcp-import`). haip's own definitions are to take their
//! places here, so that the export's code does not change with them.

// MCP logging and sampling are deprecated upstream (SEP-2577), and still
// what today's MCP clients speak.
#![allow(deprecated)]

pub(crate) use rmcp::ErrorData as McpError;
pub(crate) use rmcp::ServerHandler;
pub(crate) use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock,
    CreateMessageRequestParams, CreateTaskResult, DetailedTask, DiscoverResult,
    ElicitRequestParams, ErrorCode, GetMeta, GetTaskResult, Icon, IconTheme, Implementation,
    InitializeRequestParams, InitializeResult, InputRequests, InputRequiredResult, InputResponses,
    JsonObject, ListToolsResult, LoggingLevel, LoggingMessageNotificationParam, MetaObject,
    NotificationMetaObject, ProgressNotificationParam, ProgressToken, ProtocolVersion, RequestId,
    ServerCapabilities, ServerConfig, ServerJsonRpcMessage, ServerNotification, ServerResult,
    SetLevelRequestParams, SubscriptionFilter, SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams, SubscriptionsListenResult, TASKS_EXTENSION_ID,
    Task, TaskPayload, TaskStatus, TaskStatusNotification, TaskStatusNotificationParams, Tool,
    ToolAnnotations, ToolListChangedNotification,
};
